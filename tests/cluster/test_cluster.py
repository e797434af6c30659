"""The SLURM profile (workflow/profiles/slurm; docs/slurm.md): resources from the environment and the
run plan, a clear stop when a variable is missing, and, on a real single-node SLURM
(tests/cluster/start-slurm.sh), the short recipe end to end: the smoke preset through the profile with
only the three variables and ``--slurm-status-command squeue``, its outputs byte-identical to a local
run; a job larger than the node refused before any submission, with the numbers; a job that cannot
start reported with squeue's reason, and the run stopped.

The first tests need only the executor plugin (the ``slurm`` extra); the rest are marked ``cluster``
and skipped where no SLURM answers. CI (.ci/run) starts SLURM first, so they run there. The smoke run
through SLURM starts before this file's first test (a module fixture) and the other tests run while it
goes; the local run it is compared with comes after it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from pcast.pipeline import config as pconfig
from pcast.pipeline import plan, resources, slurm
from repo_copy import REPO, copy_repo

pytest.importorskip("snakemake_executor_plugin_slurm", reason="the slurm extra is not installed")

# One worker runs this file, so its module fixture starts one SLURM smoke run, not one per worker.
pytestmark = pytest.mark.xdist_group("slurm")

PROFILE = "workflow/profiles/slurm"
SLURM_TIMEOUT_S = 900
RECIPE = ["snakemake", "--workflow-profile", PROFILE, "--config", "preset=smoke", "--slurm-status-command", "squeue"]


def _env(**values) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PCAST_SLURM_")}
    env.update(values)
    return env


EMPTY = {"PCAST_SLURM_ACCOUNT": "", "PCAST_SLURM_PARTITION": "", "PCAST_SLURM_GPU_PARTITION": ""}


# ----------------------------------------------------------------------------- a real cluster (tests below)


def _slurm_up() -> bool:
    if shutil.which("sinfo") is None or shutil.which("squeue") is None:
        return False
    proc = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=30)
    return proc.returncode == 0 and any(s.strip("*~#") in ("idle", "mix", "alloc") for s in proc.stdout.split())


SLURM_UP = _slurm_up()
cluster = pytest.mark.skipif(not SLURM_UP, reason="no SLURM cluster answers (tests/cluster/start-slurm.sh starts one)")


def _default_node() -> dict:
    out = subprocess.run(slurm.SINFO, capture_output=True, text=True, timeout=30, check=True).stdout
    parts, default = slurm.parse_sinfo(out)
    return slurm.largest_nodes(parts, default)[""]


def _stop(proc: subprocess.Popen, repo: Path) -> None:
    """Interrupt a run still going (Snakemake cancels its SLURM jobs on SIGINT), then cancel any job
    left from its directory."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    q = subprocess.run(["squeue", "--me", "--noheader", "--format=%i|%Z"], capture_output=True, text=True, timeout=30)
    left = [line.split("|")[0] for line in q.stdout.splitlines() if line.endswith(f"|{repo}")]
    if left:
        subprocess.run(["scancel", *left], timeout=30)


@pytest.fixture(scope="module", autouse=True)
def slurm_smoke(request, tmp_path_factory):
    """The short recipe, started in the background on a fresh copy before this file's first test when
    a cluster test of this file is selected, so that the other tests run while it goes: (process,
    repo, log path, start time); None otherwise."""
    selected = [i for i in request.session.items if i.module is request.module and i.get_closest_marker("cluster")]
    if not (SLURM_UP and selected):
        yield None
        return
    repo = copy_repo(tmp_path_factory.mktemp("slurm") / "repo")
    log = repo.parent / "slurm-run.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(RECIPE, cwd=repo, env=_env(**EMPTY), stdout=fh, stderr=subprocess.STDOUT,
                                text=True)
        try:
            yield proc, repo, log, time.monotonic()
        finally:
            _stop(proc, repo)


def _dry_run_resources(repo: Path, env: dict) -> dict[str, list[dict]]:
    """rule -> the resources of each of its jobs, as a dry run through the profile prints them."""
    proc = subprocess.run(["snakemake", "-n", "-F", "--workflow-profile", PROFILE, "--config", "preset=smoke"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs: dict[str, list[dict]] = {}
    rule, wildcards = None, ""
    for line in (proc.stdout + proc.stderr).splitlines():
        m = re.match(r"^(?:local)?rule (\w+):$", line.strip())
        if m:
            rule, wildcards = m.group(1), ""
        elif line.strip().startswith("wildcards:"):
            wildcards = line.strip()[len("wildcards:"):].strip()
        elif line.strip().startswith("resources:") and rule:
            pairs = (p.split("=", 1) for p in line.strip()[len("resources:"):].split(", "))
            jobs.setdefault(rule, []).append({"wildcards": wildcards, **{k.strip(): v for k, v in pairs}})
            rule = None
    return jobs


def test_the_profile_names_no_cluster_and_no_sizes():
    """Account and partitions come from the environment; memory, time and threads from the rules."""
    text = (REPO / PROFILE / "config.yaml").read_text()
    assert "YOUR_" not in text
    prof = yaml.safe_load(text)
    assert prof["executor"] == "slurm"
    assert prof["default-resources"]["slurm_account"] == "'$PCAST_SLURM_ACCOUNT'"
    assert set(resources.KERNEL_RULES) <= set(prof["set-resources"])
    assert "set-threads" not in prof
    sections = [prof["default-resources"], *prof["set-resources"].values()]
    assert not [s for s in sections if {"mem_mb", "runtime"} & set(s)], "fixed sizes in the profile"


@pytest.mark.parametrize("gpu_partition", ["gpu", ""])
def test_profile_resources_follow_the_environment_and_the_plan(tmp_path, gpu_partition):
    """Account and partitions come from PCAST_SLURM_*, a GPU only on the kernel jobs and only when a
    GPU partition is named; each shard job's mem_mb and runtime are pcast.pipeline.resources's."""
    repo = copy_repo(tmp_path / "repo")
    env = _env(PCAST_SLURM_ACCOUNT="acct7", PCAST_SLURM_PARTITION="cpu3", PCAST_SLURM_GPU_PARTITION=gpu_partition)
    jobs = _dry_run_resources(repo, env)
    assert {"sweep_shard", "conformance_shard", "realmodel_heads", "inputs", "claims"} <= set(jobs)
    cfg = pconfig.resolve_preset(dict(yaml.safe_load((REPO / "config.yaml").read_text()), preset="smoke"))
    shard = resources.shard_resources(cfg, None)
    for rule, listed in jobs.items():
        kernel = rule in resources.KERNEL_RULES and gpu_partition
        for res in listed:
            assert res["slurm_account"] == "acct7", (rule, res)
            assert res["slurm_partition"] == ("gpu" if kernel else "cpu3"), (rule, res)
            assert res["gpu"] == ("1" if kernel else "0"), (rule, res)
            if rule in ("sweep_shard", "conformance_shard"):
                name = re.search(r"experiment=(\w+)", res["wildcards"]).group(1)
                assert int(res["mem_mb"]) == shard[name]["mem_mb"], (rule, res)
            elif rule != "all" and not resources.is_local(rule):
                assert int(res["mem_mb"]) >= resources.MEM_FLOOR_MB and int(res["runtime"]) >= 10, (rule, res)


def test_a_missing_variable_stops_the_run_before_any_job(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    env = _env(PCAST_SLURM_ACCOUNT="", PCAST_SLURM_GPU_PARTITION="")  # PCAST_SLURM_PARTITION unset
    proc = subprocess.run(RECIPE, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "and PCAST_SLURM_PARTITION is not set" in out, out[-3000:]  # only the one missing
    assert not (repo / "results").exists(), "a job ran before the refusal"
    assert "has been submitted with SLURM jobid" not in out


def _outputs(repo: Path) -> dict[str, bytes]:
    """Every tidy table, statistics table, and figure/table data and verdict file, by path."""
    files = [*repo.glob("results/tidy/*.csv"), *repo.glob("results/stats/*.csv"),
             *(p for ext in ("csv", "md", "json", "tex") for p in repo.glob(f"figures/*.{ext}"))]
    return {str(p.relative_to(repo)): p.read_bytes() for p in sorted(files)}


@pytest.mark.cluster
@cluster
def test_a_job_larger_than_the_node_is_refused_before_any_submission(tmp_path, slurm_smoke):
    """The threshold job asks (1.5 x its modelled peak) for more than the node's RealMemory, while the
    peak itself fits this machine's memory, which the local check would have let through."""
    node = _default_node()
    repo = copy_repo(tmp_path / "repo")
    cfg = pconfig.resolve_preset(dict(yaml.safe_load((REPO / "config.yaml").read_text()), preset="smoke"))
    exp = dict(cfg["experiments"]["threshold"])
    per_batch = plan.job_memory("threshold", dict(exp, batch=2))[0] - plan.job_memory("threshold", exp)[0]
    batch = int((0.8 * node["mem_mb"] * 1e6 - plan.BASE_BYTES) / per_batch)
    peak = plan.job_memory("threshold", dict(exp, batch=batch))[0]
    asks = resources.mem_mb(peak)
    assert asks > node["mem_mb"] and peak < plan.machine_memory(), (asks, node, peak)
    override = tmp_path / "big.yaml"
    override.write_text(f"experiments:\n  threshold:\n    batch: {batch}\n")
    proc = subprocess.run([*RECIPE, "--configfile", str(override)], cwd=repo, env=_env(**EMPTY),
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert (f"config key 'experiments.threshold.shapes[0]': the largest threshold sweep_shard job asks SLURM for "
            f"{asks:,} MB") in out, out[-3000:]
    assert f"{node['name']}, {node['mem_mb']:,} MB (sinfo)" in out
    assert "has been submitted with SLURM jobid" not in out and not (repo / "results").exists()


@pytest.mark.cluster
@cluster
def test_a_job_that_cannot_start_is_reported_and_the_run_stops(tmp_path, slurm_smoke):
    """A job (the real model's capture, which needs no other job) asking for more CPUs than the node
    has: accepted by sbatch, pending with reason PartitionConfig for ever; the run reports it, cancels
    it and stops."""
    node = _default_node()
    repo = copy_repo(tmp_path / "repo")
    start = time.monotonic()
    proc = subprocess.run([*RECIPE, "--set-threads", f"realmodel_capture={node['cpus'] + 1}", "--",
                           "results/inputs/realmodel/tensors.safetensors"], cwd=repo, env=_env(**EMPTY),
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    m = re.search(r"SLURM job (\d+) \(rule_realmodel_capture\) cannot start: squeue's reason is 'PartitionConfig' "
                  rf"\(it asks for {node['cpus'] + 1} CPUs", out)
    assert m, out[-4000:]
    assert f"SLURM-job '{m.group(1)}' failed" in out and "CANCELLED" in out, out[-4000:]
    assert time.monotonic() - start < 300
    assert not (repo / "results" / "inputs" / "realmodel" / "tensors.safetensors").exists()


@pytest.mark.cluster
@cluster
def test_the_short_recipe_runs_the_smoke_preset_like_a_local_run(slurm_smoke, request):
    """The smoke preset through the profile, only the three variables and --slurm-status-command squeue:
    the jobs submitted to SLURM, the outputs byte-identical to a local run, no account-guess noise.
    The local run (the suite's smoke_run) is asked for after the SLURM run ends: on a small machine
    both are CPU-bound, and side by side each would only take longer."""
    proc, repo, log, started = slurm_smoke
    rc = proc.wait(timeout=max(SLURM_TIMEOUT_S - (time.monotonic() - started), 1))
    out = log.read_text()
    assert rc == 0, out[-4000:]
    smoke_run = request.getfixturevalue("smoke_run")
    assert "has been submitted with SLURM jobid" in out
    assert "sacct: invalid option" not in out and "trying to guess" not in out
    local, cluster_out = _outputs(smoke_run), _outputs(repo)
    assert {p for p in local if p.startswith("results/tidy/")} and "figures/claims.md" in local
    assert sorted(cluster_out) == sorted(local)
    differ = [p for p in local if cluster_out[p] != local[p]]
    assert not differ, f"SLURM and local runs differ in {differ}"
