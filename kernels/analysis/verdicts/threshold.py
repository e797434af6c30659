"""C4: the closed form Δc = 6.93 + ln S − δk against the measured crossing and the measured precision loss."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
from scipy import stats as sps

from pcast.analysis.summaries import knee_summary
from pcast.analysis.text import short
from pcast.analysis.tolerance import closed_form_offset, crossing_tolerances
from pcast.analysis.verdicts.common import (ARTIFACTS_CHOICE, Choice, Subcase, across_readings, choice, combine,
                                            family_z, result)
from pcast.analysis.verdicts.mse import norm_source

__all__ = ["claim_c4", "crossing_tolerances", "onset_span", "reference_noise"]


def onset_span(onset_fraction: float, sigma: float = 1.0) -> float:
    """The Δ span over which the leading-order fraction Φ((Δ − Δc)/σ) rises from ``onset_fraction`` to 1/2."""
    return float(-sps.norm.ppf(onset_fraction) * sigma)


def _crossings(t: pd.DataFrame, level: float) -> list[Subcase]:
    """One sub-case per (ksink, S): the predicted Δc inside the measured crossing's widened CI."""
    tol = crossing_tolerances(t, level)
    subs = []
    for (_, r), w in zip(t.iterrows(), tol):
        name = f"underflow crossing, ksink={int(r['ksink'])}, S={r['scale']:g}"
        if not np.isfinite(r["dc_meas"]):
            subs.append(Subcase(name, "INCONCLUSIVE", "not bracketed by the Δ grid"))
            continue
        ok = abs(r["dc_meas"] - r["dc_pred"]) <= w
        dom = (f"predicted {short(r['dc_pred'])}, measured {short(r['dc_meas'])} [{short(r['dc_lo'])}, "
               f"{short(r['dc_hi'])}], diff {short(r['diff'])}, tolerance ±{short(w, 3)}")
        subs.append(Subcase(name, "PASS" if ok else "FAIL", dom))
    return subs


def reference_noise(collapse: pd.DataFrame | None, reference: str) -> dict:
    """(sink_v_scale, Δ) -> the reference combination's seed-to-seed MSE spread, ``mse_hi / mse_lo`` (the
    central ``statistics.seed_interval`` over seeds): the smallest MSE ratio one run can tell from noise."""
    if collapse is None or collapse.empty or "mse_hi" not in collapse:
        return {}
    r = collapse[collapse["combo"] == reference]
    svs = r["sink_v_scale"] if "sink_v_scale" in r else pd.Series(0.0, index=r.index)
    return {(float(v), float(d)): float(hi / lo) if lo > 0 else math.inf
            for v, d, hi, lo in zip(svs, r["delta"], r["mse_hi"], r["mse_lo"])}


def _knees(knees: pd.DataFrame, onset: float, grid_max: float, noise: Mapping,
           no_knee_below_noise: str = "INCONCLUSIVE") -> list[Subcase]:
    """One sub-case per MSE knee: the precision loss inside the collapse's onset span around Δc. No knee
    although Δc lies on the grid: FAIL, unless the peak MSE ratio is below the reference's seed-to-seed
    spread (``noise``): then the lost P mass is below what the measurement resolves (``no_knee_below_noise``)."""
    subs = []
    for _, k in knees.sort_values([c for c in ("scale", "sink_v_scale") if c in knees]).iterrows():
        w = onset_span(onset, float(k.get("sigma", 1.0)))
        svs = f", sink_v_scale={k['sink_v_scale']:g}" if "sink_v_scale" in k else ""
        name = f"precision loss (MSE knee), {k['combo']}{svs}"
        words = (f"MSE ≥ {k['factor']:g}× {k['reference']} from Δ={short(k['knee'], 3)}, predicted Δc "
                 f"{short(k['dc_pred'], 3)}, knee − Δc = {short(k['knee_minus_dc'], 3)} (span ±{short(w, 3)}); "
                 f"peak ratio {short(k['peak_ratio'], 3)} at Δ={short(k['peak_delta'], 3)}")
        if np.isfinite(k["knee"]):
            v = "PASS" if abs(k["knee_minus_dc"]) <= w else "FAIL"
        elif k["dc_pred"] + w > grid_max:
            v = "INCONCLUSIVE"
            words += "; no knee on the grid, and Δc is not on it"
        else:
            spread = noise.get((float(k.get("sink_v_scale", 0.0)), float(k["peak_delta"])), math.nan)
            if np.isfinite(spread) and k["peak_ratio"] <= spread:
                v = no_knee_below_noise
                words += (f"; no knee on the grid although Δc lies on it, and the peak ratio is within the "
                          f"reference's seed-to-seed MSE spread ({short(spread, 3)}×): the lost P mass is below "
                          "the measurement's noise")
            else:
                v = "FAIL"
                words += "; no knee on the grid although Δc lies on it" + (
                    f" (peak ratio above the seed-to-seed spread {short(spread, 3)}×)" if np.isfinite(spread) else "")
        subs.append(Subcase(name, v, words, {"sink_v_scale": float(k["sink_v_scale"])} if "sink_v_scale" in k else {}))
    return subs


def _c4_readings(crossings: list[Subcase], knee_subs: list[Subcase]) -> list[Subcase]:
    """The readings of "precision loss": half the non-sink P lost (the crossing), and the MSE knee per sink-value
    norm (the norm is open in the paper); each the strict rule over its settings."""
    out = []
    if crossings:
        out.append(Subcase("precision loss = half the non-sink P underflows (the crossing)", combine(crossings),
                           f"{sum(c.verdict == 'PASS' for c in crossings)} of {len(crossings)} (ksink, S) within "
                           "tolerance"))
    norms = sorted({s.params["sink_v_scale"] for s in knee_subs if "sink_v_scale" in s.params})
    groups = [(f", sink_v_scale={v:g}", [s for s in knee_subs if s.params.get("sink_v_scale") == v]) for v in norms]
    if knee_subs and not norms:
        groups = [("", knee_subs)]
    for tag, these in groups:
        out.append(Subcase(f"precision loss = the MSE knee{tag}", combine(these),
                           f"{sum(c.verdict == 'PASS' for c in these)} of {len(these)} forward combinations' knees "
                           f"within the onset span; {sum(c.verdict == 'INCONCLUSIVE' for c in these)} INCONCLUSIVE"))
    return out


def _c4_tolerances(thresholds: pd.DataFrame, level: float, onset: float, w: float) -> list[str]:
    """C4's tolerances and where each comes from."""
    ks = sorted(int(k) for k in thresholds["ksink"].unique()) if len(thresholds) else []
    return [f"crossing: the side of the measured Δc's bootstrap CI (level {level:g}) facing the prediction, × "
            f"z(family)/z = {short(family_z(level, max(len(thresholds), 1)) / family_z(level, 1), 3)} over "
            f"{len(thresholds)} (ksink, S), + the closed form's own offset at the crossing μ3(M_k)/6 (third central "
            f"moment of the sinks' max; the second-order term vanishes there): "
            + ", ".join(f"k={k}: {short(closed_form_offset(k), 3)}" for k in ks),
            f"precision loss: ±σ·|Φ⁻¹({onset:g})| = ±{short(w, 3)}σ, the Δ span over which the leading-order "
            f"fraction rises from {onset:g} (the collapse's onset) to 1/2 (Δc)",
            "no knee: INCONCLUSIVE when the peak MSE ratio is within the reference's seed-to-seed MSE spread "
            "(mse_hi / mse_lo over seeds at statistics.seed_interval), FAIL above it"]


def _c4_robustness(judge, knees: pd.DataFrame, onset: float, cfg: Mapping, paired: pd.DataFrame | None,
                   stats_cfg: Mapping | None, sink_norms: pd.DataFrame | None) -> list[Choice]:
    """C4's choices: the knee factor (knees recomputed from ``paired``), the onset fraction, the no-knee rule, the
    sinks' value norms tested; ``judge(knees, onset, rule)`` gives the readings."""
    alt = cfg.get("alternatives") or {}
    robust = []
    if paired is not None and stats_cfg is not None:
        robust.append(choice("the MSE knee's factor", "statistics.knee_factor", float(stats_cfg["knee_factor"]),
                             f"{ARTIFACTS_CHOICE}: the P cast's error at least the reference's whole error (a "
                             "factor 2); the paper names no factor",
                             lambda f: across_readings(judge(knee_summary(paired, reference=stats_cfg["reference"],
                                                                          factor=float(f)), onset)),
                             cfg, alt.get("knee_factor", [])))
    robust.append(choice("the collapse's onset fraction", "claims.C4.knee_onset_fraction", onset,
                         "the theory: the Δ span over which the fraction rises from the onset to 1/2 (the onset "
                         f"level itself is {ARTIFACTS_CHOICE})",
                         lambda o: across_readings(judge(knees, float(o))), cfg, alt.get("knee_onset_fraction", [])))
    robust.append(Choice("no knee, peak MSE ratio within the seed-to-seed spread", "INCONCLUSIVE",
                         "the data's noise: a loss one run cannot tell from the spread over seeds",
                         {"FAIL (no knee ⇒ FAIL)": across_readings(judge(knees, onset, "FAIL"))}))
    if "sink_v_scale" in knees.columns and knees["sink_v_scale"].nunique() > 1:
        norms = sorted(float(v) for v in knees["sink_v_scale"].unique())
        robust.append(Choice("the sinks' value norms tested (experiments.collapse.sink_v_scale)",
                             ", ".join(f"{v:g}" for v in norms), norm_source(sink_norms, norms),
                             {f"only {v:g}": across_readings(judge(knees[knees["sink_v_scale"] == v], onset))
                              for v in norms}, key="experiments.collapse.sink_v_scale"))
    return robust


def claim_c4(thresholds: pd.DataFrame, knees: pd.DataFrame | None, cfg: Mapping, *, level: float = 0.95,
             grid_max: float = math.inf, paired: pd.DataFrame | None = None, collapse: pd.DataFrame | None = None,
             stats_cfg: Mapping | None = None, sink_norms: pd.DataFrame | None = None) -> dict:
    """Δc against the measured underflow crossing (per ksink, S) and the measured precision loss.

    Crossing settings: ``|measured − predicted Δc|`` within the measured crossing's bootstrap CI
    (the side facing the prediction, widened over the rows). Precision-loss settings ("kernel-level
    precision loss", the sentence's words): the MSE knee (:func:`pcast.analysis.summaries.knee_summary`)
    within ±σ·``|Φ⁻¹(knee_onset_fraction)|`` of Δc, the span over which the theory's fraction rises from
    the onset to 1/2; no knee although Δc lies on the grid (``grid_max``) fails, unless the peak MSE
    ratio is within the reference's seed-to-seed spread (``collapse``'s seed interval): INCONCLUSIVE.
    Readings: what "precision loss" measures (the crossing; the knee per sink-value norm), combined by
    :func:`.common.across_readings`. ``paired`` and ``stats_cfg`` (reference, knee_factor) recompute the
    knees at the alternative knee factors of ``cfg['alternatives']``; ``sink_norms`` (a real model's measured
    sink-value norms) is the source of the norm grid's row.
    """
    onset = float(cfg["knee_onset_fraction"])
    w = onset_span(onset)
    crit = (f"|measured Δc − (6.93 + ln S − δk)| within the crossing's widened bootstrap CI for every (ksink, S); "
            f"the MSE knee within ±{short(w, 3)}σ of Δc for every forward combination, per sink_v_scale")
    tols = _c4_tolerances(thresholds, level, onset, w)
    kinds = ["settings: the crossing of every (ksink, S) measured; the knee of every forward combination (the "
             "closed form covers every S and ksink)",
             "readings: what \"precision loss\" measures (the paper does not say): half the non-sink P lost (the "
             "crossing) or the MSE rise (the knee); and, for the knee, the sinks' value norm, open in the paper"]
    if thresholds.empty:
        return result("C4", "INCONCLUSIVE", crit, {}, ["no threshold data"], tolerances=tols, readings=[],
                      kinds=kinds)
    crossings = _crossings(thresholds.sort_values(["scale", "ksink"]), level)
    reference = knees["reference"].iloc[0] if knees is not None and len(knees) else None
    noise = reference_noise(collapse, reference) if reference else {}

    def judge(kn, on: float, rule: str = "INCONCLUSIVE") -> list[Subcase]:
        ksubs = _knees(kn, on, grid_max, noise, rule) if kn is not None and len(kn) else []
        return _c4_readings(crossings, ksubs)

    knee_subs = _knees(knees, onset, grid_max, noise) if knees is not None and len(knees) else []
    readings = _c4_readings(crossings, knee_subs)
    subs = crossings + knee_subs
    details = [f"underflow crossings within tolerance: {sum(x.verdict == 'PASS' for x in crossings)} of "
               f"{len(thresholds)}; largest |measured − predicted| {short(thresholds['diff'].abs().max())}"]
    if knee_subs:
        within = sum(x.verdict == "PASS" for x in knee_subs)
        details.append(f"MSE knees within ±{short(w, 3)}σ of Δc: {within} of {len(knees)}; "
                       f"{sum(x.verdict == 'INCONCLUSIVE' for x in knee_subs)} INCONCLUSIVE (no knee, loss below noise)")
    nums = {"crossings_within": sum(s.verdict == "PASS" for s in crossings), "crossings": len(crossings),
            "knees_within": sum(s.verdict == "PASS" for s in knee_subs), "knees": len(knee_subs),
            "knees_inconclusive": sum(s.verdict == "INCONCLUSIVE" for s in knee_subs),
            "max_abs_diff": float(thresholds["diff"].abs().max()), "onset_span": w}
    robust = _c4_robustness(judge, knees, onset, cfg, paired, stats_cfg, sink_norms) if knee_subs else []
    return result("C4", across_readings(readings), crit, nums, details, scoped=subs, tolerances=tols,
                  readings=readings, robustness=robust, kinds=kinds)
