"""Fixtures shared across test modules: one smoke-preset run of the whole workflow per session.

``smoke_run`` is the one full pipeline run of the test suite; ``test_pipeline``, ``test_figures``
and others read its outputs and dry-run against it. A test that changes a file of that run puts it
back as it was (bytes and modification time) before it returns, and a test that needs another run
makes its own copy (:func:`repo_copy.copy_repo`), so test order does not matter.

Under pytest-xdist the run is made once for the whole session, not once per worker: the first worker
to ask builds it under a file lock in the session's shared temporary folder, the others wait and
reuse it (or re-raise its failure). Tests that run Snakemake in the run's tree or change files there
are sent to one worker (the ``xdist_group`` "smoke", with ``--dist loadgroup``), so no two of them
touch it at once; tests marked ``smoke_reader`` only read its outputs (or compare their own runs with
them) and may run on any worker.
"""

from __future__ import annotations

import fcntl
import inspect
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Test support (the loop oracle, synthetic tables, repo copies) and the tools the tests exercise.
for _d in (ROOT / "tests" / "support", ROOT / "tools"):
    if str(_d) not in sys.path:
        sys.path.insert(0, str(_d))

from repo_copy import copy_repo  # noqa: E402

SMOKE_TIMEOUT_S = 1800  # alone about 1.5 minutes; on a 2-core machine shared with other work it took over 15


def _build_smoke_run(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir(parents=True)
    copy_repo(repo)
    for d in ("results", "figures", ".snakemake"):
        shutil.rmtree(repo / d, ignore_errors=True)
    proc = subprocess.run(["snakemake", "--cores", "2", "--config", "preset=smoke"], cwd=repo,
                          capture_output=True, text=True, timeout=SMOKE_TIMEOUT_S)
    (root / "snakemake.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"the smoke run failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}")
    return repo


@contextmanager
def _locked(path: Path):
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes
        yield


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory) -> Path:
    """A copy of the repository after a clean ``snakemake --cores 2 --config preset=smoke``.

    Returns the copy's root. Snakemake's output (stdout, then stderr) is kept beside it, in
    ``smoke_run.parent / "snakemake.log"``, outside the copy. Made once per session (module docstring).
    """
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the folder the session's workers share
    root, failed = shared / "smoke", shared / "smoke.failed"
    with _locked(shared / "smoke.lock"):
        if failed.exists():
            pytest.fail(failed.read_text(), pytrace=False)
        if not (root / "repo").exists():
            try:
                _build_smoke_run(root)
            except Exception as e:  # the other workers report the same failure instead of rebuilding
                failed.write_text(str(e))
                raise
    return root / "repo"


_RUNS_THE_WORKFLOW = ("snakemake", "copy_repo(", "smk(")


def _runs_the_workflow(item) -> bool:
    """The test uses the smoke run or a repository copy, or its source starts Snakemake."""
    if {"smoke_run", "repo_copy"} & set(getattr(item, "fixturenames", ())):
        return True
    try:
        source = inspect.getsource(item.function)
    except (AttributeError, OSError, TypeError):
        return False
    return any(word in source for word in _RUNS_THE_WORKFLOW)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups off the markers
def pytest_collection_modifyitems(config, items):
    """Tests that use the smoke run, other than its readers, share one xdist worker (module
    docstring); tests that run the workflow are marked ``pipeline_run``, so that the inner loop
    (``-m "not slow and not cluster and not pipeline_run and not install and not heavy"``) can leave them out."""
    for item in items:
        if "smoke_run" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("smoke_reader"):
            item.add_marker(pytest.mark.xdist_group("smoke"))
        if _runs_the_workflow(item):
            item.add_marker(pytest.mark.pipeline_run)


@pytest.fixture
def one_thread():
    """torch on one thread for the test, as the pipeline's jobs run (the old count restored after): the
    emulator's matmuls are small, and on a shared 2-core machine torch's thread pool spins and can
    make them 100x slower."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
