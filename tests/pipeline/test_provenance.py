"""Which library code each rule runs (its `code` param) and the check that the imported `pcast`
is this checkout's, on a made-up package (pcast.pipeline.provenance), then in Snakemake itself:

* after the session's smoke run, editing ``kernels/theory/collapse.py`` makes ``snakemake -n`` rerun
  the statistics, figures, tables and claims that use it and no sweep; editing the emulator reruns
  the sweeps and the conformance shards (dry runs only);
* a checkout whose ``kernels/`` differs from the imported one stops before any job, naming the fix.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from pcast.pipeline import provenance as P

from repo_copy import copy_repo

REPO = Path(__file__).resolve().parents[2]
SWEEP_RULES = {"inputs", "sweep_shard", "conformance_shard", "tidy_table"}
ANALYSIS = re.compile(r"^(stats_|fig_|table_|claims$)")


def _package(root: Path) -> Path:
    files = {
        "kernels/__init__.py": '_LAZY = {"attention": "api"}\n',
        "kernels/api.py": "def attention():\n    from pcast.core import run\n    return run()\n",
        "kernels/core.py": "def run():\n    return 1\n",
        "kernels/theory/__init__.py": "from pcast.theory.law import phi\n",
        "kernels/theory/law.py": "def phi():\n    return 0\n",
        "kernels/unused.py": "x = 1\n",
        "script_api.py": "from pcast import attention\n",
        "script_theory.py": "import os\nfrom pcast.theory import phi\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_modules_used_follow_lazy_names_function_imports_and_package_inits(tmp_path):
    root = _package(tmp_path)
    assert P.modules_used(root, root / "script_api.py") == ["pcast", "pcast.api", "pcast.core"]
    assert P.modules_used(root, root / "script_theory.py") == ["pcast", "pcast.theory", "pcast.theory.law"]


def test_code_digest_changes_only_with_the_modules_a_script_runs(tmp_path):
    root = _package(tmp_path)
    P.module_file.cache_clear(), P._parse.cache_clear(), P._imports.cache_clear(), P._file_sha256.cache_clear()
    before = {s: P.code_digest(root, root / s) for s in ("script_api.py", "script_theory.py")}
    (root / "kernels/core.py").write_text("def run():\n    return 2\n")
    (root / "kernels/unused.py").write_text("x = 2\n")
    P._file_sha256.cache_clear()
    after = {s: P.code_digest(root, root / s) for s in before}
    assert after["script_api.py"] != before["script_api.py"]
    assert after["script_theory.py"] == before["script_theory.py"]


def test_checkout_mismatch(tmp_path):
    mine = _package(tmp_path / "mine")
    same = _package(tmp_path / "same")
    assert P.checkout_mismatch(mine, str(mine / "kernels/__init__.py")) is None
    assert P.checkout_mismatch(mine, str(same / "kernels/__init__.py")) is None  # the same code
    (same / "kernels/core.py").write_text("def run():\n    return 3\n")
    msg = P.checkout_mismatch(mine, str(same / "kernels/__init__.py"))
    assert f"the 'pcast' the rules' scripts import is {same / 'kernels'}" in msg and "first core.py" in msg
    assert f"pip install --no-deps -e {mine.resolve()}" in msg and "\n" not in msg
    assert "cannot import 'pcast'" in P.checkout_mismatch(mine, None)


def test_imported_by_jobs_follows_pythonpath_not_the_current_folder(tmp_path, monkeypatch):
    import sys

    root = _package(tmp_path / "pkg")
    monkeypatch.chdir(tmp_path / "pkg")  # a job's folder: not on its path
    monkeypatch.setenv("PYTHONPATH", P.import_path(REPO, tmp_path / "path-repo"))
    assert Path(P.imported_by_jobs(sys.executable)).resolve() == REPO / "kernels" / "__init__.py"
    monkeypatch.setenv("PYTHONPATH", P.import_path(root, tmp_path / "path-pkg"))
    assert Path(P.imported_by_jobs(sys.executable)).resolve() == root.resolve() / "kernels" / "__init__.py"


# ---------------------------------------------------------------------------------------------
# in Snakemake (dry runs)

pytestmark_smk = pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake not installed")


def _dry_run(cwd: Path, checkout: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=P.import_path(checkout, tempfile.mkdtemp(prefix="pcast-path-")))
    return subprocess.run(["snakemake", "-n", "--config", "preset=smoke"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def _jobs(out: str) -> dict[str, dict[str, str]]:
    """rule -> {wildcards: reason} of every job ``snakemake -n`` lists (Snakemake names one reason:
    a job whose inputs are remade shows that, even when its params changed too)."""
    found: dict[str, dict[str, str]] = {}
    for block in re.split(r"\n(?=\[[^\]]+\]\n(?:local)?rule )", "\n" + out):
        m = re.search(r"^(?:local)?rule (\w+):$", block, re.M)
        reason = re.search(r"^\s+reason: (.*)$", block, re.M)
        if m and reason:
            wc = re.search(r"^\s+wildcards: (.*)$", block, re.M)
            found.setdefault(m.group(1), {})[wc.group(1) if wc else ""] = reason.group(1)
    return found


def _direct(jobs: dict) -> set[str]:
    return {r for r, w in jobs.items() if any(v.startswith("Params have changed") for v in w.values())}


def _edited(smoke_run: Path, rel: str):
    """Run a dry run with one library module edited (a comment appended), then restore it."""
    path = smoke_run / rel
    text, stat = path.read_bytes(), path.stat()
    path.write_bytes(text + b"\n# an edit\n")
    try:
        return _dry_run(smoke_run, smoke_run)
    finally:
        path.write_bytes(text)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


@pytestmark_smk
def test_editing_the_theory_reruns_its_analysis_and_no_sweep(smoke_run):
    res = _edited(smoke_run, "kernels/theory/collapse.py")
    assert res.returncode == 0, res.stderr[-3000:]
    jobs = _jobs(res.stdout)
    listed, direct = set(jobs) - {"all"}, _direct(jobs)
    assert not SWEEP_RULES & listed, sorted(listed)  # no input, shard or merge job
    # statistics whose tidy tables did not change, and a figure and a table whose inputs did not change
    # either (the conformance ones), rerun because the code they run changed
    assert {"stats_collapse", "stats_paired", "stats_scales", "stats_threshold", "fig_conformance",
            "table_conformance"} <= direct, sorted(direct)
    assert {"fig_collapse", "fig_theory_scale", "table_thresholds", "claims"} <= listed
    # the tensorcore job runs its experiment and its summary in one job, so it is analysis too
    assert all(ANALYSIS.match(r) or r.startswith("realmodel_") or r == "tensorcore" for r in listed), sorted(listed)


@pytestmark_smk
def test_editing_the_emulator_reruns_the_sweeps(smoke_run):
    res = _edited(smoke_run, "kernels/emulator/core.py")
    assert res.returncode == 0, res.stderr[-3000:]
    jobs = _jobs(res.stdout)
    direct = _direct(jobs)
    assert set(jobs["sweep_shard"]) == {f"experiment={e}, shard=000" for e in
                                        ("collapse", "scales", "threshold", "policies", "fp4", "dynamic",
                                                                 "decode")}
    assert all(v.startswith("Params have changed") for v in jobs["sweep_shard"].values())
    assert {"sweep_shard", "conformance_shard", "realmodel_capture"} <= direct
    assert "inputs" not in jobs  # the inputs do not run the emulator
    # they rerun for their inputs only; T9's rule computes its cases with the emulator itself
    assert not {r for r in direct if ANALYSIS.match(r)} - {"table_cases"}, sorted(direct)
    assert "table_cases" in direct and "tensorcore" in direct


@pytestmark_smk
def test_another_checkouts_kernels_stops_the_run_with_the_fix(tmp_path):
    other = copy_repo(tmp_path / "other")
    (other / "kernels/contract/__init__.py").write_text((REPO / "kernels/contract/__init__.py").read_text()
                                                        + "\n# another checkout's edit\n")
    res = _dry_run(other, REPO)  # imports this checkout's package, not the copy's
    assert res.returncode != 0
    err = res.stdout + res.stderr
    assert f"not this checkout's {other.resolve() / 'kernels'}" in err and "contract/__init__.py" in err
    assert f"pip install --no-deps -e {other.resolve()}" in err
    assert not (other / "results").exists() and "pcast-fp8 plan" not in err  # stopped before the plan
