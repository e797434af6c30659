"""What each job asks a cluster for (pcast.pipeline.resources): the plan's memory and CPU time with
the stated factors and floors, recomputed here from the plan's own numbers; every rule of the workflow
covered; the refusal's input built from the environment's partitions and --set-resources."""

from __future__ import annotations

import math
import re

import pytest
import yaml

from pcast.pipeline import config as pconfig
from pcast.pipeline import plan
from pcast.pipeline import resources as R
from repo_copy import REPO

CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())
#: A calibration with round numbers (seconds per score and per call): the formulas, not a machine.
CAL = {"c_p": 1e-9, "c_q": 1e-9, "c_ref": 1e-9, "c_refa": 3e-8, "c_s": 2e-9, "c_s_mx": 8e-9, "c_v": 2e-9, "d": 64,
       "o_call": 1e-3, "o_p": 3e-4, "o_proc": 0.03, "o_ref": 1e-4, "o_refa": 4e-4, "o_s": 0.0, "o_v": 1e-4}


@pytest.fixture(scope="module", params=["smoke", "default", "paper"])
def preset(request):
    return request.param, pconfig.resolve_preset(dict(CONFIG, preset=request.param))


def test_shard_memory_is_the_factor_times_the_plan_with_a_floor(preset):
    _, cfg = preset
    res = R.shard_resources(cfg, CAL)
    for row in plan.plan_rows(cfg, CAL):
        want = max(1000, math.ceil(1.5 * row["peak_bytes"] / 1e6))
        assert res[row["experiment"]]["mem_mb"] == want, row["experiment"]
        assert res[row["experiment"]]["mem_mb"] * 1e6 >= row["peak_bytes"]  # never below the model
        assert res[row["experiment"]]["key"] == row["key"]


def test_shard_runtime_is_the_factor_times_the_largest_shards_cpu_with_a_floor(preset):
    _, cfg = preset
    res = R.shard_resources(cfg, CAL)
    for row in plan.plan_rows(cfg, CAL):
        exp = cfg["experiments"][row["experiment"]]
        if row["cpu_s"] is None:  # the conformance check: not estimated, a stated fixed time
            assert res[row["experiment"]]["runtime"] == R.UNMODELLED["conformance_shard"][1]
            continue
        seeds = int(exp["seeds"])
        largest = min(int(exp["seeds_per_shard"]), seeds) / seeds
        want = max(10, math.ceil(3 * row["cpu_s"] * largest / 60))
        assert res[row["experiment"]]["runtime"] == want, row["experiment"]


def test_the_paper_preset_asks_for_more_than_the_floors():
    """The factors matter where jobs are large: the paper preset's threshold shards ask above both floors."""
    cfg = pconfig.resolve_preset(dict(CONFIG, preset="paper"))
    cal = dict(CAL, c_refa=3e-7)
    res = R.shard_resources(cfg, cal)["threshold"]
    assert res["mem_mb"] > R.MEM_FLOOR_MB and res["runtime"] > R.RUNTIME_FLOOR_MIN


def test_without_a_calibration_the_runtime_is_the_floor():
    cfg = pconfig.resolve_preset(dict(CONFIG, preset="paper"))
    for name, res in R.shard_resources(cfg, None).items():
        if name != "conformance":
            assert res["runtime"] == R.RUNTIME_FLOOR_MIN and res["cpu_s"] is None


def test_inputs_memory_is_the_stored_inputs_of_one_shard():
    cfg = pconfig.resolve_preset(dict(CONFIG, preset="default"))
    exp = cfg["experiments"]["threshold"]
    w = sum(int(exp["batch"]) * int(exp["heads"]) * int(s["n"]) * int(s["d"]) * 4 for s in exp["shapes"])
    stored = int(exp["seeds_per_shard"]) * len(pconfig.listed(exp["sigma"])) * 3 * w
    assert plan.inputs_memory(exp) == plan.BASE_BYTES + stored
    assert plan.inputs_memory(exp) <= plan.job_memory("threshold", exp)[0]


def test_every_rule_of_the_workflow_has_resources():
    """Each rule file's rule takes its resources from the plan or from UNMODELLED, or is a localrule."""
    rules, local = set(), set()
    for smk in (REPO / "workflow" / "rules").glob("*.smk"):
        for block in smk.read_text().split("\nrule ")[1:]:
            rules.add(block.split(":", 1)[0])
            if "    localrule: True" in block:
                local.add(block.split(":", 1)[0])
    assert local == {r for r in rules if R.is_local(r)} and "claims" in local and "fig_mse" in local
    planned = {"inputs", "sweep_shard", "conformance_shard"}
    for rule in sorted(rules - planned - local):
        res = R.rule_resources(rule)
        assert res["mem_mb"] >= R.MEM_FLOOR_MB and res["runtime"] >= R.RUNTIME_FLOOR_MIN and res["threads"] == 1
    with pytest.raises(KeyError, match="no_such_rule"):
        R.rule_resources("no_such_rule")


def test_cluster_jobs_take_partitions_from_the_environment_and_overrides_from_the_command_line():
    cfg = pconfig.resolve_preset(dict(CONFIG, preset="smoke"))
    rows = R.resource_table(cfg, CAL)
    env = {"PCAST_SLURM_PARTITION": "cpu", "PCAST_SLURM_GPU_PARTITION": "gpu"}
    jobs = R.cluster_jobs(rows, env, {"sweep_shard": {"mem_mb": "50000"}})
    by = {(j["job"]): j for j in jobs}
    assert by["largest threshold sweep_shard"]["partition"] == "gpu"
    assert by["largest threshold sweep_shard"]["mem_mb"] == 50000
    assert by["largest threshold sweep_shard"]["why"] == "--set-resources sweep_shard:mem_mb"
    assert by["largest threshold inputs"]["partition"] == "cpu"
    assert by["stats_*"]["partition"] == "cpu" and by["stats_*"]["why"] == "fixed"
    assert by["largest threshold sweep_shard"]["where"] == "config key 'experiments.threshold.shapes[0]'"
    no_gpu = R.cluster_jobs(rows, {"PCAST_SLURM_PARTITION": "cpu", "PCAST_SLURM_GPU_PARTITION": ""}, {})
    assert {j["partition"] for j in no_gpu} == {"cpu"}


def test_format_requests_prints_each_kind_of_job():
    cfg = pconfig.resolve_preset(dict(CONFIG, preset="default"))
    rows = R.resource_table(cfg, CAL)
    text = R.format_requests(rows)
    assert len(text.splitlines()) == len(rows) + 1
    assert re.search(r"sweep_shard threshold\s+mem_mb\s+[\d,]+\s+runtime\s+\d+ min\s+threads 1", text)
