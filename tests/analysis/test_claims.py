"""The verdict logic on constructed tidy tables (tests/support/synthetic_tables.py): each claim passes on
agreeing data and flips on data that contradicts it. Also the table writers (booktabs, Markdown),
the statistics builders from config, and helpers."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kernels.analysis import registry, stats, tables as T, verdicts as C
from kernels.analysis.paired import paired_tests
from kernels.analysis.summaries import collapse_summary, knee_summary, scales_summary, threshold_summary
from synthetic_tables import (
    BLOCK, K, N, SCALES, config_sections, make_collapse, make_conformance, make_scales, make_threshold,
)

ROOT = Path(__file__).resolve().parents[2]


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
    return paired_tests(collapse, [tuple(p) for p in stats_cfg["pairs"]],
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
        # statement and evidence come from the one registry of the claims
        assert r["statement"] == registry.claim(key).statement
        assert r["evidence"] == list(registry.claim(key).outputs)
    md = C.render_markdown(verdicts, preset="test")
    assert "| C1 | **PASS** |" in md and "## C6: PASS" in md
    data = json.loads(C.to_json({"preset": "test", "claims": verdicts}))
    assert data["claims"]["C4"]["numbers"]["within_tolerance"] == 4
    assert C.to_json(verdicts) == C.to_json(verdicts)


def test_claims_md_shows_the_presets_expected_verdicts_and_flags_a_difference(verdicts):
    expected = {"C1": {"verdict": "PASS", "why": "same as the default run"},
                "C4": {"verdict": "PARTIAL", "why": "a coarse grid"}}
    md = C.render_markdown(verdicts, preset="smoke", expected=expected)
    section = md.split("## Expected verdicts of the `smoke` preset")[1].split("\n## ")[0]
    assert "| C1 | PASS | PASS | same as the default run |" in section
    assert "| C4 | PARTIAL | PASS (differs) | a coarse grid |" in section
    assert "differs from the expected verdict in: C4." in section
    agree = C.render_markdown(verdicts, preset="smoke", expected={"C1": expected["C1"]})
    assert "This run gives every expected verdict." in agree
    assert "Expected verdicts" not in C.render_markdown(verdicts, preset="smoke")


def test_criteria_come_from_config(agreeing, cfgs):
    """Tightening a criterion in the config (not the data) changes the verdict."""
    stats_cfg, claims_cfg = cfgs
    collapse = collapse_summary(agreeing["collapse"])
    assert C.claim_c1(collapse, claims_cfg["C1"])["verdict"] == "PASS"
    strict = dict(claims_cfg["C1"], leading_max_abs_error=1e-6)
    assert C.claim_c1(collapse, strict)["verdict"] == "PARTIAL"
    thr = threshold_summary(agreeing["threshold"], n_resamples=200)
    assert C.claim_c4(thr, None, {"max_abs_error": 1e-9})["verdict"] in ("FAIL", "PARTIAL")


def test_statistics_builders_read_the_config(agreeing, cfgs):
    """Each builder of kernels.analysis.stats is its summary with the config's settings."""
    stats_cfg, _ = cfgs
    boot = {"n_resamples": 200, "confidence_level": float(stats_cfg["confidence_level"]),
            "boot_method": stats_cfg["bootstrap_method"], "seed": int(stats_cfg["seed"])}
    assert stats.bootstrap(stats_cfg) == boot
    paired, knees = stats.paired(agreeing["collapse"], stats_cfg)
    direct = paired_tests(agreeing["collapse"], [tuple(p) for p in stats_cfg["pairs"]],
                          margin=float(stats_cfg["tost_margin"]), alpha=float(stats_cfg["alpha"]), **boot)
    pd.testing.assert_frame_equal(paired, direct)
    pd.testing.assert_frame_equal(knees, knee_summary(direct, reference=stats_cfg["reference"],
                                                      factor=float(stats_cfg["knee_factor"])))
    pd.testing.assert_frame_equal(stats.collapse(agreeing["collapse"], stats_cfg),
                                  collapse_summary(agreeing["collapse"], level=float(stats_cfg["seed_interval"])))
    pd.testing.assert_frame_equal(
        stats.threshold(agreeing["threshold"], stats_cfg),
        threshold_summary(agreeing["threshold"], level=float(stats_cfg["crossing_level"]), **boot))
    # a key of the section changes what the builder computes
    _, steeper = stats.paired(agreeing["collapse"], dict(stats_cfg, knee_factor=4.0))
    assert (steeper["factor"] == 4.0).all() and not steeper["knee"].equals(knees["knee"])


# ----------------------------------------------------------------------------- contradictions


def test_c1_flips_when_measured_fraction_leaves_the_law(cfgs):
    _, claims_cfg = cfgs
    bad = collapse_summary(make_collapse(uf_shift=0.1, svs_values=(0.0,)))
    r = C.claim_c1(bad, claims_cfg["C1"])
    assert r["verdict"] == "FAIL"
    assert r["numbers"]["max_abs_error_exact"] > claims_cfg["C1"]["max_abs_error"]


def test_c2_flips_when_reverse_256_underflows_in_the_guarantee_region(cfgs):
    _, claims_cfg = cfgs
    bad = collapse_summary(make_collapse(reverse_leak=5, svs_values=(0.0,)))
    r = C.claim_c2(bad, claims_cfg["C2"])
    assert r["verdict"] == "FAIL"
    assert r["numbers"]["violations_in_region"] >= 1


def test_c2_reports_where_the_guarantee_stops(verdicts):
    r = verdicts["C2"]
    assert r["numbers"]["first_nonzero_delta"] > r["numbers"]["guarantee_delta_max"]
    assert r["numbers"]["sink_block_share"] == pytest.approx((BLOCK - K) / (N - K))


def test_c3_flips_when_256_measures_worse(cfgs, agreeing):
    stats_cfg, claims_cfg = cfgs
    good = scales_summary(agreeing["scales"], n_resamples=200)
    assert C.claim_c3(good, claims_cfg["C3"])["verdict"] == "PASS"
    bad = scales_summary(make_scales(penalty_256=2.0), n_resamples=200)
    r = C.claim_c3(bad, claims_cfg["C3"])
    assert r["verdict"] == "PARTIAL"
    assert r["numbers"]["worst_mse_ratio_S_over_best_pow2"] > 1.5
    # a criterion that names a non-bit-exact scale contradicts the theory part: FAIL
    assert C.claim_c3(good, dict(claims_cfg["C3"], scale=300))["verdict"] == "FAIL"


def test_c4_flips_when_the_threshold_moves(cfgs):
    _, claims_cfg = cfgs
    thr = threshold_summary(make_threshold(shift=1.0), n_resamples=200)
    r = C.claim_c4(thr, None, claims_cfg["C4"])
    assert r["verdict"] == "FAIL"
    assert r["numbers"]["max_abs_diff"] == pytest.approx(1.0, abs=0.1)


def test_c4_inconclusive_when_grid_does_not_bracket(cfgs):
    _, claims_cfg = cfgs
    thr = threshold_summary(make_threshold(deltas=tuple(np.arange(0.0, 3.01, 0.5))), n_resamples=200)
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
    tex = T.to_booktabs(display, caption="T: Δc & δk", label="tab:x")
    for token in (r"\toprule", r"\midrule", r"\bottomrule", r"\begin{tabular}{llrr}", r"$\Delta$",
                  r"$\Delta_c$ \& $\delta_k$", r"p\_x", r"50\%", r"$\le$"):
        assert token in tex
    assert tex.count(r" \\") == 3
    md = T.to_markdown(display, caption="T")
    lines = md.strip().splitlines()
    assert lines[2].startswith("| Δ") and set(lines[3]) <= set("|:- ")
    assert r"\|diff\|" in md and len(lines) == 6
    T.write_table(display, display, csv=tmp_path / "t.csv", tex=tmp_path / "t.tex", md=tmp_path / "t.md",
                  caption="T", label="tab:t")
    assert pd.read_csv(tmp_path / "t.csv").shape == (2, 4)


def test_table_builders(agreeing, cfgs):
    stats_cfg, _ = cfgs
    paired = _paired(agreeing["collapse"], stats_cfg)
    t1 = T.table_paired(paired, [4, 8])
    assert set(t1["Δ"]) == {"4", "8"} and len(t1) == 2 * 2 * 6
    t2 = T.table_scales(scales_summary(agreeing["scales"], n_resamples=200))
    assert len(t2) == 2 * len(SCALES) and t2.loc[t2["S"] == "512", "P=1 saturates"].eq("yes").all()
    assert t2.loc[t2["S"] == "448", "bit-exact"].eq("no").all()
    thr = threshold_summary(agreeing["threshold"], n_resamples=200)
    knees = knee_summary(paired)
    t3 = T.table_thresholds(thr, knees, 0.5)
    assert len(t3) == 4 and t3["|diff| ≤ 0.5"].eq("yes").all()
    t4 = T.table_conformance(agreeing["conformance"])
    assert len(t4) == 8 and t4["explained"].eq("2/2").all()


def test_table_builders_from_config(agreeing, cfgs, tmp_path):
    """One builder per table rule: display, data, caption and label from the statistics and config."""
    stats_cfg, claims_cfg = cfgs
    paired = _paired(agreeing["collapse"], stats_cfg)
    t1 = T.paired_tests(paired, stats_cfg)
    assert t1.data is paired and t1.label == "tab:paired-tests"
    assert set(t1.display["Δ"]) == {f"{d:g}" for d in stats_cfg["table_deltas"]}  # all on the grid
    assert len(t1.display) < len(paired)
    assert "Δ ∈ {" + ", ".join(f"{d:g}" for d in stats_cfg["table_deltas"]) + "}" in t1.caption
    assert f"Holm over all {len(paired)} rows" in t1.caption
    thr = threshold_summary(agreeing["threshold"], n_resamples=200)
    t3 = T.thresholds(thr, knee_summary(paired), dict(claims_cfg["C4"], max_abs_error=0.25))
    assert "|diff| ≤ 0.25" in t3.display.columns and "≤ 0.25" in t3.caption
    T.write(T.conformance(agreeing["conformance"]), csv=tmp_path / "t4.csv", tex=tmp_path / "t4.tex",
            md=tmp_path / "t4.md")
    assert pd.read_csv(tmp_path / "t4.csv").shape == agreeing["conformance"].shape
    assert r"\label{tab:conformance}" in (tmp_path / "t4.tex").read_text()
    assert (tmp_path / "t4.md").read_text().startswith("T4. Conformance")


def test_registry_criterion_keys_are_the_config_and_schema_keys(cfgs):
    """Each claim's criterion keys in the registry are exactly its keys in config.yaml and the schema."""
    import yaml

    _, claims_cfg = cfgs
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "claims.schema.yaml").read_text())
    props = schema["properties"]["claims"]["properties"]
    for c in registry.CLAIMS:
        if c.id == "conformance":
            assert c.criterion_keys == () and c.id not in claims_cfg
            continue
        assert set(c.criterion_keys) == set(claims_cfg[c.id]) == set(props[c.id]["properties"]), c.id
    assert [c.id for c in registry.CLAIMS if c.id != "conformance"] == sorted(claims_cfg)
