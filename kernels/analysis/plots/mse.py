"""F3 (rule fig_mse): MSE against Δ per sink_v_scale, four combinations, the claimed band shaded."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from pcast import theory
from pcast.analysis.plots.style import (
    BAND_COLOR, COMBO_STYLE, TEXT_WIDTH, combos_present, decade_ylim, figure_data, panel_label,
    s_color, series, use_style,
)

__all__ = ["fig_mse", "band_intervals"]


def band_intervals(x, ratio, lo: float, hi: float, *, points: int = 2001) -> list[tuple[float, float]]:
    """Δ intervals where ``ratio`` (log-linearly interpolated between grid points) is in [lo, hi]."""
    x = np.asarray(x, dtype=float)
    r = np.asarray(ratio, dtype=float)
    ok = np.isfinite(r) & (r > 0)
    x, r = x[ok], r[ok]
    if len(x) < 2:
        return [(a, a) for a, b in zip(x, r) if lo <= b <= hi]
    fine = np.linspace(x.min(), x.max(), points)
    lr = np.interp(fine, x, np.log(r))
    inside = (lr >= math.log(lo)) & (lr <= math.log(hi))
    out, start = [], None
    for xi, flag in zip(fine, inside):
        if flag and start is None:
            start = xi
        if not flag and start is not None:
            out.append((start, prev))
            start = None
        prev = xi
    if start is not None:
        out.append((start, fine[-1]))
    return [(float(a), float(b)) for a, b in out]


def _panel(ax, i: int, part: pd.DataFrame, pr: pd.DataFrame, svs: float, combos, band,
           k: int, fmt: str) -> list[dict]:
    """One sink_v_scale: the band where baseline/reference is in ``band``, then each combination."""
    rows: list[dict] = []
    for a, b in band_intervals(pr["delta"], pr["median_ratio"], *band):
        ax.axvspan(a, b, color=BAND_COLOR, alpha=0.35, lw=0, zorder=0)
        rows += [{"panel": chr(ord("a") + i), "series": f"band {band[0]:g}-{band[1]:g}x sink_v_scale={svs:g}",
                  "x": a, "y": np.nan, "y_lo": np.nan, "y_hi": np.nan, "x_end": b}]
    for combo in combos:
        g = part[part["combo"] == combo].sort_values("delta")
        st = COMBO_STYLE[combo]
        ax.fill_between(g["delta"], g["mse_lo"], g["mse_hi"], color=st["color"], alpha=0.18, lw=0)
        ax.plot(g["delta"], g["mse_median"], color=st["color"], ls=st["linestyle"], marker=st["marker"],
                ms=2.2, lw=1.0, label=combo)
        rows += series(chr(ord("a") + i), f"{combo} sink_v_scale={svs:g}", g["delta"], g["mse_median"],
                       g["mse_lo"], g["mse_hi"])
    for s in sorted({float(c.split("S=")[1]) for c in combos}):
        ax.axvline(theory.critical_delta(s, k=k, fmt=fmt), color=s_color(s), lw=0.6, ls=":")
    ax.set_yscale("log")
    decade_ylim(ax, pd.concat([part["mse_lo"], part["mse_hi"]]))
    ax.set_xlabel("sink strength Δ")
    ax.set_title(f"sink_v_scale = {svs:g}", fontsize=7.5)
    panel_label(ax, chr(ord("a") + i))
    return rows


def fig_mse(collapse: pd.DataFrame, paired: pd.DataFrame, *, baseline: str = "forward S=1",
            reference: str = "reverse S=256", band=(3.0, 10.0)):
    """F3: MSE vs Δ (log), four combinations with 95% intervals over seeds, one panel per
    sink_v_scale; shaded where the median paired ratio MSE(baseline)/MSE(reference) ∈ band."""
    use_style()
    svs_values = sorted(collapse["sink_v_scale"].unique())
    fig, axes = plt.subplots(1, len(svs_values), figsize=(TEXT_WIDTH, 2.5), squeeze=False)
    axes = axes.ravel()
    rows: list[dict] = []
    combos = combos_present(collapse)
    k = int(collapse["ksink"].iloc[0]) if len(collapse) else 4
    fmt = str(collapse["fmt"].iloc[0]) if len(collapse) else "e4m3fn"
    for i, (ax, svs) in enumerate(zip(axes, svs_values)):
        part = collapse[collapse["sink_v_scale"] == svs]
        pr = paired[(paired["sink_v_scale"] == svs) & (paired["a"] == baseline) & (paired["b"] == reference)]
        rows += _panel(ax, i, part, pr.sort_values("delta"), svs, combos, band, k, fmt)
    axes[0].set_ylabel("MSE vs float64 reference")
    handles = [Line2D([], [], color=COMBO_STYLE[c]["color"], ls=COMBO_STYLE[c]["linestyle"],
                      marker=COMBO_STYLE[c]["marker"], ms=3, label=c) for c in combos]
    handles.append(plt.Rectangle((0, 0), 1, 1, color=BAND_COLOR, alpha=0.35,
                                 label=f"{baseline} / {reference} in {band[0]:g}–{band[1]:g}×"))
    handles.append(Line2D([], [], color="#555555", ls=":", lw=0.6, label="predicted Δc"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), bbox_to_anchor=(0.5, 0.0),
               fontsize=6.5, handlelength=1.8, columnspacing=1.0)
    fig.tight_layout(pad=0.4, rect=(0, 0.09, 1, 1))
    return fig, figure_data(rows)
