"""The SLURM profile's checks against the cluster (pcast.pipeline.slurm), on sinfo and squeue output
as SLURM 22.05 prints it: no cluster needed. Which runs are bound for SLURM, from the command line and
the profiles; the largest node per partition; the one-message refusal with the numbers; the pending
jobs whose reason waiting will not clear, and only this run's."""

from __future__ import annotations

import pytest

from pcast.pipeline import slurm
from repo_copy import REPO

#: sinfo --noheader --Node --format=%N|%P|%m|%c on a cluster of two partitions, cpu the default.
SINFO = """\
n01|cpu*|192000|64
n02|cpu*|256000|64
n02|big|256000|64
g01|gpu|512000|32
n03|cpu*|96000|32
"""


@pytest.mark.parametrize("argv, env, bound", [
    (["--workflow-profile", "workflow/profiles/slurm", "--config", "preset=smoke"], {}, True),
    (["--workflow-profile=workflow/profiles/slurm", "-n"], {}, True),
    (["--cores", "2"], {}, False),
    (["--workflow-profile", "workflow/profiles/default", "--cores", "2"], {}, False),
    (["--workflow-profile", "workflow/profiles/slurm", "--executor", "local", "--cores", "1"], {}, False),
    (["--executor", "slurm", "--jobs", "4"], {}, True),
    (["-e", "slurm", "--jobs", "4"], {}, True),
    (["--cores", "1"], {"SNAKEMAKE_PROFILE": "workflow/profiles/slurm"}, True),
    (["--workflow-profile", "no/such/profile"], {}, False),
])
def test_bound_for_slurm_reads_the_executor_from_the_command_line_and_profiles(monkeypatch, argv, env, bound):
    monkeypatch.chdir(REPO)
    assert slurm.bound_for_slurm(argv, env) is bound


def test_parse_sinfo_finds_each_partitions_nodes_and_the_default():
    parts, default = slurm.parse_sinfo(SINFO + "garbage line\nn09|cpu*|N/A|4\n")
    assert default == "cpu"
    assert [n["name"] for n in parts["cpu"]] == ["n01", "n02", "n03"]
    largest = slurm.largest_nodes(parts, default)
    assert largest["cpu"] == {"name": "n02", "mem_mb": 256000, "cpus": 64}
    assert largest[""] == largest["cpu"] and largest["gpu"]["mem_mb"] == 512000


def _job(mem_mb, partition="", key="experiments.threshold.shapes[0]"):
    return {"job": "largest threshold sweep_shard", "where": f"config key '{key}'", "mem_mb": mem_mb,
            "partition": partition, "why": "1.5 x the plan's 200,000 MB"}


def test_a_job_that_fits_the_largest_node_is_not_refused():
    parts, default = slurm.parse_sinfo(SINFO)
    # larger than two of the three cpu nodes, not the largest: SLURM places it there
    assert slurm.refusal([_job(256000), _job(500000, "gpu"), _job(10**9, "nosuch")], parts, default) is None


def test_a_job_no_node_can_hold_is_refused_with_the_numbers():
    parts, default = slurm.parse_sinfo(SINFO)
    message = slurm.refusal([_job(1000), _job(300000), _job(256001, "big")], parts, default)
    assert message.startswith("config key 'experiments.threshold.shapes[0]': the largest threshold sweep_shard job")
    assert "300,000 MB (1.5 x the plan's 200,000 MB)" in message
    assert "partition 'cpu' (the default)" in message and "n02, 256,000 MB (sinfo)" in message
    assert "1 more jobs do not fit either" in message and "no job was submitted" in message
    assert "\n" not in message


#: squeue --me --noheader --states=PENDING --format=%i|%k|%r|%C|%m|%V|%Z
SQUEUE = """\
41|rule_sweep_shard_wildcards_threshold_000|PartitionConfig|3|1000M|2026-12-02T06:30:05|/home/u/run
42|rule_inputs_wildcards_collapse_000|Resources|1|1000M|2026-12-02T06:30:06|/home/u/run
43|rule_claims|ReqNodeNotAvail, UnavailableNodes:n01|1|2000M|2026-12-02T06:30:07|/home/u/run
44|rule_claims|ReqNodeNotAvail, UnavailableNodes:|1|2000M|2026-12-02T06:30:07|/home/u/run
45|rule_sweep_shard_wildcards_scales_000|PartitionConfig|3|1000M|2026-12-02T06:30:05|/home/u/other
46|rule_sweep_shard_wildcards_scales_000|PartitionConfig|3|1000M|2026-12-02T06:10:00|/home/u/run
47|my own job|PartitionConfig|3|1000M|2026-12-02T06:30:05|/home/u/run
48|rule_fig_mse|Priority|1|2000M|2026-12-02T06:30:08|/home/u/run
"""


def test_stuck_finds_this_runs_jobs_whose_reason_will_not_clear():
    rows = slurm.parse_squeue(SQUEUE)
    assert len(rows) == 8
    found = slurm.stuck(rows, "/home/u/run", "2026-12-02T06:30:00")
    # 42, 48: waiting clears them; 43: its node is down for now; 45: another directory; 46: an earlier
    # run's; 47: not a Snakemake job
    assert [r["id"] for r in found] == ["41", "44"]
    message = slurm.stuck_message(found[0])
    assert "SLURM job 41 (rule_sweep_shard_wildcards_threshold_000) cannot start" in message
    assert "'PartitionConfig'" in message and "3 CPUs and 1000M" in message and "the run stops" in message


@pytest.mark.parametrize("reason", sorted(slurm.STUCK_REASONS))
def test_every_listed_reason_counts_as_stuck(reason):
    row = {"id": "1", "comment": "rule_x", "reason": reason, "cpus": "1", "mem": "1M", "submit": "2026",
           "workdir": "/w"}
    assert slurm.stuck([row], "/w", "2026")
