"""The measured figures of the README and docs: measure them, and write them into the text.

Every disk, memory, time and job-count figure that the README and the docs state outside the claims
table sits between ``<!-- measured:KEY -->`` and ``<!-- /measured -->``, and is rendered from
``docs/data/measured.json`` by :data:`TEMPLATES`. ``tests/project/test_measured.py`` checks that the text
is the rendering of the file. Each measurement records the machine and its load (the 1-minute load
average before and after), so a time says where it was taken.

Usage:
    python tools/measure.py run --preset smoke      # a fresh copy of the checkout, timed (default too)
    python tools/measure.py install                 # fresh venvs: the slim instrument and every extra
    python tools/measure.py tests                   # the README's inner loop
    python tools/measure.py write                   # render the marked spans from the file
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "measured.json"
PAGES = ("README.md", "docs/pipeline.md", "docs/performance.md", "docs/reproducibility.md")
SPAN = re.compile(r"<!-- measured:([\w-]+) -->(.*?)<!-- /measured -->", re.S)
INNER_LOOP = 'not slow and not cluster and not pipeline_run and not install and not heavy'
RECORD_CHECK = "tests/project/test_measured.py::test_the_recorded_test_run_passed"
LOCK = ROOT / "requirements" / "cpu.lock"


def machine() -> dict:
    cpu = ""
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                   if ln.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"cores": os.cpu_count(), "memory_gib": round(mem / 2**30, 1), "cpu": cpu}


def _timed(cmd: list[str], cwd: Path, env: dict | None = None, check: bool = True) -> dict:
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if check and proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return {"wall_s": round(wall, 1), "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2),
            "stdout": proc.stdout + proc.stderr}


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def measure_run(preset: str, cores: int, keep: Path | None = None) -> dict:
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from repo_copy import copy_repo

    with tempfile.TemporaryDirectory() as tmp:
        where = copy_repo(keep if keep is not None else Path(tmp) / "run")
        got = _timed(["snakemake", "--cores", str(cores), "--config", f"preset={preset}"], where)
        results = where / "results"
        benches = list((results / "benchmarks").rglob("*.tsv"))
        rss = 0.0
        for f in benches:
            with f.open() as fh:
                for row in csv.DictReader(fh, delimiter="\t"):
                    if row.get("max_rss") not in (None, "", "NA", "-"):
                        rss = max(rss, float(row["max_rss"]))
        return {"preset": preset, "cores": cores, "wall_s": got["wall_s"], "load_before": got["load_before"],
                "load_after": got["load_after"], "jobs": len(benches),  # one benchmark a job; the target `all` is none
                "peak_job_rss_mb": round(rss), "results_mb": round(_du(results) / 1e6),
                "inputs_mb": round(_du(results / "inputs") / 1e6),
                "realmodel_inputs_mb": round(_du(results / "inputs" / "realmodel") / 1e6)
                if (results / "inputs" / "realmodel").exists() else 0,
                "figures_mb": round(_du(where / "figures") / 1e6, 1)}


def measure_install(extras: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp) / "v"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        target = f"{ROOT}[{extras}]" if extras else str(ROOT)
        got = _timed([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-cache-dir", "-c", str(LOCK),
                      target], ROOT)
        return {"extras": extras, "wall_s": got["wall_s"], "load_before": got["load_before"],
                "load_after": got["load_after"], "venv_mb": round(_du(venv) / 1e6)}


def failed_tests(output: str) -> list[str]:
    """The tests a pytest run's output reports as failed or in error (its short summary's ``FAILED`` and
    ``ERROR`` lines), and the summary line's counts when it has failures without naming them."""
    named = re.findall(r"^(?:FAILED|ERROR) (\S+)", output, re.M)
    if named:
        return named
    tail = [ln for ln in output.splitlines() if re.search(r"\d+ (passed|failed|error)", ln)]
    summary = tail[-1] if tail else ""
    return [summary.strip("= ")] if re.search(r"\d+ (failed|errors?)\b", summary) or not tail else []


def measure_tests(workers: str) -> dict:
    """The inner loop, timed; a run with a failure (or no summary) is refused, naming the failing tests: a
    measurement of a failing suite is not the suite's figure."""
    # the check of the recorded run reads the record this run replaces, so this run leaves it out
    got = _timed([sys.executable, "-m", "pytest", "-q", "-rfE", "-n", workers, "-m", INNER_LOOP,
                  "-p", "no:cacheprovider", "--deselect", RECORD_CHECK], ROOT, check=False)
    failed = failed_tests(got["stdout"])
    if failed:
        sys.exit(f"the test run failed, so it is not recorded ({len(failed)} failed): " + ", ".join(failed))
    tail = [ln for ln in got["stdout"].splitlines() if " passed" in ln][-1]
    return {"command": f'python -m pytest -m "{INNER_LOOP}"', "wall_s": got["wall_s"],
            "load_before": got["load_before"], "load_after": got["load_after"], "summary": tail.strip("= ")}


# ---------------------------------------------------------------------------------------------
# the text


def fmt_time(s: float) -> str:
    s = round(s)
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60:02d} s"


def fmt_mb(mb: float) -> str:
    return f"{mb / 1000:.1f} GB" if mb >= 1000 else f"{mb:.0f} MB"


def where(m: dict) -> str:
    """The machine and load a figure was measured on, in words."""
    mach = m["machine"]
    return (f"{mach['cores']} cores, {mach['memory_gib']:g} GiB, {mach['cpu']}; 1-minute load "
            f"{m['load_before']:g} before, {m['load_after']:g} after")


def _install(d):
    s, f = d["install"]["slim"], d["install"]["full"]
    return (f"Measured ({where(s)}; pip's cache empty, the local index): the slim install takes "
            f"{fmt_time(s['wall_s'])} and makes a {fmt_mb(s['venv_mb'])} venv; the README's test install, every "
            f"extra, {fmt_time(f['wall_s'])} and {fmt_mb(f['venv_mb'])}.")


def _inner(d):
    t = d["tests"]
    n = sum(int(x) for x in re.findall(r"(\d+) (?:passed|failed|skipped|xfailed)", t["summary"]))
    return f"It runs {n} tests in {fmt_time(t['wall_s'])} ({where(t)})."


def _hardware(d):
    r = d["runs"]["default"]
    return (f"2 cores; the default preset's largest job peaked at {fmt_mb(r['peak_job_rss_mb'])} and the run writes "
            f"{fmt_mb(r['results_mb'])} under `results/`")


def _smoke(d):
    r = d["runs"]["smoke"]
    return f"{r['jobs']} jobs, {fmt_time(r['wall_s'])} with `--cores {r['cores']}` ({where(r)})"


def _default(d):
    r = d["runs"]["default"]
    return (f"The whole default run took {fmt_time(r['wall_s'])} of wall time with `--cores {r['cores']}` "
            f"({where(r)}): {r['jobs']} jobs, at most {fmt_mb(r['peak_job_rss_mb'])} per job")


def _disk(d):
    r = d["runs"]["default"]
    return (f"The default preset writes {fmt_mb(r['results_mb'])} under `results/`: "
            f"{fmt_mb(r['inputs_mb'])} of inputs, {fmt_mb(r['realmodel_inputs_mb'])} of them the real model's "
            f"captured tensors.")


#: key -> the text between its markers, from measured.json
TEMPLATES = {"install": _install, "inner-loop": _inner, "hardware": _hardware, "smoke": _smoke,
             "default": _default, "disk": _disk}


def render(text: str, data: dict) -> str:
    def one(m):
        try:
            return f"<!-- measured:{m.group(1)} -->{TEMPLATES[m.group(1)](data)}<!-- /measured -->"
        except KeyError:  # not measured yet: the text stays as it is
            return m.group(0)

    return SPAN.sub(one, text)


def load() -> dict:
    return json.loads(DATA.read_text()) if DATA.exists() else {}


def save(data: dict) -> None:
    DATA.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    run = sub.add_parser("run", help="a fresh copy of the checkout through one preset, timed")
    run.add_argument("--preset", choices=("smoke", "default"), required=True)
    run.add_argument("--cores", type=int, default=2)
    run.add_argument("--keep", type=Path, default=None, help="run in this (new) folder and keep it")
    sub.add_parser("install", help="fresh venvs: the slim instrument, then every extra")
    tests = sub.add_parser("tests", help="the README's inner loop")
    tests.add_argument("--workers", default="auto")
    sub.add_parser("write", help="render the marked spans of the README and docs from the file")
    args = ap.parse_args(argv)
    data = load()
    mach = machine()
    if args.what == "run":
        data.setdefault("runs", {})[args.preset] = {**measure_run(args.preset, args.cores, args.keep),
                                                  "machine": mach}
    elif args.what == "install":
        data["install"] = {"slim": {**measure_install(""), "machine": mach},
                           "full": {**measure_install("pipeline,triton,tensorcore,test,slurm"), "machine": mach}}
    elif args.what == "tests":
        data["tests"] = {**measure_tests(args.workers), "machine": mach}
    if args.what != "write":
        save(data)
        print(json.dumps(data, indent=1, sort_keys=True))
    for page in PAGES:
        path = ROOT / page
        text = path.read_text()
        new = render(text, data)
        if new != text:
            path.write_text(new)
            print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
