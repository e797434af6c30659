"""The tensorcore experiment (pcast.pipeline.tensorcore_runs): its rows against calls of pcast.attention made
here one by one, its check against mmasim, its summary and verdict on built tables, F13, the config's checks and
the plan's row; without mmasim it is skipped and claims.md says so."""

import copy
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

import pcast
from pcast.analysis.plots import fig_tensorcore
from pcast.analysis.tensorcore import tensorcore_summary
from pcast.analysis.verdicts import render_markdown
from pcast.analysis.verdicts.tensorcore import claim_tensorcore
from pcast.models.sinks import make_inputs
from pcast.pipeline import plan
from pcast.pipeline.config import ConfigError
from pcast.pipeline.tensorcore_runs import TENSORCORE_COLUMNS, run_tensorcore
from pcast.pipeline.validation import load_config
from pcast.reference import reference_attention

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(seeds=1, n=64, d=16, block_n=32, ksink=4, sigma=1.0, sink_v_scale=1.0, scale_mode="exp2_offset",
            delta=[0.0, 10.0], order=["forward", "reverse"], scale=[1, 256], pv_arith=["wgmma-sm90"], mmasim_tiles=1)


def _mse(a, b):
    return float(((a.double() - b.double()) ** 2).mean())


def test_rows_are_the_calls_of_kernels_attention():
    pytest.importorskip("mmasim")
    tidy, check = run_tensorcore(TINY)
    assert list(tidy.columns) == TENSORCORE_COLUMNS and len(tidy) == 2 * 2 * 2
    assert check["mmasim"]["wgmma-sm90"]["mismatched"] == 0 and check["mmasim"]["wgmma-sm90"]["truncated"] > 0
    q, k, v = make_inputs(0, n=64, d=16, ksink=4, delta=10.0)
    ref = reference_attention(q, k, v)
    kw = dict(order="reverse", scale=256.0, scale_mode="exp2_offset", ksink=4, block_n=32, backend="emulator")
    tc = pcast.attention(q, k, v, v_fmt="e4m3fn", pv_arith="wgmma-sm90", **kw).out
    fp32 = pcast.attention(q, k, v, v_fmt="e4m3fn", **kw).out
    p_only = pcast.attention(q, k, v, **kw).out
    row = tidy[(tidy["order"] == "reverse") & (tidy["scale"] == 256) & (tidy["delta"] == 10)].iloc[0]
    assert row["mse"] == _mse(tc, ref) and row["mse_fp32"] == _mse(fp32, ref)
    assert row["mse_pcast"] == _mse(p_only, ref) and row["acc_mse"] == _mse(tc, fp32) > 0


def _summary(shares, pv="wgmma-sm90"):
    rows = [{"pv_arith": pv, "order": "forward", "scale": 1.0, "combo": "forward S=1", "delta": float(i), "seed": 0,
             "mse": 1.0 + s, "mse_fp32": 1.0, "mse_pcast": 1.0, "acc_mse": s, "underflow_frac": 0.0}
            for i, s in enumerate(shares)]
    return tensorcore_summary(pd.DataFrame(rows))


CHECK = {"mmasim": {"wgmma-sm90": {"tiles": 1, "elements": 10, "mismatched": 0, "truncated": 9}}}


def test_verdict_passes_below_the_limit_and_fails_above_it_or_on_a_mismatch():
    cfg = {"max_share": 0.01}
    assert claim_tensorcore(_summary([1e-4, 5e-3]), CHECK, cfg)["verdict"] == "PASS"
    assert claim_tensorcore(_summary([1e-4, 2e-2]), CHECK, cfg)["verdict"] == "FAIL"
    bad = copy.deepcopy(CHECK)
    bad["mmasim"]["wgmma-sm90"]["mismatched"] = 1
    assert claim_tensorcore(_summary([1e-4]), bad, cfg)["verdict"] == "FAIL"
    two = {"mmasim": {**CHECK["mmasim"], "tcgen05-sm100": CHECK["mmasim"]["wgmma-sm90"]}}
    both = pd.concat([_summary([1e-4]), _summary([0.5], "tcgen05-sm100")])
    assert claim_tensorcore(both, two, cfg)["verdict"] == "FAIL"  # the strict rule over the tensor cores


def test_without_mmasim_the_experiment_is_skipped_and_claims_md_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "mmasim", None)
    monkeypatch.setitem(sys.modules, "mmasim.nv_ptx", None)
    tidy, check = run_tensorcore(TINY)
    assert tidy.empty and list(tidy.columns) == TENSORCORE_COLUMNS
    summary = tensorcore_summary(tidy)
    r = claim_tensorcore(summary, check, {"max_share": 0.01})
    assert r["verdict"] == "INCONCLUSIVE"
    md = render_markdown({"tensorcore": r})
    assert "skipped: mmasim not installed; pip install pcast-fp8[tensorcore]" in md
    fig, data = fig_tensorcore(summary, 0.01)
    assert "skipped" in data["panel"].iloc[0]


def test_f13_draws_every_tensor_core_and_combination():
    s = pd.concat([_summary([1e-4, 2e-3]), _summary([1e-9, 2e-9], "tcgen05-sm100")])
    fig, data = fig_tensorcore(s, 0.01)
    assert set(data["panel"]) == {f"{c} {p}" for c in ("wgmma-sm90", "tcgen05-sm100") for p in ("ratio", "share")}
    assert data[data["panel"] == "wgmma-sm90 share"]["y"].tolist() == [1e-4, 2e-3]


def _config(**tensorcore):
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    raw["experiments"]["tensorcore"].update(tensorcore)
    return raw


@pytest.mark.parametrize("change,named", [
    (dict(pv_arith=["wgmma"]), "experiments.tensorcore.pv_arith"),
    (dict(block_n=16), "experiments.tensorcore.block_n"),
    (dict(ksink=128), "experiments.tensorcore.ksink"),
    (dict(delta=[1.0, 1.0]), "experiments.tensorcore.delta"),
])
def test_bad_config_is_one_line_naming_the_key(change, named):
    with pytest.raises(ConfigError) as e:
        load_config(_config(**change))
    assert named in str(e.value) and "\n" not in str(e.value)


def test_plan_row_counts_the_runs_and_scales_with_the_products():
    cfg = load_config(_config())
    row = plan.tensorcore_row(cfg)
    exp = cfg["experiments"]["tensorcore"]
    assert row["runs"] == exp["seeds"] * len(exp["delta"]) * 2 * 2 * len(exp["pv_arith"])
    big = plan.tensorcore_row(load_config(_config(n=2 * exp["n"])))
    assert big["cpu_s"] == pytest.approx(4 * row["cpu_s"]) and big["peak_bytes"] > row["peak_bytes"]
    assert row["cpu_s"] <= 30  # the default preset's budget for this experiment
