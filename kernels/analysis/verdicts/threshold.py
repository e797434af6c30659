"""C4: the closed form Δc = 6.93 + ln S − δk against the measured crossing (and the MSE knee)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from kernels.analysis.text import short
from kernels.analysis.verdicts.common import result

__all__ = ["claim_c4"]


def _knee_details(knees: pd.DataFrame, nums: dict) -> list[str]:
    """One line per MSE knee, reported next to Δc (not gated); adds its range to ``nums``."""
    details = []
    for _, k in knees.sort_values([c for c in ("scale", "sink_v_scale") if c in knees]).iterrows():
        svs = f", sink_v_scale={k['sink_v_scale']:g}" if "sink_v_scale" in k else ""
        details.append(f"MSE knee ({k['combo']}{svs}; MSE ≥ {k['factor']:g}× {k['reference']}): "
                       f"Δ={short(k['knee'], 3)} vs predicted Δc {short(k['dc_pred'], 3)} "
                       f"(knee − Δc = {short(k['knee_minus_dc'], 3)}; peak ratio {short(k['peak_ratio'], 3)} "
                       f"at Δ={short(k['peak_delta'], 3)})")
    nums["knee_minus_dc_min"] = knees["knee_minus_dc"].min()
    nums["knee_minus_dc_max"] = knees["knee_minus_dc"].max()
    return details


def claim_c4(thresholds: pd.DataFrame, knees: pd.DataFrame, cfg: Mapping) -> dict:
    """Measured Δc (underflow fraction crossing 1/2) against the closed form, per ksink and S.

    PASS: every configuration's crossing was measured and ``|measured − predicted|`` <= tolerance.
    PARTIAL: some within tolerance (others outside or not measurable on the grid). FAIL: none
    within. The MSE knee (:func:`kernels.analysis.summaries.knee_summary`) is reported next to
    Δc, not gated.
    """
    tol = float(cfg["max_abs_error"])
    crit = f"|measured Δc − (6.93 + ln S − δk)| ≤ {tol} for every (ksink, S) of the threshold experiment"
    t = thresholds
    if t.empty:
        return result("C4", "INCONCLUSIVE", crit, {}, ["no threshold data"])
    meas = t.dropna(subset=["dc_meas"])
    absd = (meas["dc_meas"] - meas["dc_pred"]).abs()
    n_ok = int((absd <= tol).sum())
    nums = {"configurations": int(len(t)), "measured": int(len(meas)), "within_tolerance": n_ok,
            "max_abs_diff": absd.max() if len(absd) else math.nan, "tolerance": tol}
    if len(meas):
        i = absd.idxmax()
        nums.update({"worst_ksink": meas.at[i, "ksink"], "worst_scale": meas.at[i, "scale"],
                     "max_abs_diff_exact_model": (meas["dc_meas"] - meas["dc_exact"]).abs().max()})
    details = []
    for _, r in t.sort_values(["scale", "ksink"]).iterrows():
        details.append(f"ksink={int(r['ksink'])}, S={r['scale']:g}: predicted {short(r['dc_pred'])}, measured "
                       f"{short(r['dc_meas'])} [{short(r['dc_lo'])}, {short(r['dc_hi'])}], diff {short(r['diff'])}"
                       + (" (not bracketed by the Δ grid)" if not np.isfinite(r["dc_meas"]) else ""))
    if knees is not None and len(knees):
        details += _knee_details(knees, nums)
    if not len(meas):
        verdict = "INCONCLUSIVE"
    elif n_ok == len(t):
        verdict = "PASS"
    elif n_ok == 0:
        verdict = "FAIL"
    else:
        verdict = "PARTIAL"
    return result("C4", verdict, crit, nums, details)
