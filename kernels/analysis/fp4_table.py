"""T7 (rule table_fp4) and the numbers the FP4 verdict reads: one row per P cast of the fp4 experiment.

:func:`cast_rows` reads ``results/stats/fp4.csv`` (:func:`pcast.analysis.fp4.fp4_summary`) at the
``claims.fp4.delta``: per cast, the closed-form group-flush Δc (static NVFP4, forward order), the
measured one with its CI and their distance, the MSE ratio forward / reverse and the forward MSE over the
FP8 baseline's, both with paired-bootstrap CIs. :func:`fp4` builds T7 from it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from pcast.analysis.fp4 import curve_rows
from pcast.analysis.policies import require
from pcast.analysis.summaries import crossing
from pcast.analysis.tables import Table
from pcast.analysis.text import short

__all__ = ["cast_rows", "dc_text", "fp4"]


def _at(part: pd.DataFrame, delta: float) -> pd.Series | None:
    hit = part[np.isclose(part["delta"].to_numpy(float), delta)]
    return hit.iloc[0] if len(hit) else None


def _grid_error(part: pd.DataFrame, dc_pred: float, level: float) -> float:
    """|crossing of the predicted group-flush curve interpolated on the measured Δ grid − dc_pred| (0 without one)."""
    if "pred_groups_flushed" not in part or not np.isfinite(dc_pred):
        return 0.0
    pred = part["pred_groups_flushed"].to_numpy(float)
    if not np.isfinite(pred).all():
        return 0.0
    on_grid = crossing(part["delta"].to_numpy(float), pred, level)
    return abs(on_grid - dc_pred) if np.isfinite(on_grid) else 0.0


def cast_rows(summary: pd.DataFrame, delta: float) -> pd.DataFrame:
    """One row per cast (its forward curve): cast, fmt, scale_mode, scale, dc_pred, dc_meas, dc_lo, dc_hi,
    dc_diff (``|measured − closed form|``), dc_grid_error (how far the closed form's own curve, interpolated
    linearly on the same Δ grid, crosses from dc_pred), flushed_at_start, fr_ratio(_lo/_hi) and
    base_ratio(_lo/_hi) at ``delta``."""
    rows = []
    for key, part in curve_rows(summary, "forward"):
        first, at = part.iloc[0], _at(part, delta)
        get = (lambda c: float(at[c]) if at is not None and c in at else math.nan)  # noqa: E731
        rows.append({"cast": key["cast"], "fmt": key["fmt"], "scale_mode": key["scale_mode"],
                     "scale": float(key["scale"]), "delta": float(delta), "dc_pred": float(first["dc_pred"]),
                     "dc_meas": float(first["dc_meas"]), "dc_lo": float(first["dc_lo"]), "dc_hi": float(first["dc_hi"]),
                     "dc_diff": abs(float(first["dc_meas"]) - float(first["dc_pred"])),
                     "dc_grid_error": _grid_error(part, float(first["dc_pred"]), float(first["crossing_level"])),
                     "flushed_at_start": float(first["flushed_at_start"]),
                     "crossing_level": float(first["crossing_level"]),
                     **{c: get(c) for c in ("fr_ratio", "fr_ratio_lo", "fr_ratio_hi", "base_ratio", "base_ratio_lo",
                                            "base_ratio_hi")}})
    rank = {"nvfp4": 0, "mxfp4": 2}
    out = pd.DataFrame(rows)
    out["_k"] = [rank.get(f, 3) + (m == "per_row") for f, m in zip(out["fmt"], out["scale_mode"])]
    return out.sort_values(["_k", "scale"], kind="mergesort").drop(columns="_k").reset_index(drop=True)


def dc_text(r) -> str:
    """Measured Δc with CI, or where it is when there is no crossing on the grid."""
    if np.isfinite(r["dc_meas"]):
        return f"{short(r['dc_meas'], 4)} [{short(r['dc_lo'], 4)}, {short(r['dc_hi'], 4)}]"
    return "from the start" if r["flushed_at_start"] >= r["crossing_level"] else "never"


def _ratio(r, name: str) -> str:
    v = r[name]
    return f"{short(v, 3)} [{short(r[name + '_lo'], 3)}, {short(r[name + '_hi'], 3)}]" if np.isfinite(v) else "—"


def fp4(summary: pd.DataFrame, stats_cfg: Mapping, fp4_cfg: Mapping) -> Table:
    """T7: per P cast, closed-form and measured group-flush Δc, and the MSE ratios at ``claims.fp4.delta``."""
    require(stats_cfg, "statistics", ("crossing_level", "confidence_level"))
    require(fp4_cfg, "claims.fp4", ("delta",))
    delta = float(fp4_cfg["delta"])
    data = cast_rows(summary, delta)
    display = pd.DataFrame({
        "P cast": data["cast"],
        "Δc closed form": [short(v, 4) if np.isfinite(v) else "—" for v in data["dc_pred"]],
        "Δc measured [CI]": [dc_text(r) for _, r in data.iterrows()],
        "|difference|": [short(v, 3) if np.isfinite(v) else "—" for v in data["dc_diff"]],
        f"MSE fwd/rev at Δ={delta:g} [CI]": [_ratio(r, "fr_ratio") for _, r in data.iterrows()],
        f"MSE / FP8 baseline at Δ={delta:g} [CI]": [_ratio(r, "base_ratio") for _, r in data.iterrows()]})
    level = float(stats_cfg["crossing_level"])
    caption = (f"T7. P in microscaled FP4 (fp4 experiment, forward order): the group-flush Δc where the seed-mean "
               f"fraction of flushed NVFP4 scale groups crosses {level:g} (bootstrap-over-seeds "
               f"{stats_cfg['confidence_level']:g} CI; 'never': not on the Δ grid) next to the closed form "
               "(pcast.theory.fp4.critical_delta_flush, static S1 only); at Δ = "
               f"{delta:g}, the median per-seed MSE ratio forward / reverse and the forward MSE over the FP8 "
               "baseline's (paired-bootstrap CIs).")
    return Table(display, data, caption, "tab:fp4")
