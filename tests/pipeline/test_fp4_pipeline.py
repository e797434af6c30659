"""The fp4 experiment in the pipeline: the tidy table of a tiny real run (columns,
determinism, counts that agree), the summary on a synthetic table whose answers are known, T7, F11, the
FP4 section of the verdict through the registry, and the config checks."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import yaml

import synthetic_tables as data
from pcast.analysis import fp4_predictions, fp4_table, registry, verdicts
from pcast.analysis.fp4 import fp4_summary
from pcast.analysis.plots import DATA_COLUMNS, fig_fp4
from pcast.contract import FP4_EXPERIMENT, FP4_TIDY_COLUMNS
from pcast.pipeline import config as pconfig
from pcast.pipeline.fp4_config import cast_label, casts
from pcast.pipeline.fp4_runs import run_fp4_shard
from pcast.pipeline.inputs import write_inputs
from pcast.pipeline.tables import merge_tidy
from repo_copy import REPO

CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())
SMOKE = pconfig.resolve_preset({**CONFIG, "preset": "smoke"})


# ----------------------------------------------------------------------------- a tiny real run


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The smoke preset's fp4 grid (2 seeds, n = 128), one shard, merged twice."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        d = tmp_path_factory.mktemp("fp4")
        exp = SMOKE["experiments"][FP4_EXPERIMENT]
        write_inputs(pconfig.inputs_spec(FP4_EXPERIMENT, exp, 0), d / "in.safetensors")
        run_fp4_shard(pconfig.shard_spec(FP4_EXPERIMENT, exp, 0), d / "in.safetensors", d / "s.csv", d / "t.csv")
    finally:
        torch.set_num_threads(old)
    expected = pconfig.expected_rows(FP4_EXPERIMENT, exp)
    for name in ("a.csv", "b.csv"):
        merge_tidy([d / "s.csv"], d / name, experiment=FP4_EXPERIMENT, expected=expected)
    return d, exp


def test_tidy_table_columns_rows_and_bytes(tiny_run):
    d, exp = tiny_run
    text = (d / "a.csv").read_text()
    assert text == (d / "b.csv").read_text()
    assert text.splitlines()[0] == ",".join(FP4_TIDY_COLUMNS)
    df = pd.read_csv(d / "a.csv")
    assert len(df) == pconfig.expected_rows(FP4_EXPERIMENT, exp) == 2 * 5 * 2 * len(casts(exp))
    assert set(df["cast"]) == {c["cast"] for c in casts(exp)}
    raw = pd.read_csv(d / "a.csv", dtype=str)
    for col in ("mse", "rel_mse", "underflow_frac", "groups_flushed_frac"):
        assert all("%.10g" % float(x) == x for x in raw[col]), col  # floats as %.10g


def test_tidy_counts_agree(tiny_run):
    df = pd.read_csv(tiny_run[0] / "a.csv")
    assert (df["underflow_scale"] <= df["underflow"]).all()
    assert (df["underflow_elem"] == df["underflow"] - df["underflow_scale"]).all()
    assert (df["groups_flushed"] <= df["groups"]).all()
    assert ((df["underflow"] <= df["terms"]) & (df["groups_flushed_frac"].between(0, 1))).all()
    fp8, mx = df[df["fmt"] == "e4m3fn"], df[df["fmt"] == "mxfp4"]
    assert (fp8[["groups", "groups_flushed", "underflow_scale"]] == 0).all().all()
    assert (mx["groups_flushed"] == 0).all() and (mx["groups"] == 128 * 128 // 32).all()  # an E8M0 scale never flushes
    nv = df[(df["fmt"] == "nvfp4") & (df["scale_mode"] == "multiply") & (df["scale"] == 1)]
    fwd = nv[(nv["order"] == "forward") & (nv["delta"] == 16)]
    assert (fwd["groups_flushed_frac"] > 0.5).all() and (fwd["underflow_scale"] > 0).all()  # the flush collapse
    # a flushed group's positive keys are all lost to the scale: no flushed groups without scale underflow
    assert not ((df["groups_flushed"] > 0) & (df["underflow_scale"] == 0)).any()


def test_shard_diagnostics_equal_single_calls(tiny_run):
    """The shard's batched calls (one first-level scale each) give what one pcast.attention call gives."""
    import torch

    from pcast import attention
    from pcast.pipeline.inputs import base_tensors, load_inputs
    from pcast.models.sinks import apply_sink

    d, exp = tiny_run
    spec = pconfig.shard_spec(FP4_EXPERIMENT, exp, 0)
    base = base_tensors(load_inputs(d / "in.safetensors", spec), 1, 128, 16, 1.0)
    q, k, v = apply_sink(*base, ksink=4, delta=8.0, sink_v_scale=1.0)
    df = pd.read_csv(d / "a.csv")
    torch.set_num_threads(1)
    for c in casts(exp):
        r = attention(q, k, v, fmt=c["fmt"], scale=c["scale"], scale_mode=c["scale_mode"], order="forward", ksink=4,
                      block_m=32, block_n=32, backend="emulator")
        row = df[(df["seed"] == 1) & (df["cast"] == c["cast"]) & (df["order"] == "forward") & (df["delta"] == 8)]
        for col in ("underflow", "underflow_scale", "groups_flushed", "saturated"):
            assert int(row[col].iloc[0]) == int(getattr(r, col).sum()), (c["cast"], col)


def test_cast_labels():
    assert cast_label("nvfp4", 2048.0, "multiply") == "nvfp4 S1=2048"
    assert cast_label("nvfp4", 1.0, "per_row") == "nvfp4 per-row" and cast_label("e4m3fn", 256, "multiply") == "e4m3fn S=256"


# ----------------------------------------------------------------------------- statistics with known answers


@pytest.fixture(scope="module")
def synthetic():
    return fp4_summary(data.make_fp4(dcs={1.0: 6.0, 256.0: 11.5}), n_resamples=300, seed=1)


def test_summary_recovers_the_known_answers(synthetic):
    s = synthetic
    fwd = s[s["order"] == "forward"].drop_duplicates("cast").set_index("cast")
    for cast, dc in (("nvfp4 S1=1", 6.0), ("nvfp4 S1=256", 11.5)):
        assert fwd.at[cast, "dc_meas"] == pytest.approx(dc, abs=1e-9)
        assert fwd.at[cast, "dc_lo"] <= dc <= fwd.at[cast, "dc_hi"]
    for cast in ("nvfp4 per-row", "mxfp4 S1=1", "e4m3fn S=256"):
        assert math.isnan(fwd.at[cast, "dc_meas"]) and fwd.at[cast, "flushed_at_start"] == 0
    assert np.allclose(s["fr_ratio"], 2.0) and np.allclose(s["fr_ratio_lo"], 2.0)  # every seed's ratio is 2
    assert np.allclose(s.loc[s["fmt"] != "e4m3fn", "base_ratio"], 3.0)
    assert np.allclose(s.loc[s["fmt"] == "e4m3fn", "base_ratio"], 1.0)
    mid = s[(s["cast"] == "nvfp4 S1=1") & (s["order"] == "forward") & (s["delta"] == 6.0)]
    assert mid["groups_flushed_frac_mean"].iloc[0] == pytest.approx(0.5, abs=0.01)
    assert (s["n_seeds"] == 4).all() and len(s) == 5 * 2 * 17
    rev = s[s["order"] == "reverse"]
    assert rev["dc_pred"].isna().all() and rev["dc_meas"].isna().all()


def test_summary_refuses_a_bad_table():
    with pytest.raises(ValueError, match="columns .*missing"):
        fp4_summary(data.make_fp4().drop(columns=["groups_flushed_frac"]))
    with pytest.raises(ValueError, match="crossing_level"):
        fp4_summary(data.make_fp4(), crossing_level=1.5)


def test_theory_columns_where_they_apply(synthetic):
    s = synthetic
    static_fwd = s[(s["fmt"] == "nvfp4") & (s["scale_mode"] == "multiply") & (s["order"] == "forward")]
    assert static_fwd[["dc_pred", "flush_threshold", "pred_groups_flushed", "pred_underflow_elem"]].notna().all().all()
    assert (s.loc[s["fmt"] == "mxfp4", "pred_groups_flushed"] == 0).all()
    assert s.loc[s["fmt"] == "e4m3fn", ["dc_pred", "pred_groups_flushed", "pred_underflow_elem"]].isna().all().all()


# ----------------------------------------------------------------------------- T7, F11, the verdict


def test_t7_and_f11_from_the_summary(synthetic, tmp_path):
    t = fp4_table.fp4(synthetic, {"crossing_level": 0.5, "confidence_level": 0.95}, {"delta": 8.0})
    assert list(t.display["P cast"]) == ["nvfp4 S1=1", "nvfp4 S1=256", "nvfp4 per-row", "mxfp4 S1=1", "e4m3fn S=256"]
    assert t.display.iloc[2]["Δc measured [CI]"] == "never" and t.label == "tab:fp4"
    assert t.data["fr_ratio"].tolist() == pytest.approx([2.0] * 5)
    fig, d = fig_fp4(synthetic)
    assert list(d.columns[:6]) == DATA_COLUMNS and len(d) > 0 and set(d["panel"]) == set("abcdef")
    plt.close(fig)


def test_registry_has_the_fp4_section():
    c = registry.claim(FP4_EXPERIMENT)
    assert c.outputs == ("fig_fp4", "table_fp4") and set(c.criterion_keys) == set(CONFIG["claims"]["fp4"])
    assert "fig_fp4" in registry.FIGURES and "table_fp4" in registry.TABLES
    assert registry.EXPERIMENT_CATEGORY[FP4_EXPERIMENT] == registry.category("fig_fp4")


def test_verdict_is_computed_from_the_data():
    """Measured Δc placed on the closed form passes; moved by 2 it fails; the numbers come from the theory."""
    cfg = {"delta": 8.0}
    row = {"fmt": "nvfp4", "scale_mode": "multiply", "ksink": 4, "sigma": 1.0, "n": 512, "block_n": 64}
    dcs = {s: fp4_predictions.critical_delta({**row, "scale": s}) for s in (1.0, 16.0)}
    good = verdicts.claim_fp4(fp4_summary(data.make_fp4(dcs=dcs), n_resamples=200), cfg)
    bad = verdicts.claim_fp4(fp4_summary(data.make_fp4(dcs={s: v + 2 for s, v in dcs.items()}), n_resamples=200), cfg)
    assert good["verdict"] == "PASS" and bad["verdict"] == "FAIL"
    assert good["numbers"]["optimal_S1"] == fp4_predictions.optimal_scale()
    assert good["statement"] == registry.claim("fp4").statement
    md = verdicts.render_markdown({"fp4": good})
    assert "## fp4: PASS" in md and "derived optimal static S1" in md


# ----------------------------------------------------------------------------- config checks


@pytest.mark.parametrize("override, words", [
    ({"experiments": {"fp4": {"shapes": [{"n": 128, "d": 16, "block_m": 16, "block_n": 16}]}}},
     ["experiments.fp4.shapes[0].block_n", "mxfp4", "multiple of its group, 32"]),
    ({"experiments": {"fp4": {"ksink": 40, "shapes": [{"n": 128, "d": 16, "block_m": 32, "block_n": 32}]}}},
     ["experiments.fp4.ksink", "ksink <= block_n"]),
    ({"experiments": {"fp4": {"nvfp4_scales": [], "nvfp4_per_row": False, "mxfp4_scales": []}}},
     ["experiments.fp4", "no FP4 cast"]),
    ({"claims": {"fp4": {"delta": 8.25}}}, ["claims.fp4.delta", "not on the Δ grid"]),
])
def test_config_errors_name_the_key(override, words):
    cfg = pconfig.resolve_preset({**CONFIG, "preset": "smoke"}, override)
    with pytest.raises(pconfig.ConfigError) as e:
        pconfig.check_config(cfg)
    for w in words:
        assert w in str(e.value), str(e.value)
