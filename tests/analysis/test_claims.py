"""The verdict logic on constructed tidy tables (tests/support/synthetic_tables.py): each claim passes on
agreeing data and flips on data that contradicts it. Also the table writers (booktabs, Markdown),
the statistics builders from config, and helpers."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pcast.analysis import registry, stats, tables as T, verdicts as C
from pcast.analysis.paired import paired_tests
from pcast.analysis.summaries import collapse_summary, knee_summary, scales_summary, threshold_summary
from pcast.analysis.verdicts.common import Subcase
from pcast.analysis.verdicts.paper import printed_precision
from pcast.analysis.verdicts.underflow import leading_order_tolerance
from synthetic_tables import (
    BLOCK, K, N, SCALES, config_sections, make_collapse, make_conformance, make_scales, make_threshold,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cfgs():
    return config_sections()


@pytest.fixture(scope="module")
def agreeing(cfgs):
    """Tidy tables that agree with every claim: reverse S=256 never underflows (the paper's guarantee) and
    the Δ grid stops where forward S=256's precision loss would start (12 < Δc(256) + the onset span)."""
    return {"collapse": make_collapse(reverse_zero="all", deltas=tuple(np.arange(0.0, 12.01, 1.0))),
            "scales": make_scales(), "threshold": make_threshold(), "conformance": make_conformance()}


@pytest.fixture(scope="module")
def verdicts(agreeing, cfgs):
    return C.evaluate_tidy(agreeing, *cfgs)


def _paired(collapse, stats_cfg):
    return paired_tests(collapse, [tuple(p) for p in stats_cfg["pairs"]],
                        margin=float(stats_cfg["tost_margin"]), alpha=float(stats_cfg["alpha"]),
                        n_resamples=200, seed=1)


def _scoped(r, prefix):
    return [s for s in r["scoped"] if s["scope"].startswith(prefix)]


# ----------------------------------------------------------------------------- the strict rule


@pytest.mark.parametrize("cells, expected", [
    (["PASS", "PASS"], "PASS"),
    (["PASS", "PARTIAL"], "PARTIAL"),
    (["PASS", "PASS", "FAIL"], "FAIL"),  # one setting the sentence covers contradicts it
    (["PARTIAL", "FAIL", "FAIL"], "FAIL"),
    (["INCONCLUSIVE", "PASS"], "PASS"),
    (["INCONCLUSIVE"], "INCONCLUSIVE"),
    ([], "INCONCLUSIVE"),
])
def test_combine_is_strict(cells, expected):
    assert C.combine(cells) == expected
    assert C.combine([Subcase(f"s{i}", v) for i, v in enumerate(cells)]) == expected


@pytest.mark.parametrize("holds, trivial, guarantee, expected", [
    ([1, 1, 1], [0, 0, 0], False, "PASS"),
    ([1, 1, 1], [1, 1, 1], False, "INCONCLUSIVE"),  # only trivial points: no support
    ([1, 1, 0, 0], [1, 1, 0, 0], False, "FAIL"),  # holds only where the sink cannot matter
    ([1, 1, 1, 0], [1, 1, 0, 0], False, "PARTIAL"),
    ([1, 1, 1, 0], [0, 0, 0, 0], True, "FAIL"),  # a guarantee: one counterexample
    ([], [], False, "INCONCLUSIVE"),
])
def test_subcase_verdict_ignores_trivial_support(holds, trivial, guarantee, expected):
    assert C.subcase_verdict(holds, trivial, guarantee=guarantee) == expected


def test_family_tolerances():
    assert C.family_z(0.95, 1) == pytest.approx(1.959964, abs=1e-6)
    assert C.family_z(0.95, 10) == pytest.approx(2.807034, abs=1e-6)  # Bonferroni: 1 - 0.05 / 20
    # the side of the CI facing the prediction, widened by z(10)/z(1)
    assert C.ci_tolerance(5.0, 4.9, 5.2, 6.0, level=0.95, m=10) == pytest.approx(0.2 * 2.807034 / 1.959964)
    assert C.ci_tolerance(5.0, 4.9, 5.2, 4.0, level=0.95, m=1) == pytest.approx(0.1)


def test_leading_order_tolerance_is_the_first_neglected_term():
    """½ Var(max of k N(0,1)) φ(1), against a Monte Carlo variance of the max (independent of quadrature)."""
    rng = np.random.default_rng(0)
    var4 = rng.standard_normal((400_000, 4)).max(axis=1).var()
    assert leading_order_tolerance(4) == pytest.approx(0.5 * var4 * 0.24197072451914337, rel=0.01)
    assert leading_order_tolerance(1) == pytest.approx(0.5 * 0.24197072451914337, rel=1e-6)


# ----------------------------------------------------------------------------- agreeing data


def test_agreeing_data_passes_every_claim(verdicts):
    got = {k: v["verdict"] for k, v in verdicts.items()}
    assert got == {"C1": "PASS", "C2": "PASS", "C3": "PASS", "C4": "PASS", "C5": "PASS", "C6": "PASS",
                   "paper": "PASS", "conformance": "PASS"}


def test_result_structure_and_outputs(verdicts):
    for key, r in verdicts.items():
        assert {"claim", "statement", "verdict", "criterion", "numbers", "details", "evidence", "scoped",
                "tolerances"} <= set(r)
        assert r["criterion"] and r["details"]
        # statement and evidence come from the one registry of the claims
        assert r["statement"] == registry.claim(key).statement
        assert r["evidence"] == list(registry.claim(key).outputs)
        if key.startswith("C"):
            assert r["evidence"] and r["tolerances"] and r["scoped"], key
    md = C.render_markdown(verdicts, preset="test")
    assert "| C1 | **PASS** |" in md and "## C6: PASS" in md
    for key in ("C1", "C2", "C3", "C4", "C5", "C6"):
        assert f"“{registry.claim(key).statement}”" in md  # the abstract's sentence, quoted
    assert md.count("*Tolerances.*") >= 6 and md.count("*Scoped verdicts") >= 6
    assert "| number | paper | artifact (theory) | artifact (measured) | agrees |" in md
    data = json.loads(C.to_json({"preset": "test", "claims": verdicts}))
    assert data["claims"]["C4"]["numbers"]["crossings_within"] == 4
    assert C.to_json(verdicts) == C.to_json(verdicts)


def test_claims_c1_to_c6_carry_readings_robustness_and_domain(verdicts):
    """Each of C1–C6 keeps verdict and scoped and adds readings (the verdict is the rule across them),
    robustness rows with a source and alternative verdicts, and C6 what lies beyond its domain; claims.md
    prints them all."""
    for key in ("C1", "C2", "C3", "C4", "C5", "C6"):
        r = verdicts[key]
        assert {"verdict", "scoped", "readings", "robustness", "headline", "kinds"} <= set(r), key
        assert r["readings"] and all(set(x) == {"reading", "verdict", "domain"} for x in r["readings"]), key
        assert r["verdict"] == C.across_readings([x["verdict"] for x in r["readings"]]), key
        assert r["robustness"], key
        for c in r["robustness"]:
            assert set(c) == {"choice", "value", "source", "verdicts", "key", "default"}, (key, c)
            assert c["source"] and c["verdicts"], (key, c)
    assert "beyond_domain" in verdicts["C6"]
    md = C.render_markdown(verdicts, preset="test")
    assert md.count("*Readings (each over the claim's domain).*") == 6
    assert md.count("*Robustness (every choice") == 6
    for c in verdicts["C5"]["robustness"]:
        assert f"| {c['choice']}" in md and f" | {c['value']} |" in md


def test_every_presets_why_fills_from_a_run(verdicts):
    """The expected-verdict texts of C1–C6 and the paper are templates; each fills from a run's claims."""
    import yaml

    from pcast.analysis.verdicts.templates import fill, slots

    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    for name in ("default", "smoke"):
        for key in ("C1", "C2", "C3", "C4", "C5", "C6", "paper"):
            why = cfg["presets"][name]["expected_verdicts"][key]["why"]
            assert slots(why), (name, key)  # no typed numbers: every number a slot
            text = fill(why, verdicts)
            assert "{" not in text and text != why, (name, key)


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
    paired = _paired(agreeing["collapse"], stats_cfg)
    assert C.claim_c5(paired, claims_cfg["C5"])["verdict"] == "PASS"
    assert C.claim_c5(paired, dict(claims_cfg["C5"], band=[3, 4]))["verdict"] == "PARTIAL"
    thr = threshold_summary(agreeing["threshold"], n_resamples=200)
    knees = knee_summary(paired)
    assert C.claim_c4(thr, knees, claims_cfg["C4"], grid_max=12)["verdict"] == "PASS"
    narrow = dict(claims_cfg["C4"], knee_onset_fraction=0.45)  # an onset span of 0.13 σ
    r = C.claim_c4(thr, knees, narrow, grid_max=12)
    assert r["verdict"] == "PARTIAL"  # the knee readings fail, the crossing reading still holds
    assert [x["verdict"] for x in r["readings"]] == ["PASS", "FAIL", "FAIL"]


def test_statistics_builders_read_the_config(agreeing, cfgs):
    """Each builder of pcast.analysis.stats is its summary with the config's settings."""
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


def test_collapse_summary_standard_error():
    df = make_collapse(svs_values=(0.0,), seeds=4)
    s = collapse_summary(df)
    row = s[(s["combo"] == "forward S=1") & (s["delta"] == 6.0)].iloc[0]
    per_seed = df[(df["combo"] == "forward S=1") & (df["delta"] == 6.0)]["underflow_frac"]
    assert row["underflow_frac_se"] == pytest.approx(per_seed.std(ddof=1) / 2)


# ----------------------------------------------------------------------------- contradictions


def test_c1_flips_when_measured_fraction_leaves_the_law(cfgs):
    _, claims_cfg = cfgs
    bad = collapse_summary(make_collapse(uf_shift=0.2, svs_values=(0.0,)))
    r = C.claim_c1(bad, claims_cfg["C1"])
    assert r["verdict"] == "FAIL"
    assert r["numbers"]["max_abs_error_leading[forward S=1]"] > r["numbers"]["tolerance_leading"]
    assert [s["verdict"] for s in r["scoped"]] == ["FAIL", "PASS"]  # forward S=256 still on the law


def test_c2_judges_both_halves_on_one_key_set(cfgs):
    """The guarantee's key set is a reading, the same for both halves. Every non-sink key: one underflow event of
    reverse S=256 anywhere on the grid fails it, and so does reverse S=1's sink block; the keys outside the sink
    block: each half is allowed the sink block's share."""
    _, claims_cfg = cfgs
    every, outside = (f"the guarantee covers {k}" for k in ("all non-sink keys", "the keys outside the sink block"))

    def by_reading(r):
        return {x["reading"]: x["verdict"] for x in r["readings"]}

    ok = C.claim_c2(collapse_summary(make_collapse(reverse_zero="all", svs_values=(0.0,))), claims_cfg["C2"])
    assert ok["verdict"] == "PASS" and by_reading(ok) == {every: "PASS", outside: "PASS"}
    leak = C.claim_c2(collapse_summary(make_collapse(reverse_zero="all", reverse_leak=5, svs_values=(0.0,))),
                      claims_cfg["C2"])
    assert by_reading(leak) == {every: "FAIL", outside: "PASS"} and leak["verdict"] == "PARTIAL"
    # the exact model's own residual: both reverse combinations underflow in the sink block's non-sink keys
    r = C.claim_c2(collapse_summary(make_collapse(svs_values=(0.0,))), claims_cfg["C2"])
    assert by_reading(r) == {every: "FAIL", outside: "PASS"} and r["verdict"] == "PARTIAL"
    assert r["numbers"]["first_nonzero_delta"] > 0
    assert r["numbers"]["sink_block_share"] == pytest.approx((BLOCK - K) / (N - K))
    region = _scoped(r, "reverse S=256 where the exact model expects")
    assert region and region[0]["verdict"] == "PASS"  # the scoped verdict beneath, not the verdict
    block = [c for c in r["robustness"] if c["key"] == "claims.C2.alternatives.block_n"]
    assert block and block[0]["value"] == str(BLOCK)


def test_c3_states_theory_and_measures_every_scale(cfgs, agreeing):
    stats_cfg, claims_cfg = cfgs
    good = scales_summary(agreeing["scales"], n_resamples=200)
    r = C.claim_c3(good, claims_cfg["C3"])
    assert r["verdict"] == "PASS"
    assert all(s["scope"].startswith(("theoretical", "measured")) for s in r["scoped"])
    bad = scales_summary(make_scales(penalty_256=2.0), n_resamples=200)
    r = C.claim_c3(bad, claims_cfg["C3"])
    assert r["verdict"] == "PASS"  # the sentence's properties are theoretical ...
    measured = _scoped(r, "measured: S=256 has the lowest MSE among non-saturating powers")
    assert measured[0]["verdict"] == "FAIL" and r["numbers"]["best_among_pow2"] == 0  # ... the measurement is not
    # a criterion that names a non-bit-exact scale contradicts the theory part: FAIL
    assert C.claim_c3(good, dict(claims_cfg["C3"], scale=300))["verdict"] == "FAIL"


def test_c4_flips_when_the_threshold_moves(cfgs):
    _, claims_cfg = cfgs
    thr = threshold_summary(make_threshold(shift=1.0), n_resamples=200)
    r = C.claim_c4(thr, None, claims_cfg["C4"])
    assert r["verdict"] == "FAIL"
    assert r["numbers"]["max_abs_diff"] == pytest.approx(1.0, abs=0.1)


def test_c4_judges_precision_loss(cfgs, agreeing):
    """The MSE knee must sit within the onset span of Δc; no knee although Δc is on the grid fails when the
    peak MSE ratio is above the reference's seed-to-seed spread, and is INCONCLUSIVE within it."""
    stats_cfg, claims_cfg = cfgs
    thr = threshold_summary(agreeing["threshold"], n_resamples=200)
    # forward S=256 on the floor: its peak ratio ~1 is within the seeds' spread (lost mass below the noise)
    quiet = make_collapse(svs_values=(0.0,))
    r = C.claim_c4(thr, knee_summary(_paired(quiet, stats_cfg)), claims_cfg["C4"], grid_max=16,
                   collapse=collapse_summary(quiet))
    lost = _scoped(r, "precision loss (MSE knee), forward S=256")
    assert lost[0]["verdict"] == "INCONCLUSIVE" and "below the measurement's noise" in lost[0]["domain"]
    assert _scoped(r, "precision loss (MSE knee), forward S=1")[0]["verdict"] == "PASS"
    assert r["verdict"] == "PASS" and r["numbers"]["knees_inconclusive"] == 1
    # forward S=256 at 1.9x the floor from Δ = 12 with tight seeds: a loss the data resolves, but no knee at 2x
    loud = make_collapse(svs_values=(0.0,), floor_gap=1.9, floor_gap_from=12.0, seed_spread=0.01)
    r = C.claim_c4(thr, knee_summary(_paired(loud, stats_cfg)), claims_cfg["C4"], grid_max=16,
                   collapse=collapse_summary(loud))
    lost = _scoped(r, "precision loss (MSE knee), forward S=256")
    assert lost[0]["verdict"] == "FAIL" and "no knee on the grid although Δc lies on it" in lost[0]["domain"]
    assert r["verdict"] == "PARTIAL"
    assert [x["verdict"] for x in r["readings"]] == ["PASS", "FAIL"]
    assert "PASS under 1 of 2 readings: precision loss = half the non-sink P underflows" in r["headline"]


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
    cells = [s for s in r["scoped"] if not s["scope"].startswith("reading")]
    assert len(cells) == 3 and all(f"→ {regime};" in s["domain"] for s in cells)


def test_c5_one_cell_in_band_of_nine_is_not_a_pass(cfgs):
    """Three sink-value norms x three fixes; only one cell reaches the band, the rest peak at 2x."""
    stats_cfg, claims_cfg = cfgs
    fixes = claims_cfg["C5"]["fixes"]
    peaks = {(v, f): 2.0 for v in (0.0, 0.25, 1.0) for f in fixes}
    peaks[(0.25, "reverse S=1")] = 6.0
    df = make_collapse(ratio_peak=6.0, cell_peaks=peaks, svs_values=(0.0, 0.25, 1.0))
    r = C.claim_c5(_paired(df, stats_cfg), claims_cfg["C5"])
    assert r["verdict"] != "PASS" and r["verdict"] == "FAIL"
    assert r["numbers"]["cells"] == 9 and r["numbers"]["in_band"] == 1
    assert C.combine(["PASS"] + ["FAIL"] * 8) == "FAIL"


def test_c5_reads_moderate_from_the_baseline_fraction(cfgs):
    stats_cfg, claims_cfg = cfgs
    df = make_collapse(ratio_peak=6.0, svs_values=(0.0,))
    frac = collapse_summary(df).query("combo == 'forward S=1'").groupby("delta")["pred_exact"].mean()
    r = C.claim_c5(_paired(df, stats_cfg), claims_cfg["C5"], frac)
    readings = r["readings"]
    assert len(readings) == len(claims_cfg["C5"]["moderate"])
    lo, hi = claims_cfg["C5"]["moderate"][0]
    inside = frac[(frac >= lo) & (frac <= hi)].index
    assert f"Δ∈[{inside.min():g}, {inside.max():g}]" in readings[0]["reading"]


def test_c5_mixed_regimes_are_partial(cfgs):
    stats_cfg, claims_cfg = cfgs
    mixed = pd.concat([make_collapse(ratio_peak=6.0, svs_values=(0.25,)),
                       make_collapse(ratio_peak=20.0, svs_values=(0.0,))])
    r = C.claim_c5(_paired(mixed, stats_cfg), claims_cfg["C5"])
    assert r["verdict"] == "PARTIAL"


def test_c6_fails_when_forward_256_is_twice_reverse_256(cfgs):
    """Forward S=256 at 2x reverse S=256 from Δ = 2: equivalent only where the sink changes nothing (trivial)."""
    stats_cfg, claims_cfg = cfgs
    paired = _paired(make_collapse(floor_gap=2.0, floor_gap_from=2.0, svs_values=(0.0, 1.0)), stats_cfg)
    r = C.claim_c6(paired, claims_cfg["C6"])
    assert r["verdict"] == "FAIL"
    fs = _scoped(r, "forward S=256 vs reverse S=256")
    assert len(fs) == 2 and all(s["verdict"] == "FAIL" for s in fs)
    assert all("at 0 of" in s["domain"] for s in fs)  # the equivalent Δ 0, 1 are trivial, not support
    assert all(s["verdict"] == "PASS" for s in _scoped(r, "reverse S=1 vs reverse S=256"))


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


def test_paper_numbers_are_computed(cfgs, agreeing):
    """Each of the abstract's numbers next to the artifact's; a paper number moved out of its printed
    precision disagrees (only the paper's numbers are in the config)."""
    stats_cfg, claims_cfg = cfgs
    thr = threshold_summary(agreeing["threshold"], n_resamples=200)
    paired = _paired(agreeing["collapse"], stats_cfg)
    c5 = C.claim_c5(paired, claims_cfg["C5"])
    r = C.claim_paper(claims_cfg["paper"], thr, c5)
    assert r["verdict"] == "PASS" and len(r["table"]) == 5
    assert r["table"][0]["artifact (theory)"] == "6.9315"  # 10 ln 2, from the format
    assert r["table"][1]["artifact (theory)"] == "1.0294"  # E[max of 4 N(0,1)]
    moved = C.claim_paper(dict(claims_cfg["paper"], threshold_constant=6.95), thr, c5)
    assert moved["verdict"] == "FAIL" and moved["scoped"][0]["verdict"] == "FAIL"
    assert printed_precision(6.93) == pytest.approx(0.005) and printed_precision(1.0) == pytest.approx(0.5)


def test_conformance_flips_on_unexplained_difference():
    assert C.conformance_check(make_conformance())["verdict"] == "PASS"
    assert C.conformance_check(make_conformance(unexplained=1))["verdict"] == "FAIL"
    assert C.conformance_check(pd.DataFrame())["verdict"] == "INCONCLUSIVE"


@pytest.mark.parametrize("diff", ["ulp", "count"])
def test_conformance_fails_when_one_engine_row_differs(diff):
    """One engine row of 21 off by one float32 ulp of its output, or by one diagnostic count, FAILs the check,
    though the row itself says explained: engine rows must be identical bit for bit, and every row counts."""
    v = C.conformance_check(make_conformance(engine_diff=diff))
    assert v["verdict"] == "FAIL"
    scoped = {s["scope"]: s for s in v["scoped"]}
    assert scoped["engine vs single calls"]["verdict"] == "FAIL"
    assert scoped["engine vs single calls"]["domain"].startswith("20/21 rows pass")
    assert scoped["kernel grid"]["verdict"] == "PASS"
    assert v["numbers"]["rows"] == 16 + 21 and v["numbers"]["passing"] == 16 + 20


def test_conformance_states_its_coverage_in_numbers():
    """The verdict says what it covers: engine rows and N, the Δ list placed against Δc, the norms, the options."""
    v = C.conformance_check(make_conformance())
    assert v["verdict"] == "PASS" and v["numbers"]["engine_rows"] == 21 and v["numbers"]["engine_n"] == 1024
    text = "\n".join(v["details"])
    assert "21 engine rows (4 calls" in text and "N = 1024" in text
    assert "sink value norms 0, 1" in text and "scale 1, 256, 448" in text and "sink_mode final, init" in text
    # Δc of E4M3 at ksink 4 is 5.90 (S = 1) and 11.45 (S = 256): 8 lies between them
    assert "S = 1: 5.90; S = 256: 11.45" in text and "8 (above / below)" in text and "12 (above / above)" in text


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
    t3 = T.table_thresholds(thr, knees, 0.95)
    assert len(t3) == 4 and t3["within"].eq("yes").all()
    t4 = T.table_conformance(agreeing["conformance"])
    grid, engine = t4[t4["check"] == "kernel"], t4[t4["check"] == "engine"]
    assert len(grid) == 8 and grid["pass"].eq("2/2").all()
    assert sorted(engine["case"]) == ["policies: 1 calls", "sweeps: 3 calls"]  # one line per group of calls
    assert engine["rows"].astype(int).sum() == 3 * 3 * 2 + 3 and engine["max |Δout|"].eq("0").all()


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
    t3 = T.thresholds(thr, knee_summary(paired), 0.9)
    assert "tolerance (widened CI)" in t3.display.columns and "level 0.9" in t3.caption
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
        if c.id in ("conformance", "cases", "deployed"):  # no criterion to configure (cases: each report's printed
            # precision; deployed: the probes' tolerance)
            assert c.criterion_keys == () and c.id not in claims_cfg
            continue
        assert set(c.criterion_keys) == set(claims_cfg[c.id]) == set(props[c.id]["properties"]), c.id
    assert [c.id for c in registry.CLAIMS if c.id not in ("conformance", "cases", "deployed")] == sorted(claims_cfg)


def test_each_statistics_builder_needs_only_the_keys_its_job_is_given(agreeing, cfgs):
    """A statistics job's params are registry.statistics_reads(job, statistics): each builder runs on that part
    alone (a key it reads but is not given raises KeyError) and gives what the whole section gives."""
    from pcast.analysis import registry

    stats_cfg, _ = cfgs
    for job, table in (("collapse", "collapse"), ("paired", "collapse"), ("scales", "scales"),
                       ("threshold", "threshold")):
        part = registry.statistics_reads(job, stats_cfg)
        assert set(part) < set(stats_cfg), job
        whole, alone = getattr(stats, job)(agreeing[table], stats_cfg), getattr(stats, job)(agreeing[table], part)
        for w, a in zip(whole if isinstance(whole, tuple) else (whole,), alone if isinstance(alone, tuple) else (alone,)):
            pd.testing.assert_frame_equal(w, a)
    with pytest.raises(KeyError, match="tost_margin"):
        stats.paired(agreeing["collapse"], {k: v for k, v in stats_cfg.items() if k != "tost_margin"})
    assert "tost_margin" not in {k for j, keys in registry.STATISTICS_READS.items() if j != "paired"
                                 and not j.startswith("table_") for k in keys}
