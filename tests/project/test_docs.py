"""The pages stay honest: README's length, its claims table against a run, every link, every command.

* README.md is at most 250 lines; its claims table's runtime and verdict columns equal
  ``docs/data/default_run.json`` (written by ``tools/claims_table.py`` after a default run), whose
  claims, evidence and steps the smoke run must still have;
* every relative link of README.md and docs/*.md resolves (a heading anchor too);
* every command of their ``bash`` blocks parses (``bash -n``), its program answers ``--help``, and
  every ``--option`` it uses is one that program lists; the claims table's commands dry-run
  (``snakemake -n``) in the smoke run;
* every module of ``pcast`` (the folder ``kernels/``) has its ``automodule`` in docs/api/, and every module of
  ``kernels/emulator/`` its line in docs/contributing.md's table of the emulator's modules.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from claims_table import FINDING_STEPS, STEPS, fmt_seconds, summarize

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
DEFAULT_RUN = json.loads((ROOT / "docs" / "data" / "default_run.json").read_text(encoding="utf-8"))
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub and MyST make it: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


def _anchors(page: Path) -> set[str]:
    body = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", body, flags=re.M)}


def _claims_rows() -> list[list[str]]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("<!-- claims-table -->")[1].split("<!-- /claims-table -->")[0]
    rows = [re.split(r"(?<!\\)\|", ln.strip())[1:-1] for ln in table.strip().splitlines()[2:]]
    return [[c.strip() for c in r] for r in rows]


def test_readme_is_at_most_250_lines():
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= 250, f"README.md has {n} lines"


def test_claims_table_matches_the_default_run_file():
    assert DEFAULT_RUN["preset"] == "default", "docs/data/default_run.json must come from a default-preset run"
    rows = _claims_rows()
    claims = DEFAULT_RUN["claims"]
    seen = set()
    for claim, _, command, runtime, verdict in rows:
        cid = claim.split()[0].rstrip(":")
        targets = command.strip("`").split()[3:]
        assert command.strip("`").split()[:3] == ["snakemake", "--cores", "2"], command
        if cid == "all":
            assert targets == ["claims"] and runtime == fmt_seconds(DEFAULT_RUN["all_job_s"])
            continue
        assert cid in claims, f"README claims table names {cid!r}, not a claim of the default run"
        seen.add(cid)
        assert sorted(targets) == sorted(claims[cid]["evidence"]), (cid, targets)
        assert runtime == fmt_seconds(claims[cid]["job_s"]), (cid, runtime, claims[cid]["job_s"])
        assert verdict.split(":")[0].split()[0] == claims[cid]["verdict"], (cid, verdict)
        if "cell" in claims[cid]:  # generated from the run's claims.json (tools/claims_table.py --readme)
            assert verdict == claims[cid]["cell"], (cid, verdict)
    assert seen == set(claims), f"claims missing from the README table: {sorted(set(claims) - seen)}"


def test_performance_steps_table_is_the_default_run_file():
    page = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    table = page.split("<!-- steps-table -->")[1].split("<!-- /steps-table -->")[0].strip().splitlines()[2:]
    want = [f"| `{k}` | {v['jobs']} | {v['total_s']:.1f} | {v['slowest_s']:.1f} |"
            for k, v in DEFAULT_RUN["steps"].items()]
    want.append(f"| **all** | {DEFAULT_RUN['all_jobs']} | {DEFAULT_RUN['all_job_s']:.1f} | |")
    assert table == want


def test_performance_bench_table_is_the_bench_file():
    """docs/performance.md's table of machines is the rendering of docs/data/bench.json, and each machine's
    entry names its CPU, vendor, ISA and BLAS, and each measurement its load."""
    import perf_table  # (tools/ is on the path: tests/conftest.py)

    data = json.loads(perf_table.DATA.read_text())
    page = perf_table.PAGE.read_text(encoding="utf-8")
    table = page.split(perf_table.MARK[0])[1].split(perf_table.MARK[1])[0].strip()
    assert table == perf_table.render(data), "stale: run `python tools/perf_table.py write`"
    for m in data["machines"]:
        assert all(m["machine"][k] for k in ("cpu", "vendor", "isa", "blas", "cores"))
        for run in ("pair", "sweep", "loaded"):
            assert m[run]["load_before"] >= 0 and m[run]["load_after"] >= 0
        assert m["loaded"]["busy"] == 2


@pytest.mark.smoke_reader
def test_the_smoke_run_has_the_default_runs_claims_and_steps(smoke_run):
    smoke = summarize(smoke_run)
    assert {k: v["evidence"] for k, v in smoke["claims"].items()} == \
        {k: v["evidence"] for k, v in DEFAULT_RUN["claims"].items()}
    assert set(smoke["steps"]) == set(DEFAULT_RUN["steps"])
    assert all(c["job_s"] > 0 for c in smoke["claims"].values())
    used = {s for steps in (*STEPS.values(), *FINDING_STEPS.values()) for s in steps} | {"claims/claims"}
    assert set(smoke["steps"]) <= used, f"steps no claim's command runs: {sorted(set(smoke['steps']) - used)}"


def test_claims_table_commands_dry_run_in_the_smoke_run(smoke_run):
    targets = sorted({t for r in _claims_rows() for t in r[2].strip("`").split()[3:]})
    proc = subprocess.run(["snakemake", "-n", "--cores", "2", *targets, "--config", "preset=smoke"],
                          cwd=smoke_run, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Nothing to be done" in proc.stdout + proc.stderr


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: link to {target} does not resolve"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{page.name}: no heading #{anchor} in {dest.name}"


def _commands() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        for block in FENCE.findall(page.read_text(encoding="utf-8")):
            for cmd in block.replace("\\\n", " ").splitlines():
                cmd = cmd.split("  #")[0].strip()
                if cmd and not cmd.startswith("#"):
                    out.append((page.name, cmd))
    return out


def _program(words: list[str]) -> list[str] | None:
    """The words that name the program (``python -m pip install``, ``pcast-audit``), or None for a shell
    builtin or a command that needs root or an absent tool."""
    if words[0] in ("export", "sudo", "cd", "conda"):
        return None
    if words[0] == "python":
        if words[1] == "-m":
            return words[:4] if words[2] == "pip" else words[:3]
        return words[:2]
    if words[:2] == ["uv", "pip"]:  # uv pip compile, uv pip install: the subcommand's own options
        return words[:3]
    return words[:1]


# the extra of pyproject.toml that brings each documented tool outside the slim install
TOOL_EXTRA = {"snakemake": "pipeline", "snakefmt": "test", "sphinx": "test", "uv": "test", "pytest": "test"}


def _skip_if_absent(program: list[str]) -> None:
    """Skip, naming the extra that brings it, when a documented tool is not installed here."""
    if program[0] == "python":
        name = program[2] if program[1] == "-m" else None
        # pip comes with every venv; asking the import system for it in this process would also switch off
        # setuptools' distutils shim here (its finder does that when it sees pip imported), which breaks any
        # later import of setuptools (torch.utils.cpp_extension, for mmasim)
        present = name in (None, "pip") or importlib.util.find_spec(name) is not None
    else:
        name = program[0]
        present = shutil.which(name) is not None
    if not present:
        extra = TOOL_EXTRA.get(name)
        if extra is None:
            pytest.fail(f"{name} is documented but neither installed nor brought by an extra")
        pytest.skip(f"{name} is not installed: the '{extra}' extra brings it (the README's test command)")


@functools.lru_cache(maxsize=None)
def _help(program: tuple[str, ...]) -> str:
    argv = [sys.executable if w == "python" else w for w in program]
    proc = subprocess.run([*argv, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(program)} --help failed: {proc.stderr[-2000:]}"
    return proc.stdout + proc.stderr


# one worker runs these, so each program's --help (seconds for snakemake, whose SLURM plugin asks the
# controller for its configuration on import) runs once per run
@pytest.mark.xdist_group("doc-commands")
@pytest.mark.parametrize("page,cmd", _commands(), ids=lambda x: x if len(x) < 40 else x[:40])
def test_every_command_parses_and_its_options_exist(page, cmd):
    proc = subprocess.run(["bash", "-n", "-c", cmd], capture_output=True, text=True)
    assert proc.returncode == 0, f"{page}: {cmd}: {proc.stderr}"
    for part in cmd.split("&&"):
        words = [w for w in shlex.split(part) if "=" not in w or w.startswith("-")]
        program = _program(words) if words else None
        if program is None:
            continue
        _skip_if_absent(program)
        text = _help(tuple(program))
        for w in words[len(program):]:
            if w.startswith("--"):
                assert w.split("=")[0] in text, f"{page}: {' '.join(program)} has no option {w}"


def test_every_module_is_in_the_api_reference():
    listed = set()
    for rst in (ROOT / "docs" / "api").glob("*.rst"):
        listed |= set(re.findall(r"^\.\. automodule:: (\S+)", rst.read_text(encoding="utf-8"), flags=re.M))
    modules = set()
    for f in (ROOT / "kernels").rglob("*.py"):
        parts = ("pcast",) + f.relative_to(ROOT / "kernels").with_suffix("").parts
        modules.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    assert modules - listed == set(), f"modules missing from docs/api/: {sorted(modules - listed)}"


def test_the_contributing_guide_lists_every_emulator_module():
    page = (ROOT / "docs" / "contributing.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `kernels/emulator/(\w+)\.py` \| \S", page, flags=re.M))
    files = {f.stem for f in (ROOT / "kernels" / "emulator").glob("*.py")} - {"__init__"}
    assert files - rows == set(), f"missing from docs/contributing.md's emulator table: {sorted(files - rows)}"
    assert rows - files == set(), f"docs/contributing.md's emulator table names no module: {sorted(rows - files)}"
