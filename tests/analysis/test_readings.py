"""Settings and readings: the rule across readings, each claim's readings, robustness table and domain,
exact count fractions, and texts filled from the run's numbers. Fast: synthetic summary tables built
directly (no bootstrap), except where the tidy table itself is the point (C6's domain, C2's bound)."""

import itertools
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from pcast import theory
from pcast.analysis import registry, verdicts as C
from pcast.analysis.paired import paired_tests
from pcast.analysis.summaries import collapse_summary, write_csv
from pcast.analysis.verdicts.common import Subcase, across_readings, headline
from pcast.analysis.verdicts.templates import fill, slots, verdict_cell
from pcast.analysis.verdicts.floor import tost_pvalues
from pcast.analysis.verdicts.underflow import distinct_points
from synthetic_tables import BLOCK, K, N, _frame, _row, config_sections, make_collapse

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import claims_table  # noqa: E402

FIXES = ("forward S=256", "reverse S=1", "reverse S=256")
GRID = tuple(float(d) for d in range(0, 17, 2))
COARSE = (0.0, 2.0, 6.0, 10.0, 12.0, 16.0)  # both sides of forward S=256's Δc (11.45)


@pytest.fixture(scope="module")
def cfgs():
    return config_sections()


def _c5_paired(peaks: dict, grid=GRID) -> pd.DataFrame:
    """A paired table of forward S=1 against each fix: per (sink_v_scale, fix) the ratio rises to ``peak`` at
    Δ = 8 (a bump), CI ±10 % (no bootstrap: the verdict reads only these columns)."""
    rows = []
    for (svs, fix), peak in peaks.items():
        for d in grid:
            r = 1 + (peak - 1) * math.exp(-0.5 * ((d - 8) / 1.5) ** 2)
            rows.append({"sink_v_scale": svs, "delta": d, "a": "forward S=1", "b": fix, "median_ratio": r,
                         "ci_low": r / 1.1, "ci_high": r * 1.1})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- the rule across readings


@pytest.mark.parametrize("readings, expected", [
    (["PASS", "FAIL", "FAIL"], "PARTIAL"),  # one reading holds: PARTIAL
    (["FAIL", "FAIL"], "FAIL"),  # none holds
    (["PASS", "PASS"], "PASS"),  # all hold
    (["PARTIAL", "FAIL"], "PARTIAL"),  # holds in part under one reading
    (["INCONCLUSIVE", "FAIL"], "FAIL"),
    (["INCONCLUSIVE", "PASS"], "PARTIAL"),  # a reading not tested is shown, and keeps the claim from PASS
    (["INCONCLUSIVE", "PASS", "FAIL"], "PARTIAL"),
    (["INCONCLUSIVE"], "INCONCLUSIVE"),
])
def test_across_readings(readings, expected):
    assert across_readings(readings) == expected
    assert C.combine(["PASS", "FAIL"]) == "FAIL"  # settings stay strict


def test_adding_a_failing_reading_never_turns_partial_into_fail():
    """Exhaustively over every list of up to four readings: one more FAIL keeps PARTIAL PARTIAL (and turns PASS
    into PARTIAL, never into FAIL)."""
    seen = 0
    for n in range(1, 5):
        for rs in itertools.product(("PASS", "PARTIAL", "FAIL", "INCONCLUSIVE"), repeat=n):
            before, after = across_readings(rs), across_readings(rs + ("FAIL",))
            if before in ("PARTIAL", "PASS"):
                assert after == "PARTIAL", (rs, before, after)
                seen += 1
    assert seen > 100


def test_pass_needs_every_reading_tested_and_holding():
    for n in range(1, 5):
        for rs in itertools.product(("PASS", "PARTIAL", "FAIL", "INCONCLUSIVE"), repeat=n):
            assert (across_readings(rs) == "PASS") == all(r == "PASS" for r in rs), rs


def test_the_headline_names_the_readings_that_hold():
    rs = [Subcase("v=0", "FAIL"), Subcase("v=0.25", "PASS"), Subcase("v=1", "FAIL")]
    assert across_readings(rs) == "PARTIAL"
    h = headline(rs)
    assert "PASS under 1 of 3 readings: v=0.25" in h and "FAIL under 2 of 3 readings: v=0; v=1" in h


# ----------------------------------------------------------------------------- C5: readings of a claim


def test_c5_partial_names_the_reading_that_holds(cfgs):
    """Zero-value sinks far above the band, small ones in it: PARTIAL, and the headline names the reading."""
    _, claims_cfg = cfgs
    peaks = {**{(0.0, f): 500.0 for f in FIXES}, **{(0.25, f): 6.0 for f in FIXES}}
    r = C.claim_c5(_c5_paired(peaks), claims_cfg["C5"])
    assert r["verdict"] == "PARTIAL"
    assert [(x["reading"], x["verdict"]) for x in r["readings"]] == [
        ("the whole Δ grid, sink_v_scale=0", "FAIL"), ("the whole Δ grid, sink_v_scale=0.25", "PASS")]
    assert "PASS under 1 of 2 readings: the whole Δ grid, sink_v_scale=0.25" in r["headline"]
    # a third norm that fails too keeps the claim PARTIAL: a grid value is never a hidden requirement
    more = C.claim_c5(_c5_paired({**peaks, **{(1.0, f): 1.5 for f in FIXES}}), claims_cfg["C5"])
    assert more["verdict"] == "PARTIAL" and [x["verdict"] for x in more["readings"]] == ["FAIL", "PASS", "FAIL"]
    # every reading in band: PASS; none: FAIL
    assert C.claim_c5(_c5_paired({(v, f): 6.0 for v in (0.0, 1.0) for f in FIXES}), claims_cfg["C5"])["verdict"] == "PASS"
    assert C.claim_c5(_c5_paired({(v, f): 1.5 for v in (0.0, 1.0) for f in FIXES}), claims_cfg["C5"])["verdict"] == "FAIL"


def test_c5_settings_within_a_reading_stay_strict(cfgs):
    """One fix below the band fails its reading, though the other two are in it."""
    _, claims_cfg = cfgs
    peaks = {(0.0, "forward S=256"): 1.5, (0.0, "reverse S=1"): 6.0, (0.0, "reverse S=256"): 6.0}
    r = C.claim_c5(_c5_paired(peaks), claims_cfg["C5"])
    assert r["verdict"] == "FAIL" and r["readings"][0]["domain"].startswith("2 of 3 fixes in band")


def test_c5_robustness_recomputes_each_choice(cfgs):
    """Peak rule against 'passes through': a ratio rising through 3–10× to 100× fails at its peak and passes
    through the band; far_above and the norm grid are recomputed from the same table."""
    _, claims_cfg = cfgs
    cfg = dict(claims_cfg["C5"], alternatives={"far_above": [15, 1000]})
    r = C.claim_c5(_c5_paired({(0.0, f): 100.0 for f in FIXES} | {(1.0, f): 20.0 for f in FIXES}), cfg)
    rows = {c["choice"]: c for c in r["robustness"]}
    assert r["verdict"] == "PARTIAL"  # 20x: above the band but not far above (PARTIAL); 100x: far above (FAIL)
    rule = rows["how a fix meets the band"]
    assert rule["value"] == "peak" and rule["verdicts"] == {"passes through (any Δ of the window)": "PASS"}
    assert rows["'far above' the band"]["verdicts"] == {"15": "FAIL", "1000": "PARTIAL"}
    assert rows["'far above' the band"]["key"] == "claims.C5.far_above"
    assert rows["the sinks' value norms tested (experiments.collapse.sink_v_scale)"]["verdicts"] == {
        "only 0": "FAIL", "only 1": "PARTIAL"}
    for c in r["robustness"]:
        assert set(c) == {"choice", "value", "source", "verdicts", "key", "default"} and c["source"]


def test_the_papers_band_row_is_c5s_result(cfgs):
    _, claims_cfg = cfgs
    thr = pd.DataFrame(columns=["ksink", "scale", "dc_meas", "dc_lo", "dc_hi"])
    for peaks, verdict in (({(0.0, f): 500.0 for f in FIXES} | {(0.25, f): 6.0 for f in FIXES}, "PARTIAL"),
                           ({(0.0, f): 6.0 for f in FIXES}, "PASS"), ({(0.0, f): 1.5 for f in FIXES}, "FAIL")):
        c5 = C.claim_c5(_c5_paired(peaks), claims_cfg["C5"])
        paper = C.claim_paper(claims_cfg["paper"], thr, c5)
        band = [s for s in paper["scoped"] if s["scope"].startswith("3–10×")]
        assert c5["verdict"] == verdict and band[0]["verdict"] == verdict
        assert f"C5's verdict: {verdict}" in paper["table"][2]["agrees"]


# ----------------------------------------------------------------------------- C1, C2: counts


def test_c1_family_counts_distinct_points(cfgs):
    """Underflow does not depend on the sinks' value norm: three norms are one point each, and z follows."""
    _, claims_cfg = cfgs
    s = collapse_summary(make_collapse(svs_values=(0.0, 0.25, 1.0), seeds=2, deltas=GRID))
    d = s[s["combo"].isin(claims_cfg["C1"]["combos"])]
    assert len(distinct_points(d)) * 3 == len(d)
    r = C.claim_c1(s, claims_cfg["C1"])
    assert r["numbers"]["points"] == len(d) // 3 == 2 * len(GRID)
    assert r["numbers"]["z"] == pytest.approx(C.family_z(0.95, len(d) // 3))
    assert [x["reading"] for x in r["readings"]] == ["the claim as stated"]


def test_c2_at_the_bound_exactly_is_pass(cfgs, tmp_path):
    """Reverse S=1's fraction equals the sink block's share (block_n − k)/(n − k) exactly at every Δ but the first
    (where it is 0). Written to CSV at 10 digits and read back, the float reads above the bound; the verdict
    compares the integer counts and passes."""
    _, claims_cfg = cfgs
    share = (BLOCK - K) / (N - K)
    rows = []
    for order, scale in (("forward", 1), ("forward", 256), ("reverse", 1), ("reverse", 256)):
        for d in GRID:
            frac = {("reverse", 1): share if d > 0 else 0.0, ("reverse", 256): 0.0}.get(
                (order, scale), float(theory.underflow_fraction(d, scale, k=K, order=order, n=N, block_n=BLOCK)))
            rows += [_row("collapse", s, d, 0.0, order, scale, 1e-6, frac) for s in range(4)]
    summary = collapse_summary(_frame(rows))
    write_csv(summary, tmp_path / "collapse.csv")
    back = pd.read_csv(tmp_path / "collapse.csv")
    rev = back[(back["combo"] == "reverse S=1") & (back["delta"] > 0)]
    assert (rev["underflow"] * (N - K) == rev["terms"] * (BLOCK - K)).all()  # exactly the share, in counts
    assert (rev["underflow_frac_mean"] > share).all()  # the printed float reads above it
    r = C.claim_c2(back, claims_cfg["C2"])
    removes = [s for s in r["scoped"]
               if s["scope"] == "reverse S=1: reverse order removes the collapse among the keys outside the sink block"]
    assert removes[0]["verdict"] == "PASS" and f"at {len(GRID)} of {len(GRID)} Δ" in removes[0]["domain"]
    readings = {x["reading"]: x["verdict"] for x in r["readings"]}
    assert readings == {"the guarantee covers the keys outside the sink block": "PASS",
                        "the guarantee covers all non-sink keys": "FAIL"}  # the sink block's keys underflow
    assert r["verdict"] == "PARTIAL"


# ----------------------------------------------------------------------------- C6: the domain from the theory


C6_PAIRS = [("forward S=256", "reverse S=256"), ("reverse S=1", "reverse S=256"), ("forward S=1", "reverse S=256")]


def _c6_paired(tidy, stats_cfg):
    """The T1 rows C6 reads (its pairs and the trivial pair), with a small bootstrap."""
    return paired_tests(tidy, C6_PAIRS, margin=float(stats_cfg["tost_margin"]), alpha=float(stats_cfg["alpha"]),
                        n_resamples=100, seed=1)


def test_c6_unchanged_by_data_beyond_forward_256s_critical_delta(cfgs):
    """Forward S=256's MSE changed only at Δ ≥ Δc(256) (11.45, pcast.theory): C6's verdict and readings are
    unchanged, and beyond_domain shows the change."""
    stats_cfg, claims_cfg = cfgs
    dc = theory.critical_delta(256.0, k=K)
    tidy = make_collapse(svs_values=(0.0, 1.0), seeds=4, deltas=COARSE, floor_gap=1.5, floor_gap_from=6.0)
    moved = tidy.copy()
    beyond = (moved["combo"] == "forward S=256") & (moved["delta"] >= dc)
    moved.loc[beyond, "mse"] /= 1.5  # back on the floor: equivalent there
    assert beyond.any()
    a = C.claim_c6(_c6_paired(tidy, stats_cfg), claims_cfg["C6"])
    b = C.claim_c6(_c6_paired(moved, stats_cfg), claims_cfg["C6"])
    assert a["numbers"]["domain_limit"] == pytest.approx(dc)
    assert a["verdict"] == b["verdict"] and a["readings"] == b["readings"] and a["scoped"] == b["scoped"]
    assert a["beyond_domain"] != b["beyond_domain"]
    assert all(s["scope"].startswith("beyond the domain (Δ ≥ 11.45)") for s in a["beyond_domain"])


def test_c6_tost_recomputed_at_the_chosen_margin_is_the_statistics_steps(cfgs):
    """The robustness table's TOST recomputation from the tidy table gives the statistics step's own p-values
    at the chosen margin, and the verdict at each alternative margin is the claim judged on that margin's run."""
    stats_cfg, claims_cfg = cfgs
    tidy = make_collapse(svs_values=(0.0,), seeds=4, deltas=COARSE, floor_gap=1.15, floor_gap_from=4.0)
    paired = _c6_paired(tidy, stats_cfg)
    redo = tost_pvalues(tidy, C6_PAIRS, float(stats_cfg["tost_margin"]), float(claims_cfg["C6"]["alpha"]))
    keys = ["a", "b", "delta", "sink_v_scale"]
    merged = paired.merge(redo, on=keys, suffixes=("", "_redo"))
    assert len(merged) == len(paired)
    np.testing.assert_allclose(merged["p_tost_redo"], merged["p_tost"], rtol=1e-12)
    cfg = dict(claims_cfg["C6"], alternatives={"tost_margin": [0.3]})
    r = C.claim_c6(paired, cfg, tidy=tidy, stats_cfg=dict(stats_cfg, pairs=C6_PAIRS))
    wide = C.claim_c6(_c6_paired(tidy, dict(stats_cfg, tost_margin=0.3)), claims_cfg["C6"], tidy=tidy,
                      stats_cfg=dict(stats_cfg, pairs=C6_PAIRS))
    row = [c for c in r["robustness"] if c["choice"].startswith("the TOST equivalence margin")][0]
    assert row["value"] == "0.1" and row["verdicts"] == {"0.3": wide["verdict"]}
    assert r["verdict"] != wide["verdict"]  # forward S=256 at 1.15x: outside ±10 %, inside ±30 %


# ----------------------------------------------------------------------------- no typed numbers


def _default_why(claim: str) -> str:
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    return cfg["presets"]["default"]["expected_verdicts"][claim]["why"]


def test_why_text_and_readme_cell_follow_a_config_value(cfgs, tmp_path):
    """The default preset's C5 'why' and the README's C5 verdict cell are filled from the run: narrowing the band
    in the config changes the numbers in both, and the README's cell is rewritten from claims.json."""
    _, claims_cfg = cfgs
    peaks = {**{(0.0, f): 500.0 for f in FIXES}, **{(1.0, f): 6.0 for f in FIXES}}
    paired = _c5_paired(peaks)
    template = _default_why("C5")
    assert slots(template) and all(c in {x.id for x in registry.CLAIMS} for c, _ in slots(template))
    texts, cells = [], []
    for band in ([3, 10], [7, 10]):
        claims = {"C5": C.claim_c5(paired, dict(claims_cfg["C5"], band=band))}
        texts.append(fill(template, claims))
        cells.append(verdict_cell("C5", claims, template))
        assert f"{claims['C5']['numbers']['in_band']} of {claims['C5']['numbers']['cells']} cells" in texts[-1]
    assert texts[0] != texts[1] and cells[0] != cells[1]
    assert cells[0].startswith("PARTIAL: 3 of 6 cells") and cells[1].startswith("FAIL: 0 of 6 cells")
    readme = tmp_path / "README.md"
    shutil.copy(ROOT / "README.md", readme)
    summary = {"claims": {"C5": {"cell": cells[1], "job_s": 61.0}}, "all_job_s": 3600.0}
    assert claims_table.write_readme(readme, summary) >= 1
    rows = readme.read_text(encoding="utf-8").splitlines()
    row = [r for r in rows if r.startswith("| C5 ")][0]
    assert row.endswith(f"| 1 min 01 s | {cells[1]} |")
    assert [r for r in rows if r.startswith("| all")][0].split("|")[4].strip() == "60 min 00 s"
    assert claims_table.write_readme(readme, summary) == 0  # idempotent


def test_a_slot_the_run_lacks_renders_as_a_stated_gap():
    """A grid override can drop a number a template names: the text says so, it never raises (the verdicts
    are written whatever the template asks)."""
    from pcast.analysis.verdicts.templates import gaps

    claims = {"C5": {"verdict": "PASS", "numbers": {"cells": 3, "peak": 4.25}}}
    assert fill("{C5.cells} cells, {C5.verdict}", claims) == "3 cells, PASS"
    assert fill("{C5.in_band} of {C5.cells}", claims) == "[not in this run: {C5.in_band}] of 3"
    assert fill("{C9.cells}", claims) == "[not in this run: {C9.cells}]"
    assert fill("{C5.peak_min[sink_v_scale=1]:.3g}x", claims) == "[not in this run: {C5.peak_min[sink_v_scale=1]:.3g}]x"
    assert fill("{C5.verdict:.3g}", claims) == "PASS"  # a spec the value cannot take: its plain text
    assert gaps("{C5.in_band} {C5.cells} {C9.x}", claims) == [
        "{C5.in_band}: C5 has no number 'in_band' in this run", "{C9.x}: no claim 'C9' in this run"]
    assert gaps("{C5.peak:.2g}", claims) == []


def test_every_expected_why_slot_names_a_claim():
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    ids = {c.id for c in registry.CLAIMS}
    for name, preset in cfg["presets"].items():
        for claim, e in (preset.get("expected_verdicts") or {}).items():
            for c, _ in slots(e["why"]):
                assert c in ids, (name, claim, c)


def test_sink_value_norms_of_a_real_models_heads():
    """Per clean-sink head: mean ‖v‖ of its sink keys over the other keys' (exact on constructed vectors), the
    source printed beside C5's norm grid; heads without a clean sink are left out."""
    from pcast.analysis.verdicts.mse import norm_source, sink_value_norms

    rng = np.random.default_rng(0)
    v = rng.standard_normal((2, 3, 16, 8))
    v /= np.linalg.norm(v, axis=-1, keepdims=True)  # every key's value norm 1 ...
    v[:, 0, 0] *= 0.25  # ... but head 0's sink key 0 at 0.25,
    v[:, 2, [1, 5]] *= 0.5  # and head 2's sinks 1 and 5 at 0.5
    heads = pd.DataFrame({"layer": [0, 0, 0], "head": [0, 1, 2], "sinks": ["0", np.nan, "1;5"],
                          "sink_type": ["clean", "none", "clean"]})
    n = sink_value_norms({"layer0/v": v}, heads)
    assert list(n["head"]) == [0, 2]
    np.testing.assert_allclose(n["sink_v_norm"], [0.25, 0.5], rtol=1e-12)
    assert "2 clean-sink heads: 0.25–0.5 (median 0.38)" in norm_source(n)
