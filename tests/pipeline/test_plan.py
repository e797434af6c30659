"""The run plan (pcast.pipeline.plan): printed before the first job with the runs the tidy tables
then hold; the memory model against a measured peak; a grid whose largest job cannot fit refused
before any job, naming the key; the calibration made once per machine and reused."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from pcast.pipeline import config as pconfig
from pcast.pipeline import calibration, plan
from pcast.pipeline.runs import delta_chunks
from repo_copy import REPO, copy_repo

CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())


def test_plan_runs_are_the_rows_the_tidy_tables_hold(smoke_run):
    """The dry run prints the plan; each experiment's runs equal the rows of the smoke run's table."""
    proc = subprocess.run(["snakemake", "-n", "--config", "preset=smoke"], cwd=smoke_run, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert "pcast-fp8 plan, preset 'smoke'" in out
    printed = {m.group(1): int(m.group(2).replace(",", ""))
               for m in re.finditer(r"^\s+(\w+)\s+([\d,]+) runs in", out, re.M)}
    assert set(printed) == {"collapse", "scales", "threshold", "conformance", "policies", "fp4", "dynamic", "tensorcore",
                            "decode", "deployed"}
    for name, runs in printed.items():
        # the deployed kernels have no tidy table: one row each in table T10
        table = smoke_run / "figures" / "table_deployed.csv" if name == "deployed" else \
            smoke_run / "results" / "tidy" / f"{name}.csv"
        with open(table) as fh:
            assert runs == sum(1 for _ in csv.DictReader(fh)), name


def test_a_grid_too_big_for_memory_is_refused_before_any_job(tmp_path):
    repo = copy_repo(tmp_path / "repo")  # without results/ (ignored, so not copied)
    override = tmp_path / "huge.yaml"
    override.write_text("experiments:\n  threshold:\n    shapes:\n"
                        "      - { n: 1024, d: 64, block_m: 64, block_n: 64 }\n"
                        "      - { n: 1000000000, d: 64, block_m: 64, block_n: 64 }\n")
    proc = subprocess.run(["snakemake", "--cores", "1", "--configfile", str(override)], cwd=repo,
                          capture_output=True, text=True, timeout=300)
    err = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "config key 'experiments.threshold.shapes[1]'" in err and "GiB" in err and "allowed:" in err, err[-2000:]
    assert not (repo / "results").exists(), "a job ran before the refusal"


def test_check_memory_names_the_largest_experiments_key():
    cfg = pconfig.resolve_preset(CONFIG)
    rows = plan.plan_rows(cfg, None)
    plan.check_memory(rows, plan.machine_memory())  # the default preset fits
    big = max(rows, key=lambda r: r["peak_bytes"])
    with pytest.raises(pconfig.ConfigError, match=re.escape(f"config key '{big['key']}'")):
        plan.check_memory(rows, big["peak_bytes"] - 1)


_PEAK = r"""
import json, sys
import torch
torch.set_num_threads(1)  # as every pipeline job runs (its rule's threads: 1)
from pcast.pipeline import config as pc, plan
from pcast.pipeline.inputs import write_inputs
from pcast.pipeline.runs import run_sweep_shard
exp = json.loads(sys.argv[1]); d = sys.argv[2]
write_inputs(pc.inputs_spec("collapse", exp, 0), d + "/in.safetensors")
run_sweep_shard(pc.shard_spec("collapse", exp, 0), d + "/in.safetensors", d + "/o.csv", d + "/t.csv")
import re
# VmHWM: this process's own peak RSS since exec. ru_maxrss would not do: Linux carries the pre-exec
# address space's peak into it, i.e. that of the (large) pytest worker the child was forked from.
hwm_kib = int(re.search(r"VmHWM:\s+(\d+) kB", open("/proc/self/status").read()).group(1))
print(json.dumps([plan.job_memory("collapse", exp)[0], hwm_kib * 1024]))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak RSS from Linux's /proc")
def test_memory_model_against_a_measured_peak(tmp_path):
    """One collapse shard of the default grid at n = 1024, d = 64 (inputs and runs in one fresh
    process, so its peak RSS covers both): the model within 0.6-1.5× of the measured peak (the
    module docstring's measurements gave 0.68-1.20×; the model has to catch grids that are many
    times too big, e.g. a 10× error in it fails here)."""
    exp = pconfig.resolve_preset(CONFIG)["experiments"]["collapse"]
    exp.update(seeds=1, seeds_per_shard=1)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # one thread, as the jobs run
    proc = subprocess.run([sys.executable, "-c", _PEAK, json.dumps(exp), str(tmp_path)], capture_output=True,
                          text=True, timeout=600, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    model, measured = json.loads(proc.stdout.strip().splitlines()[-1])  # the child's own peak (VmHWM)
    assert 0.6 <= model / measured <= 1.5, (model / 2**20, measured / 2**20)


def test_calibration_is_made_once_per_machine_and_reused(tmp_path, monkeypatch):
    path = tmp_path / "cal.json"
    calls = []

    def fake():
        calls.append(1)
        return {**calibration.machine_key(), **dict.fromkeys(calibration.PIPELINE_KEYS, 1e-8)}

    monkeypatch.setattr(calibration, "calibrate", fake)
    first = plan.load_calibration(path)
    again = plan.load_calibration(path)
    assert first == again and len(calls) == 1 and json.loads(path.read_text()) == first
    stale = {**first, "host": first["host"] + "-elsewhere"}
    path.write_text(json.dumps(stale))
    assert plan.load_calibration(path) == first and len(calls) == 2  # made elsewhere: measured again
    path.write_text("{not json")
    assert plan.load_calibration(path) == first and len(calls) == 3
    # the audit's calibration (the emulator's parts only) serves the audit, and the pipeline measures it again
    from pcast.host import calibration as host

    path.write_text(json.dumps({k: first[k] for k in [*calibration.machine_key(), *host.EMULATOR_KEYS]}))
    assert host.load_calibration(path)["c_q"] == first["c_q"] and len(calls) == 3
    assert plan.load_calibration(path) == first and len(calls) == 4


def test_cpu_estimate_follows_the_calibration_and_the_grid():
    """Each calibrated part counted as the docstring's model says: full scores and the reference's
    first item once per stack (per value tensor), steps 1-2 once per item and order, 3-4 per scale,
    5-6 per run, the reference's further items per item and value tensor."""
    cfg = pconfig.resolve_preset(CONFIG)
    exp = cfg["experiments"]["collapse"]
    n = exp["shapes"][0]["n"]
    rows_n = pconfig.expected_rows("collapse", exp)
    orders, scales, nv = len(exp["order"]), len(exp["scale"]), len(exp["sink_v_scale"])
    n_deltas = len(pconfig.delta_values(exp["delta"]))
    items = exp["seeds"] * n_deltas
    assert items * orders * scales * nv == rows_n
    stacks = exp["seeds"] * len(delta_chunks(pconfig.delta_values(exp["delta"]), nv, exp.get("max_batch_items", 64)))
    assert 0 < stacks < items  # the default grid has more than one Δ a stack
    zero = {"c_q": 0.0, "c_p": 0.0, "c_s": 0.0, "c_v": 0.0, "c_refa": 0.0, "c_ref": 0.0}
    for part, count in (("c_q", stacks), ("c_p", items * orders), ("c_s", items * orders * scales), ("c_v", rows_n),
                        ("c_refa", stacks * nv), ("c_ref", items * nv)):
        rows = {r["experiment"]: r for r in plan.plan_rows(cfg, {**zero, part: 1e-9})}
        assert rows["collapse"]["cpu_s"] == pytest.approx(count * n * n * 1e-9), part
        assert rows["conformance"]["cpu_s"] is None  # the interpreted Triton kernel is not calibrated
    pol = cfg["experiments"]["policies"]
    p_items = pol["seeds"] * len(pconfig.delta_values(pol["delta"]))
    cast = sum(1 for c in pol["variants"].values() if c.get("qk_fmt") is not None)
    assert 0 < cast < len(pol["variants"])  # the default has a variant with and one without a q/k cast
    p_stacks = {kind: pol["seeds"] * len(delta_chunks(pconfig.delta_values(pol["delta"]), nv_k, pol.get("max_batch_items", 64)))
                for kind, nv_k in (("keys", len(pol["sink_v_scale"])), ("logit", 1))}
    assert pol["sink_kinds"] == ["keys", "logit"]
    # keys: a per-item q/k cast per item, else once a stack; logit (one q, k for the stack): once a stack
    want = cast * p_items + (len(pol["variants"]) - cast) * p_stacks["keys"] + len(pol["variants"]) * p_stacks["logit"]
    rows = {r["experiment"]: r for r in plan.plan_rows(cfg, {**zero, "c_q": 1e-9})}
    assert rows["policies"]["cpu_s"] == pytest.approx(want * pol["shapes"][0]["n"] ** 2 * 1e-9)
    # steps 3-4 once per item and call, but in the logit kind only the stack's first item for a call whose
    # sink does not seed the max (vllm-unified's does: sink_mode "init")
    from pcast.pipeline.policy_config import resolve_policies

    resolved = resolve_policies(pol, cfg.get("policies"))
    seeding = sum(1 for kw in resolved.values() if kw["sink_mode"] == "init")
    assert 0 < seeding < len(resolved)
    n_pol, nvar = len(pol["policies"]), len(pol["variants"])
    want = (p_items * n_pol * nvar + (seeding * p_items + (n_pol - seeding) * p_stacks["logit"]) * nvar)
    rows = {r["experiment"]: r for r in plan.plan_rows(cfg, {**zero, "c_s": 1e-9})}
    assert rows["policies"]["cpu_s"] == pytest.approx(want * pol["shapes"][0]["n"] ** 2 * 1e-9)
    cal = {**zero, "c_p": 1e-9, "c_v": 3e-9}
    doubled = pconfig.resolve_preset(CONFIG, {"experiments": {"collapse": {"seeds": 2 * exp["seeds"]}}})
    assert plan.plan_rows(doubled, cal)[0]["cpu_s"] == pytest.approx(2 * plan.plan_rows(cfg, cal)[0]["cpu_s"])
    assert all(r["cpu_s"] is None for r in plan.plan_rows(cfg, None))


def test_job_memory_is_bounded_by_config_settings_not_by_the_grid():
    """A job's peak memory depends on max_batch_items and seeds_per_shard, not on how
    long the Δ grid is or how many seeds the experiment has (more of either means more jobs or more
    stacks, each of bounded size)."""
    cfg = pconfig.resolve_preset(CONFIG)
    for name in ("collapse", "threshold", "policies"):
        exp = cfg["experiments"][name]
        base = plan.job_memory(name, exp)[0]
        grid = {"start": 0.0, "stop": 64.0, "step": 0.125}  # 513 Δ values, far more than a stack holds
        assert len(pconfig.delta_values(grid)) > 4 * exp.get("max_batch_items", 64)
        long = plan.job_memory(name, {**exp, "delta": grid})[0]
        more = plan.job_memory(name, {**exp, "delta": grid, "seeds": 4 * exp["seeds"]})[0]
        assert long == more  # seeds add jobs, not memory per job
        halved = plan.job_memory(name, {**exp, "delta": grid, "max_batch_items": exp.get("max_batch_items", 64) // 2})[0]
        assert halved < long  # the setting bounds it
        assert long < 3 * base, name  # a longer grid fills the stack once; it does not grow with the grid


def test_matmul_parts_scale_with_d_and_elementwise_parts_do_not():
    cfg = pconfig.resolve_preset(CONFIG)
    exp = cfg["experiments"]["collapse"]
    wide = {**exp, "shapes": [{**exp["shapes"][0], "d": 2 * exp["shapes"][0]["d"]}]}
    zero = {"c_q": 0.0, "c_p": 0.0, "c_s": 0.0, "c_v": 0.0, "c_refa": 0.0, "c_ref": 0.0, "d": exp["shapes"][0]["d"]}
    for part in zero:
        if part == "d":
            continue
        cal = {**zero, part: 1e-9}
        ratio = plan._cpu_s("collapse", wide, cal) / plan._cpu_s("collapse", exp, cal)
        assert ratio == pytest.approx(2.0 if part in plan.MATMUL_PARTS else 1.0), part


@pytest.mark.parametrize("how", ["no interpreter", "interpreter fails", "interpreter times out"])
def test_first_calls_failure_is_logged_not_silent(monkeypatch, caplog, tmp_path, how):
    """o_proc falls back to 0 when its fresh interpreter cannot run, and says so, naming the cause (as text:
    a timeout's captured stderr comes back as bytes even with text=True)."""
    import subprocess

    from pcast.pipeline import calibration

    if how == "no interpreter":
        monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
        cause = "no-such-python"
    elif how == "interpreter fails":
        monkeypatch.setattr(calibration, "_FIRST_CALLS", "raise SystemExit('torch missing here')")
        cause = "torch missing here"
    else:
        def timed_out(cmd, **kw):
            raise subprocess.TimeoutExpired(cmd, kw["timeout"], output=b"", stderr=b"loading torch\nstill loading\n")

        monkeypatch.setattr(subprocess, "run", timed_out)
        cause = "still loading"
    with caplog.at_level("WARNING", logger="pcast.pipeline"):
        assert calibration._first_calls() == 0.0
    text = caplog.text
    assert "o_proc" in text and "underestimates" in text and cause in text
    assert "b'" not in text and 'b"' not in text


def test_first_calls_measures_a_positive_cost():
    """The working path: a fresh interpreter's first calls cost more than nothing (torch's import alone)."""
    from pcast.pipeline import calibration

    assert calibration._first_calls() > 0
