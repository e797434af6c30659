"""The verdict logic on constructed tidy tables: each claim passes on agreeing data and flips on
data that contradicts it. Also the table writers (booktabs, Markdown) and helpers."""

import copy
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from kernels import claims as C
from kernels import stats as st
from kernels import theory

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ("experiment, seed, n, d, block_m, block_n, causal, ksink, delta, sigma, sink_v_scale, order, "
           "scale, fmt, rowsum, combo, backend, mse, rel_mse, max_abs_err, underflow, terms, underflow_frac, "
           "underflow_sink, terms_sink, underflow_sink_frac, saturated").split(", ")
N, BLOCK, K = 256, 64, 4


def config_sections():
    """The statistics and claims sections of config.yaml, with a cheap bootstrap for the tests."""
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    if "statistics" not in cfg or "claims" not in cfg:
        pytest.skip("config.yaml has no statistics/claims sections yet")
    stats_cfg = dict(cfg["statistics"], bootstrap_resamples=200)
    return stats_cfg, copy.deepcopy(cfg["claims"])


def _row(experiment, seed, delta, svs, order, scale, mse, frac, *, n=N, k=K, saturated=0):
    terms = (n - k) * n
    uf = int(round(frac * terms))
    return {"experiment": experiment, "seed": seed, "n": n, "d": 64, "block_m": BLOCK, "block_n": BLOCK,
            "causal": False, "ksink": k, "delta": float(delta), "sigma": 1.0, "sink_v_scale": float(svs),
            "order": order, "scale": float(scale), "fmt": "e4m3fn", "rowsum": "unrounded",
            "combo": f"{order} S={float(scale):g}", "backend": "emulator", "mse": mse, "rel_mse": mse,
            "max_abs_err": math.sqrt(mse), "underflow": uf, "terms": terms, "underflow_frac": uf / terms,
            "underflow_sink": 0, "terms_sink": k * n, "underflow_sink_frac": 0.0, "saturated": saturated}


def _frame(rows):
    return pd.DataFrame(rows)[COLUMNS]


def make_collapse(*, ratio_peak=6.0, floor_gap=1.0, uf_shift=0.0, reverse_leak=0, seeds=8,
                  deltas=tuple(np.arange(0.0, 16.01, 1.0)), svs_values=(0.0, 1.0)):
    """Collapse tidy table built from the theory: underflow = exact prediction (+ ``uf_shift`` for
    forward S=1); MSE(forward S=1) = floor x a bump peaking at ``ratio_peak`` near Δ = 7; the fixes sit
    on the floor, forward S=256 at ``floor_gap`` x the floor; ``reverse_leak`` underflow events are
    added to reverse S=256 at Δ = 0."""
    rng = np.random.default_rng(0)
    base = rng.lognormal(-12, 0.3, seeds)
    rows = []
    for order in ("forward", "reverse"):
        for scale in (1, 256):
            pred = theory.underflow_fraction(np.array(deltas), scale, k=K, order=order, n=N, block_n=BLOCK,
                                             method="exact")
            for svs in svs_values:
                for di, delta in enumerate(deltas):
                    bump = 1 + (ratio_peak - 1) * math.exp(-0.5 * ((delta - 7) / 1.5) ** 2)
                    factor = {("forward", 1): bump, ("forward", 256): floor_gap}.get((order, scale), 1.0)
                    frac = float(pred[di])
                    if (order, scale) == ("forward", 1):
                        frac = min(1.0, frac + uf_shift)
                    for seed in range(seeds):
                        noise = math.exp(rng.normal(0, 0.01))
                        r = _row("collapse", seed, delta, svs, order, scale, base[seed] * factor * noise, frac)
                        if (order, scale) == ("reverse", 256) and delta == deltas[0] and reverse_leak:
                            r["underflow"] += reverse_leak
                            r["underflow_frac"] = r["underflow"] / r["terms"]
                        rows.append(r)
    return _frame(rows)


SCALES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 448, 512)


def make_scales(*, penalty_256=1.0, seeds=6):
    """Scales tidy table: MSE falls with S up to 256 (flat among large powers of two), 512 saturates;
    ``penalty_256`` multiplies the MSE at S = 256."""
    rng = np.random.default_rng(1)
    base = rng.lognormal(-12, 0.3, seeds)
    rows = []
    for order in ("forward", "reverse"):
        for scale in SCALES:
            for delta in (4.0, 8.0):
                g = 1 + 8 / scale if scale <= 448 else 50.0
                if scale == 256:
                    g *= penalty_256
                frac = float(theory.underflow_fraction(delta, scale, k=K, order=order, n=N, block_n=BLOCK))
                for seed in range(seeds):
                    rows.append(_row("scales", seed, delta, 0.0, order, scale,
                                     base[seed] * g * math.exp(rng.normal(0, 0.01)), frac,
                                     saturated=1000 if scale > 448 else 0))
    return _frame(rows)


def make_threshold(*, shift=0.0, seeds=4, deltas=tuple(np.arange(0.0, 16.01, 0.25))):
    """Threshold tidy table: the leading-order law, shifted by ``shift`` in Δ, per (ksink, S)."""
    rng = np.random.default_rng(2)
    rows = []
    for k in (1, 4):
        for scale in (1, 256):
            d = np.array(deltas)
            frac = theory.underflow_fraction(d - shift, scale, k=k, order="forward", n=N, block_n=BLOCK)
            for seed in range(seeds):
                jitter = np.clip(frac + rng.normal(0, 0.002, d.size), 0, 1)
                for delta, f in zip(d, jitter):
                    rows.append(_row("threshold", seed, delta, 1.0, "forward", scale, 1e-6, float(f), k=k))
    return _frame(rows)


def make_conformance(*, unexplained=0):
    rows = []
    for order in ("forward", "reverse"):
        for scale in (1, 256):
            for causal in (False, True):
                for seed in range(2):
                    rows.append({"order": order, "scale": scale, "causal": causal, "n": 64, "d": 16,
                                 "seed": seed, "kernel_backend": "triton-interpreted",
                                 "max_abs_diff": 1e-7 * (seed + 1), "max_rel_diff": 1e-7,
                                 "diag_equal": True, "mismatched_rows": 0, "explained": True,
                                 "fragile_elements": 0})
    for r in rows[:unexplained]:
        r.update(diag_equal=False, explained=False, mismatched_rows=1)
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def cfgs():
    return config_sections()


@pytest.fixture(scope="module")
def agreeing(cfgs):
    """Tidy tables that agree with every claim."""
    return {"collapse": make_collapse(), "scales": make_scales(), "threshold": make_threshold(),
            "conformance": make_conformance()}


@pytest.fixture(scope="module")
def verdicts(agreeing, cfgs):
    return C.evaluate_tidy(agreeing, *cfgs)


def _paired(collapse, stats_cfg):
    return st.paired_tests(collapse, [tuple(p) for p in stats_cfg["pairs"]],
                           margin=float(stats_cfg["tost_margin"]), alpha=float(stats_cfg["alpha"]),
                           n_resamples=200, seed=1)


# ----------------------------------------------------------------------------- agreeing data


def test_agreeing_data_passes_every_claim(verdicts):
    got = {k: v["verdict"] for k, v in verdicts.items()}
    assert got == {"C1": "PASS", "C2": "PASS", "C3": "PASS", "C4": "PASS", "C5": "PASS", "C6": "PASS",
                   "conformance": "PASS"}


def test_result_structure_and_outputs(verdicts):
    for key, r in verdicts.items():
        assert set(r) == {"claim", "statement", "verdict", "criterion", "numbers", "details", "evidence"}
        assert r["criterion"] and r["details"] and r["evidence"]
    md = C.render_markdown(verdicts, preset="test")
    assert "| C1 | **PASS** |" in md and "## C6: PASS" in md
    data = json.loads(C.to_json({"preset": "test", "claims": verdicts}))
    assert data["claims"]["C4"]["numbers"]["within_tolerance"] == 4
    assert C.to_json(verdicts) == C.to_json(verdicts)


def test_criteria_come_from_config(agreeing, cfgs):
    """Tightening a criterion in the config (not the data) changes the verdict."""
    stats_cfg, claims_cfg = cfgs
    collapse = st.collapse_summary(agreeing["collapse"])
    assert C.claim_c1(collapse, claims_cfg["C1"])["verdict"] == "PASS"
    strict = dict(claims_cfg["C1"], leading_max_abs_error=1e-6)
    assert C.claim_c1(collapse, strict)["verdict"] == "PARTIAL"
    thr = st.threshold_summary(agreeing["threshold"], n_resamples=200)
    assert C.claim_c4(thr, None, {"max_abs_error": 1e-9})["verdict"] in ("FAIL", "PARTIAL")


# ----------------------------------------------------------------------------- contradictions


def test_c1_flips_when_measured_fraction_leaves_the_law(cfgs):
    _, claims_cfg = cfgs
    bad = st.collapse_summary(make_collapse(uf_shift=0.1, svs_values=(0.0,)))
    r = C.claim_c1(bad, claims_cfg["C1"])
    assert r["verdict"] == "FAIL"
    assert r["numbers"]["max_abs_error_exact"] > claims_cfg["C1"]["max_abs_error"]


def test_c2_flips_when_reverse_256_underflows_in_the_guarantee_region(cfgs):
    _, claims_cfg = cfgs
    bad = st.collapse_summary(make_collapse(reverse_leak=5, svs_values=(0.0,)))
    r = C.claim_c2(bad, claims_cfg["C2"])
    assert r["verdict"] == "FAIL"
    assert r["numbers"]["violations_in_region"] >= 1


def test_c2_reports_where_the_guarantee_stops(verdicts):
    r = verdicts["C2"]
    assert r["numbers"]["first_nonzero_delta"] > r["numbers"]["guarantee_delta_max"]
    assert r["numbers"]["sink_block_share"] == pytest.approx((BLOCK - K) / (N - K))


def test_c3_flips_when_256_measures_worse(cfgs, agreeing):
    stats_cfg, claims_cfg = cfgs
    good = st.scales_summary(agreeing["scales"], n_resamples=200)
    assert C.claim_c3(good, claims_cfg["C3"])["verdict"] == "PASS"
    bad = st.scales_summary(make_scales(penalty_256=2.0), n_resamples=200)
    r = C.claim_c3(bad, claims_cfg["C3"])
    assert r["verdict"] == "PARTIAL"
    assert r["numbers"]["worst_mse_ratio_S_over_best_pow2"] > 1.5
    # a criterion that names a non-bit-exact scale contradicts the theory part: FAIL
    assert C.claim_c3(good, dict(claims_cfg["C3"], scale=300))["verdict"] == "FAIL"


def test_c4_flips_when_the_threshold_moves(cfgs):
    _, claims_cfg = cfgs
    thr = st.threshold_summary(make_threshold(shift=1.0), n_resamples=200)
    r = C.claim_c4(thr, None, claims_cfg["C4"])
    assert r["verdict"] == "FAIL"
    assert r["numbers"]["max_abs_diff"] == pytest.approx(1.0, abs=0.1)


def test_c4_inconclusive_when_grid_does_not_bracket(cfgs):
    _, claims_cfg = cfgs
    thr = st.threshold_summary(make_threshold(deltas=tuple(np.arange(0.0, 3.01, 0.5))), n_resamples=200)
    assert C.claim_c4(thr, None, claims_cfg["C4"])["verdict"] == "INCONCLUSIVE"


@pytest.mark.parametrize("peak, expected", [(1000.0, "FAIL"), (2.0, "FAIL"), (20.0, "PARTIAL")])
def test_c5_flips_outside_the_band(cfgs, peak, expected):
    stats_cfg, claims_cfg = cfgs
    paired = _paired(make_collapse(ratio_peak=peak, svs_values=(0.0,)), stats_cfg)
    r = C.claim_c5(paired, claims_cfg["C5"])
    assert r["verdict"] == expected
    regime = {"FAIL": "far above" if peak > 10 else "below", "PARTIAL": "above"}[expected]
    assert all(f"→ {regime} (" in d for d in r["details"])


def test_c5_mixed_regimes_are_partial(cfgs):
    stats_cfg, claims_cfg = cfgs
    mixed = pd.concat([make_collapse(ratio_peak=6.0, svs_values=(0.25,)),
                       make_collapse(ratio_peak=1000.0, svs_values=(0.0,))])
    r = C.claim_c5(_paired(mixed, stats_cfg), claims_cfg["C5"])
    assert r["verdict"] == "PARTIAL"


def test_c6_flips_when_the_floors_differ(cfgs):
    stats_cfg, claims_cfg = cfgs
    paired = _paired(make_collapse(floor_gap=1.3, svs_values=(0.0,)), stats_cfg)
    r = C.claim_c6(paired, claims_cfg["C6"])
    assert r["verdict"] == "PARTIAL"  # reverse S=1 still coincides with reverse S=256
    fs = [d for d in r["details"] if d.startswith("forward S=256 vs reverse S=256")]
    assert fs and "equivalent at none" in fs[0]
    only_fs = dict(claims_cfg["C6"], pairs=[["forward S=256", "reverse S=256"]])
    assert C.claim_c6(paired, only_fs)["verdict"] == "FAIL"


def test_c6_needs_equivalence_not_just_no_difference(cfgs):
    """Noisy data with no detectable difference is not declared 'same floor'."""
    stats_cfg, claims_cfg = cfgs
    df = make_collapse(svs_values=(0.0,), seeds=4)
    rng = np.random.default_rng(5)
    noisy = df["combo"] == "forward S=256"
    df.loc[noisy, "mse"] *= np.exp(rng.normal(0, 0.5, noisy.sum()))
    paired = _paired(df, stats_cfg)
    p = paired[(paired["a"] == "forward S=256") & (paired["b"] == "reverse S=256")]
    assert (p["p_wilcoxon"] > 0.05).mean() > 0.5  # mostly no significant difference ...
    r = C.claim_c6(paired, dict(claims_cfg["C6"], pairs=[["forward S=256", "reverse S=256"]]))
    assert r["verdict"] == "FAIL"  # ... and still not equivalent


def test_conformance_flips_on_unexplained_difference():
    assert C.conformance_check(make_conformance())["verdict"] == "PASS"
    assert C.conformance_check(make_conformance(unexplained=1))["verdict"] == "FAIL"
    assert C.conformance_check(pd.DataFrame())["verdict"] == "INCONCLUSIVE"


# ----------------------------------------------------------------------------- helpers, tables


def test_intervals():
    grid = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]
    assert C.intervals([0.5, 1.0, 2.0], grid) == [(0.5, 1.0), (2.0, 2.0)]
    assert C.intervals([], grid) == []


def test_booktabs_and_markdown(tmp_path):
    display = pd.DataFrame({"Δ": ["4", "8"], "a / b": ["forward S=1 / reverse S=256"] * 2,
                            "|diff| ≤ 0.5": ["yes", "no"], "p_x": ["0.01", "50%"]})
    tex = C.to_booktabs(display, caption="T: Δc & δk", label="tab:x")
    for token in (r"\toprule", r"\midrule", r"\bottomrule", r"\begin{tabular}{llrr}", r"$\Delta$",
                  r"$\Delta_c$ \& $\delta_k$", r"p\_x", r"50\%", r"$\le$"):
        assert token in tex
    assert tex.count(r" \\") == 3
    md = C.to_markdown(display, caption="T")
    lines = md.strip().splitlines()
    assert lines[2].startswith("| Δ") and set(lines[3]) <= set("|:- ")
    assert r"\|diff\|" in md and len(lines) == 6
    C.write_table(display, display, csv=tmp_path / "t.csv", tex=tmp_path / "t.tex", md=tmp_path / "t.md",
                  caption="T", label="tab:t")
    assert pd.read_csv(tmp_path / "t.csv").shape == (2, 4)


def test_table_builders(agreeing, cfgs):
    stats_cfg, _ = cfgs
    paired = _paired(agreeing["collapse"], stats_cfg)
    t1 = C.table_paired(paired, [4, 8])
    assert set(t1["Δ"]) == {"4", "8"} and len(t1) == 2 * 2 * 6
    t2 = C.table_scales(st.scales_summary(agreeing["scales"], n_resamples=200))
    assert len(t2) == 2 * len(SCALES) and t2.loc[t2["S"] == "512", "P=1 saturates"].eq("yes").all()
    assert t2.loc[t2["S"] == "448", "bit-exact"].eq("no").all()
    thr = st.threshold_summary(agreeing["threshold"], n_resamples=200)
    knees = st.knee_summary(paired)
    t3 = C.table_thresholds(thr, knees, 0.5)
    assert len(t3) == 4 and t3["|diff| ≤ 0.5"].eq("yes").all()
    t4 = C.table_conformance(agreeing["conformance"])
    assert len(t4) == 8 and t4["explained"].eq("2/2").all()
