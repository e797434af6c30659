"""The SLURM profile (workflow/profiles/slurm): resources from the environment, a clear stop when a
variable is missing, and, on a real single-node SLURM (tests/cluster/start-slurm.sh), the smoke
preset through the profile with byte-identical tables and verdicts, and recovery after ``scancel``.

The first two need only the executor plugin (the ``slurm`` extra); the third is marked ``cluster``
and is skipped where no SLURM answers. CI (.ci/run) starts SLURM first, so it runs there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from repo_copy import REPO, copy_repo

pytest.importorskip("snakemake_executor_plugin_slurm", reason="the slurm extra is not installed")

PROFILE = "workflow/profiles/slurm"
KERNEL_RULES = ("sweep_shard", "conformance_shard", "realmodel_heads", "realmodel_outputs")
SLURM_TIMEOUT_S = 900


def _fresh_copy(tmp_path: Path) -> Path:
    """The checkout's tracked files only (copy_repo leaves out the ignored results/, figures/, .snakemake/)."""
    return copy_repo(tmp_path / "repo")


def _env(**values) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PCAST_SLURM_")}
    env.update(values)
    return env


def _dry_run_resources(repo: Path, env: dict) -> dict[str, list[dict]]:
    """rule -> the resources of each of its jobs, as a dry run through the profile prints them."""
    proc = subprocess.run(["snakemake", "-n", "-F", "--workflow-profile", PROFILE, "--config", "preset=smoke"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs: dict[str, list[dict]] = {}
    rule = None
    for line in (proc.stdout + proc.stderr).splitlines():
        m = re.match(r"^(?:local)?rule (\w+):$", line.strip())
        if m:
            rule = m.group(1)
        elif line.strip().startswith("resources:") and rule:
            pairs = (p.split("=", 1) for p in line.strip()[len("resources:"):].split(", "))
            jobs.setdefault(rule, []).append({k.strip(): v for k, v in pairs})
            rule = None
    return jobs


def test_profile_names_no_cluster_of_its_own():
    text = (REPO / PROFILE / "config.yaml").read_text()
    assert "YOUR_" not in text
    prof = yaml.safe_load(text)
    assert prof["executor"] == "slurm"
    assert prof["default-resources"]["slurm_account"] == "'$PCAST_SLURM_ACCOUNT'"
    assert set(KERNEL_RULES) <= set(prof["set-resources"])


@pytest.mark.parametrize("gpu_partition", ["gpu", ""])
def test_profile_resources_follow_the_environment(tmp_path, gpu_partition):
    """Account and partitions come from PCAST_SLURM_*; a GPU only on the kernel jobs, and only when a
    GPU partition is named."""
    repo = _fresh_copy(tmp_path)
    env = _env(PCAST_SLURM_ACCOUNT="acct7", PCAST_SLURM_PARTITION="cpu3", PCAST_SLURM_GPU_PARTITION=gpu_partition)
    jobs = _dry_run_resources(repo, env)
    assert {"sweep_shard", "conformance_shard", "realmodel_heads", "inputs", "claims"} <= set(jobs)
    for rule, resources in jobs.items():
        kernel = rule in KERNEL_RULES and gpu_partition
        for res in resources:
            assert res["slurm_account"] == "acct7", (rule, res)
            assert res["slurm_partition"] == ("gpu" if kernel else "cpu3"), (rule, res)
            assert res["gpu"] == ("1" if kernel else "0"), (rule, res)


def test_a_missing_variable_stops_the_run_before_any_job(tmp_path):
    repo = _fresh_copy(tmp_path)
    env = _env(PCAST_SLURM_ACCOUNT="", PCAST_SLURM_GPU_PARTITION="")  # PCAST_SLURM_PARTITION unset
    proc = subprocess.run(["snakemake", "--workflow-profile", PROFILE, "--config", "preset=smoke",
                           "--slurm-no-account"], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "and PCAST_SLURM_PARTITION is not set" in out, out[-3000:]  # only the one missing
    assert not (repo / "results").exists(), "a job ran before the refusal"
    assert "has been submitted with SLURM jobid" not in out


# ----------------------------------------------------------------------------- a real cluster


def _slurm_up() -> bool:
    if shutil.which("sinfo") is None or shutil.which("squeue") is None:
        return False
    proc = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=30)
    return proc.returncode == 0 and any(s.strip("*~#") in ("idle", "mix", "alloc") for s in proc.stdout.split())


def _slurm_command() -> list[str]:
    """The smoke preset through the profile on tests/cluster/start-slurm.sh's single node (2 cores,
    no accounting): poll with squeue (MinJobAge=3600 there) every few seconds, one thread and 2 GB
    per kernel job so that they fit the node."""
    return ["snakemake", "--workflow-profile", PROFILE, "--config", "preset=smoke",
            "--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "2",
            "--slurm-no-account", "--set-threads", "sweep_shard=1", "conformance_shard=1",
            "--set-resources", "sweep_shard:mem_mb=2000", "conformance_shard:mem_mb=2000"]


def _outputs(repo: Path) -> dict[str, bytes]:
    """Every tidy table, statistics table, and figure/table data and verdict file, by path."""
    files = [*repo.glob("results/tidy/*.csv"), *repo.glob("results/stats/*.csv"),
             *(p for ext in ("csv", "md", "json", "tex") for p in repo.glob(f"figures/*.{ext}"))]
    return {str(p.relative_to(repo)): p.read_bytes() for p in sorted(files)}


def _cancel_a_running_sweep_job(proc: subprocess.Popen, deadline: float) -> str:
    """Wait until a sweep_shard job runs on SLURM, then scancel it; returns its job id."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the SLURM run ended ({proc.returncode}) before a sweep job ran")
        q = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i %k"], capture_output=True, text=True,
                           timeout=30)
        for line in q.stdout.splitlines():
            job, _, comment = line.partition(" ")
            if comment.startswith("rule_sweep_shard"):
                subprocess.run(["scancel", job], check=True, timeout=30)
                return job
        time.sleep(0.25)
    pytest.fail("no sweep_shard job ran on SLURM in time")


@pytest.mark.cluster
@pytest.mark.skipif(not _slurm_up(), reason="no SLURM cluster answers (tests/cluster/start-slurm.sh starts one)")
def test_smoke_through_slurm_matches_local_and_recovers_after_scancel(tmp_path, smoke_run):
    repo = _fresh_copy(tmp_path)
    env = _env(PCAST_SLURM_ACCOUNT="", PCAST_SLURM_PARTITION="", PCAST_SLURM_GPU_PARTITION="")
    deadline = time.monotonic() + SLURM_TIMEOUT_S
    log1 = tmp_path / "slurm-run1.log"
    with log1.open("w") as fh:
        proc = subprocess.Popen(_slurm_command(), cwd=repo, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                text=True)
        try:
            job = _cancel_a_running_sweep_job(proc, deadline)
            rc = proc.wait(timeout=max(deadline - time.monotonic(), 1))
        finally:
            if proc.poll() is None:
                proc.kill()
    first = log1.read_text()
    assert rc != 0, "the run went on as if the cancelled job had succeeded"
    assert f"SLURM-job '{job}' failed" in first and "CANCELLED" in first, first[-4000:]

    # The same command again: the profile's rerun-incomplete redoes the cancelled shard.
    rerun = subprocess.run(_slurm_command(), cwd=repo, env=env, capture_output=True, text=True,
                           timeout=max(deadline - time.monotonic(), 1))
    assert rerun.returncode == 0, rerun.stdout[-4000:] + rerun.stderr[-4000:]
    assert "has been submitted with SLURM jobid" in rerun.stdout + rerun.stderr

    local, cluster = _outputs(smoke_run), _outputs(repo)
    assert {p for p in local if p.startswith("results/tidy/")} and "figures/claims.md" in local
    assert sorted(cluster) == sorted(local)
    differ = [p for p in local if cluster[p] != local[p]]
    assert not differ, f"SLURM and local runs differ in {differ}"
