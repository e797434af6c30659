"""The audit of deployed P policies: per policy, where it collapses, saturates and loses to the V floor.

Computed in words from the policies summary (``results/stats/policies.csv``,
:func:`pcast.analysis.policies.policy_summary`), one line per policy and sink setting. Every
choice and threshold comes from ``claims.audit`` in config.yaml:

* ``variant``: the variant whose collapse and saturation are audited (``p_only``: P cast alone);
* ``floor_variant``: the variant whose P-cast error is read against its V-cast floor
  (``deployed``: FP8 Q, K, V; the floor is the same call with P unrounded);

* the theory predicts a collapse when ``|measured Δc − predicted Δc|`` lies within the measured
  crossing's bootstrap CI (the side facing the prediction, widened over every audited curve:
  :func:`pcast.analysis.tolerance.ci_tolerance`) plus the Δ grid's own interpolation error (how
  far the crossing of the theory's curve, linearly interpolated on the same grid, lies from the
  theory's Δc), or when neither crosses the crossing level on
  the Δ grid (or both already at its first Δ). With lazy rescaling (τ > 0) the law is an upper
  bound of the underflow (the max may be stale), so the measured collapse only has to come no
  earlier than the predicted one less that tolerance;
* ``saturation_threshold``: a policy saturates from the first Δ where its mean saturated fraction
  exceeds this ("never on this grid" otherwise);
* ``floor_factor``: the P-cast error exceeds the V-cast floor from the first Δ where the lower end
  of the paired-bootstrap CI of the median ratio rel_mse / floor_rel_mse exceeds this (2: what the
  P cast adds is more than the floor itself).

The verdict is about the theory: PASS when it predicts every policy's collapse, FAIL when it
predicts none, PARTIAL otherwise, INCONCLUSIVE without a law to test.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from pcast.analysis.policies import curves, first_delta, floor_rows, require
from pcast.analysis.summaries import crossing
from pcast.analysis.tables import p_path
from pcast.analysis.text import short
from pcast.analysis.verdicts.common import ci_tolerance, combine, result

__all__ = ["AUDIT", "AUDIT_KEYS", "claim_audit", "collapse_state"]

AUDIT = "audit"  # the id of the audit in the claims registry and of its section in config's claims:
AUDIT_KEYS = ("variant", "floor_variant", "saturation_threshold", "floor_factor")


def collapse_state(value: float, at_start: float, level: float) -> str:
    """``"at"`` (a crossing on the grid), ``"start"`` (above ``level`` from the first Δ) or ``"never"``."""
    if np.isfinite(value):
        return "at"
    return "start" if np.isfinite(at_start) and at_start >= level else "never"


def _collapse(first: pd.Series, level: float, confidence: float, m: int) -> tuple[str, str]:
    """(words, verdict cell) on where one curve collapses, measured and predicted."""
    meas = collapse_state(first["dc_meas"], first["underflow_at_start"], level)
    pred = collapse_state(first["dc_pred"], first["pred_at_start"], level)
    words = {"at": f"collapses at Δc = {short(first['dc_meas'])} [{short(first['dc_lo'])}, {short(first['dc_hi'])}]",
             "start": f"is collapsed from the grid's first Δ (underflow fraction {short(first['underflow_at_start'], 3)} "
                      f"≥ {level:g})",
             "never": f"does not collapse on this grid (underflow fraction below {level:g} up to the last Δ)"}[meas]
    model = str(first["pred_model"])
    if model == "none":
        return words + "; no law applies", "INCONCLUSIVE"
    theory = {"at": f"Δc = {short(first['dc_pred'])}", "start": "collapsed from the first Δ", "never": "never"}[pred]
    bound = "eager bound" in model
    if meas == pred == "at":
        diff = first["dc_meas"] - first["dc_pred"]
        tol = ci_tolerance(first["dc_meas"], first["dc_lo"], first["dc_hi"], first["dc_pred"], level=confidence, m=m) \
            + float(first["grid_error"])
        ok = diff >= -tol if bound else abs(diff) <= tol
        if bound:
            how = f"measured − bound = {diff:+.3f} {'≥' if ok else '<'} −{tol:.3f}"
        else:
            how = f"measured − theory = {diff:+.3f}, {'within' if ok else 'outside'} ±{tol:.3f}"
    else:  # the bound may only be reached later: from the start < on the grid < never
        rank = {"start": 0, "at": 1, "never": 2}
        ok = meas == pred or (bound and rank[meas] > rank[pred])
        how = "the same" if meas == pred else ("later than the bound" if ok else "not the same")
    return f"{words}; theory ({model}): {theory}, {how} → {'predicted' if ok else 'NOT predicted'}", \
        "PASS" if ok else "FAIL"


def _saturation(part: pd.DataFrame, threshold: float) -> tuple[str, float]:
    at = first_delta(part, part["saturated_frac_mean"] > threshold)
    peak = float(part["saturated_frac_mean"].max())
    if not np.isfinite(at):
        return f"never saturates on this grid (mean saturated fraction ≤ {threshold:g}; max {short(peak, 3)})", at
    r = part[part["delta"] == at].iloc[0]
    return (f"saturates from Δ = {short(at, 3)} (mean saturated fraction {short(r['saturated_frac_mean'], 3)} > "
            f"{threshold:g}; theory {short(r['pred_saturated'], 3)}; max {short(peak, 3)})"), at


def _floor(fpart: pd.DataFrame, factor: float, floor_variant: str) -> tuple[str, float, float]:
    if fpart.empty:
        return f"no {floor_variant} rows: the V-cast floor is not measured", math.nan, math.nan
    at = first_delta(fpart, fpart["floor_ratio_lo"] > factor)
    i = fpart["floor_ratio"].idxmax()
    peak, lo, hi, pd_ = (fpart.at[i, c] for c in ("floor_ratio", "floor_ratio_lo", "floor_ratio_hi", "delta"))
    by = f"peak {short(peak, 3)}× [{short(lo, 3)}, {short(hi, 3)}] at Δ = {short(pd_, 3)}"
    if not np.isfinite(at):
        return f"its P-cast error stays within {factor:g}× the V-cast floor ({floor_variant}) on this grid ({by})", at, peak
    return (f"its P-cast error exceeds the V-cast floor ({floor_variant}) from Δ = {short(at, 3)} "
            f"(CI of rel. MSE / floor above {factor:g}×), {by}"), at, peak


def _tag(key: dict) -> str:
    sink = "learned sink logit" if key["sink_kind"] == "logit" else f"sink keys, v={key['sink_v_scale']:g}"
    return f"{key['policy']} ({sink})"


def claim_audit(policies: pd.DataFrame | None, cfg: Mapping, *, confidence: float = 0.95) -> dict:
    """The audit's verdict and its words per policy (see the module docstring for the criterion)."""
    require(cfg, "claims.audit", AUDIT_KEYS)
    variant, floor_variant = str(cfg["variant"]), str(cfg["floor_variant"])
    sat, factor = (float(cfg[k]) for k in ("saturation_threshold", "floor_factor"))
    crit = (f"per policy and sink ({variant} variant): measured Δc against the theory of its options within the "
            f"crossing's widened bootstrap CI (or both never / both from the first Δ; τ > 0: no earlier than the "
            f"eager bound less it); saturation: "
            f"mean saturated fraction > {sat:g}; V-cast floor ({floor_variant}): CI of rel. MSE / floor above {factor:g}×")
    if policies is None or policies.empty:
        return result(AUDIT, "INCONCLUSIVE", crit, {}, ["no policies data"])
    if variant not in set(policies["variant"]):
        return result(AUDIT, "INCONCLUSIVE", crit, {}, [f"no rows of the {variant} variant"])
    cells, details, nums = [], [], {}
    tols = [f"Δc: the side of the measured crossing's bootstrap CI (level {confidence:g}) facing the theory, widened "
            "over the audited curves (Bonferroni), plus the grid's interpolation error of the theory's own curve",
            f"saturation: mean saturated fraction > {sat:g} "
            "(claims.audit.saturation_threshold)", f"V-cast floor: CI of the ratio wholly above {factor:g}×"]
    found = list(curves(policies, variant))
    m = sum(bool(np.isfinite(part.iloc[0]["dc_meas"])) for _, part in found)
    for key, part in found:
        first = part.iloc[0].copy()
        first["pred_at_start"] = part["pred_underflow"].iloc[0]
        on_grid = crossing(part["delta"].to_numpy(float), part["pred_underflow"].to_numpy(float),
                           float(first["crossing_level"]))
        first["grid_error"] = abs(on_grid - first["dc_pred"]) if np.isfinite(on_grid) else 0.0
        level = float(first["crossing_level"])
        words, cell = _collapse(first, level, confidence, m)
        sat_words, sat_at = _saturation(part, sat)
        floor_words, floor_at, floor_peak = _floor(floor_rows(policies, key, floor_variant), factor, floor_variant)
        tag = _tag(key)
        cells.append(cell)
        details.append(f"{tag}, {p_path(first)}: {words}; {sat_words}; {floor_words}.")
        nums.update({f"dc_meas[{tag}]": first["dc_meas"], f"dc_pred[{tag}]": first["dc_pred"],
                     f"saturates_from[{tag}]": sat_at, f"exceeds_floor_from[{tag}]": floor_at,
                     f"floor_ratio_peak[{tag}]": floor_peak})
    nums["predicted"] = cells.count("PASS")
    nums["not_predicted"] = cells.count("FAIL")
    return result(AUDIT, combine(cells), crit, nums, details, tolerances=tols)
