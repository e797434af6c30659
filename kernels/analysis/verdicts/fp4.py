"""The FP4 section of the verdict: P in microscaled FP4, from the fp4 summary (``results/stats/fp4.csv``).

Computed from :func:`pcast.analysis.fp4_table.cast_rows` and :mod:`pcast.analysis.fp4_predictions`,
every threshold from ``claims.fp4`` in config.yaml:

* the derived optimal static S₁ of NVFP4 (``pcast.theory.fp4.optimal_first_level_scale``) and its
  closed-form group-flush Δc with the experiment's ksink, σ, n and block_n;
* per static NVFP4 S₁ of the grid, forward order: the measured group-flush Δc against the closed form,
  agreeing when ``|measured − closed form|`` lies within the measured crossing's bootstrap CI (the side
  facing the closed form, widened over the static S₁: :func:`pcast.analysis.tolerance.ci_tolerance`, plus
  the Δ grid's interpolation error of the closed form's own curve),
  or when neither crosses on the Δ grid (the
  closed form beyond its last Δ); PASS when every S₁ agrees, FAIL when none does, PARTIAL otherwise,
  INCONCLUSIVE without the closed form;
* at ``delta``: every cast's MSE ratio forward / reverse next to the FP8 baseline's, and its MSE over
  the baseline's (reported, not judged).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from pcast.analysis import fp4_predictions as fp
from pcast.analysis.fp4_table import cast_rows, dc_text
from pcast.analysis.policies import require
from pcast.analysis.text import short
from pcast.analysis.verdicts.common import ci_tolerance, combine, result

__all__ = ["FP4", "FP4_KEYS", "claim_fp4"]

FP4 = "fp4"  # the id of the section in the claims registry and of its part of config's claims:
FP4_KEYS = ("delta",)


def _agreement(r, confidence: float, m: int, last_delta: float) -> tuple[str, str]:
    """(verdict cell, words) for one static S₁."""
    meas, pred = r["dc_meas"], r["dc_pred"]
    if not np.isfinite(pred):
        return "INCONCLUSIVE", "no closed form"
    if np.isfinite(meas):
        tol = ci_tolerance(meas, r["dc_lo"], r["dc_hi"], pred, level=confidence, m=m) + float(r.get("dc_grid_error", 0.0))
        ok = abs(meas - pred) <= tol
        return ("PASS" if ok else "FAIL"), f"|difference| = {abs(meas - pred):.3f} {'≤' if ok else '>'} {tol:.3f}"
    ok = pred > last_delta and dc_text(r) == "never"
    return ("PASS" if ok else "FAIL"), ("both beyond the Δ grid" if ok else "the measured fraction does not cross "
                                        "where the closed form does")


def _optimum(summary: pd.DataFrame) -> tuple[float, float, str]:
    s1 = fp.optimal_scale()
    row = summary.iloc[0].to_dict()
    row.update(fmt="nvfp4", scale_mode="multiply", scale=s1)
    dc = fp.critical_delta(row) if np.isfinite(s1) else float("nan")
    return s1, dc, (f"derived optimal static S1 (pcast.theory.fp4.optimal_first_level_scale): {short(s1, 5)}; its "
                    f"closed-form group-flush Δc with ksink = {int(row['ksink'])}, σ = {float(row['sigma']):g}, "
                    f"n = {int(row['n'])}, block_n = {int(row['block_n'])}: {short(dc, 4)}")


def claim_fp4(summary: pd.DataFrame | None, cfg: Mapping, *, confidence: float = 0.95) -> dict:
    """The FP4 section's verdict and numbers (module docstring)."""
    require(cfg, f"claims.{FP4}", FP4_KEYS)
    delta = float(cfg["delta"])
    crit = ("per static NVFP4 S1, forward order: |measured − closed-form group-flush Δc| within the crossing's "
            f"widened bootstrap CI (or both beyond the Δ grid); MSE ratios read at Δ = {delta:g}")
    tols = [f"Δc: the side of the measured crossing's bootstrap CI (level {confidence:g}) facing the closed form, "
            "widened over the static S1 (Bonferroni), plus the grid's interpolation error of the closed form's own curve"]
    if summary is None or summary.empty:
        return result(FP4, "INCONCLUSIVE", crit, {}, ["no fp4 data"], tolerances=tols)
    rows, last = cast_rows(summary, delta), float(summary["delta"].max())
    statics = rows[[fp.kind(r) == "static" for _, r in rows.iterrows()]]
    m = max(int(np.isfinite(statics["dc_meas"].to_numpy(float)).sum()), 1)
    s1, dc_opt, words = _optimum(summary)
    nums, details, cells = {"optimal_S1": s1, "optimal_S1_dc": dc_opt}, [words + "."], []
    base = rows[~rows["fmt"].isin(list(fp.GROUP))]
    base_fr = float(base["fr_ratio"].iloc[0]) if len(base) == 1 else float("nan")
    for _, r in rows.iterrows():
        tag = r["cast"]
        line = f"{tag}: group-flush Δc measured {dc_text(r)}"
        if fp.kind(r) == "static":
            cell, how = _agreement(r, confidence, m, last)
            cells.append(cell)
            line += f", closed form {short(r['dc_pred'], 4)}: {how} → {cell}"
            nums.update({f"dc_meas[{tag}]": r["dc_meas"], f"dc_pred[{tag}]": r["dc_pred"]})
        line += (f"; at Δ = {delta:g} MSE forward/reverse {short(r['fr_ratio'], 4)} [{short(r['fr_ratio_lo'], 4)}, "
                 f"{short(r['fr_ratio_hi'], 4)}] (FP8 baseline's {short(base_fr, 4)}), forward MSE / baseline "
                 f"{short(r['base_ratio'], 4)}")
        nums.update({f"fr_ratio[{tag}]": r["fr_ratio"], f"base_ratio[{tag}]": r["base_ratio"]})
        details.append(line + ".")
    nums["agree"], nums["disagree"] = cells.count("PASS"), cells.count("FAIL")
    return result(FP4, combine(cells), crit, nums, details, tolerances=tols)
