"""F1 (rule fig_theory_scale): the dp(S) sawtooth, normal-range coverage, measured MSE against S."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from pcast import theory
from pcast.formats import get_format
from pcast.analysis.plots.style import (
    EXTRA_COLORS, S_COLORS, SAT_COLOR, TEXT_WIDTH, decade_ylim, figure_data, log2_axis, panel_label,
    series, use_style,
)

__all__ = ["fig_theory_scale"]


def _panel_dp(ax, f, fmt: str, S, dps, pow2, highlight: float, compare: float) -> list[dict]:
    """(a) dp(S) with its envelope, the powers of two, S = highlight and S = compare."""
    env = 2.0 ** -(f.man_bits + 1)
    ax.axvspan(f.max_finite, 512 * 1.15, color=SAT_COLOR, lw=0, zorder=0)
    ax.plot(S, dps, color="#555555", lw=0.8, label="dp(S)")
    ax.axhline(env, color="#000000", ls=":", lw=0.8)
    ax.text(1.1, env * 0.985, f"envelope $2^{{-{f.man_bits + 1}}}$", va="top", fontsize=6.5)
    ax.plot(pow2, theory.dp(pow2, fmt), "o", color="#555555", ms=3, mfc="white", mew=0.8,
            label="powers of two")
    ax.plot([highlight], [theory.dp(highlight, fmt)], "*", color=S_COLORS[256.0], ms=9,
            label=f"S = {highlight:g}", zorder=5)
    ax.plot([compare], [theory.dp(compare, fmt)], "P", color=EXTRA_COLORS[0], ms=6,
            label=f"S = {compare:g}", zorder=5)
    ax.text(f.max_finite * 0.97, 0.128, "P=1\nsaturates", fontsize=6, va="top", ha="right",
            color="#555555")
    log2_axis(ax)
    ax.set_ylim(0.055, 0.152)
    ax.set_xlabel("scale S")
    ax.set_ylabel("worst-case step dp(S)")
    ax.legend(loc="upper left", ncol=4, fontsize=6, handlelength=1.0, columnspacing=0.8,
              borderaxespad=0.1)
    panel_label(ax, "a")
    return series("a", "dp(S)", S, dps) + series("a", "powers of two", pow2, theory.dp(pow2, fmt))


def _panel_coverage(ax, f, fmt: str, S, cov, pow2, highlight: float, compare: float) -> list[dict]:
    """(b) normal-range coverage in octaves, S = highlight and S = compare annotated."""
    ax.axvspan(f.max_finite, 512 * 1.15, color=SAT_COLOR, lw=0, zorder=0)
    ax.plot(S, cov, color="#555555", lw=0.8)
    ax.plot(pow2[pow2 <= f.max_finite], theory.coverage(pow2[pow2 <= f.max_finite], fmt), "o",
            color="#555555", ms=3, mfc="white", mew=0.8)
    for s_mark, mk, col, y in ((highlight, "*", S_COLORS[256.0], 0.13), (compare, "P", EXTRA_COLORS[0], 0.05)):
        c = theory.coverage(s_mark, fmt)
        ax.plot([s_mark], [c], mk, color=col, ms=9 if mk == "*" else 6, zorder=5)
        exact = "bit-exact" if theory.bit_exact(s_mark) else "not bit-exact"
        ax.text(0.86, y, f"S = {s_mark:g}: {c:.2f} octaves ({exact})", transform=ax.transAxes,
                ha="right", fontsize=6.5, color=col)
    log2_axis(ax)
    ax.set_xlabel("scale S")
    ax.set_ylabel("normal-range coverage (octaves)")
    panel_label(ax, "b")
    return series("b", "coverage(S)", S, cov)


def _panel_measured(ax, i: int, part: pd.DataFrame, svs: float, dcol: dict, f,
                    highlight: float) -> list[dict]:
    """(c, d, ...) measured median MSE against S at one sink_v_scale, one line per (order, Δ)."""
    rows: list[dict] = []
    ax.axvspan(f.max_finite, 512 * 1.15, color=SAT_COLOR, lw=0, zorder=0)
    for (order, d), g in part.groupby(["order", "delta"], sort=True):
        g = g.sort_values("scale")
        ls = "-" if order == "forward" else "--"
        ax.fill_between(g["scale"], g["mse_lo"], g["mse_hi"], color=dcol[d], alpha=0.15, lw=0)
        ax.plot(g["scale"], g["mse_median"], ls=ls, color=dcol[d], marker="o" if order == "forward" else "s",
                ms=2.5, lw=1.0, label=f"{order}, Δ={d:g}")
        rows += series(chr(ord("c") + i), f"{order} Δ={d:g} sink_v_scale={svs:g}", g["scale"],
                       g["mse_median"], g["mse_lo"], g["mse_hi"])
    ax.axvline(highlight, color=S_COLORS[256.0], lw=0.6, ls=":")
    log2_axis(ax)
    ax.set_yscale("log")
    ax.set_xlabel("scale S")
    ax.set_ylabel("MSE vs float64 reference")
    ax.set_title(f"measured, sink_v_scale = {svs:g}", fontsize=7.5)
    panel_label(ax, chr(ord("c") + i))
    decade_ylim(ax, pd.concat([part["mse_lo"], part["mse_hi"], part["mse_median"]]))
    return rows


def fig_theory_scale(scales: pd.DataFrame, *, fmt: str = "e4m3fn", highlight: float = 256,
                     compare: float = 448, delta: float | None = None):
    """F1: dp(S) sawtooth with its 2^-4 envelope; normal-range coverage; measured MSE vs S.

    Panels: (a) dp(S) on S ∈ [1, 512] (log2 axis) with the powers of two, S = 256 and 448
    marked; (b) coverage(S) in octaves; (c, d, ...) the measured median MSE (95% interval over
    seeds) against S, one panel per sink_v_scale, one line per (order, Δ).
    """
    use_style()
    f = get_format(fmt)
    svs_values = sorted(scales["sink_v_scale"].unique()) if len(scales) else []
    ncols = 2 + max(len(svs_values), 1)
    nrows = 1 if ncols <= 3 else 2
    ncol_grid = ncols if nrows == 1 else math.ceil(ncols / 2)
    fig, axes = plt.subplots(nrows, ncol_grid, figsize=(TEXT_WIDTH, 2.3 * nrows), squeeze=False)
    axes = axes.ravel()
    for ax in axes[ncols:]:
        ax.set_visible(False)
    S = np.unique(np.concatenate([2.0 ** np.linspace(0, 9, 3601), 2.0 ** np.arange(10),
                                  [compare, 100, 300, 384]]))
    pow2 = 2.0 ** np.arange(10)
    rows = _panel_dp(axes[0], f, fmt, S, theory.dp(S, fmt), pow2, highlight, compare)
    rows += _panel_coverage(axes[1], f, fmt, S, theory.coverage(S, fmt), pow2, highlight, compare)
    deltas = sorted(scales["delta"].unique()) if len(scales) else []
    # one colour per Δ, distinguishable (and in greyscale by lightness): a sequential palette's spread
    palette = ["#08306b", "#2171b5", "#6baed6", "#fd8d3c", "#a63603", "#54278f"]
    dcol = {d: palette[i % len(palette)] for i, d in enumerate(sorted(deltas, reverse=True))}
    for i, svs in enumerate(svs_values):
        rows += _panel_measured(axes[2 + i], i, scales[scales["sink_v_scale"] == svs], svs, dcol, f, highlight)
    handles = [Line2D([], [], color=dcol[d], lw=1.5, label=f"Δ = {d:g}") for d in deltas]
    handles += [Line2D([], [], color="#555555", ls="-", marker="o", ms=2.5, label="forward"),
                Line2D([], [], color="#555555", ls="--", marker="s", ms=2.5, label="reverse")]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), bbox_to_anchor=(0.5, 0.0),
               fontsize=6.5, handlelength=2.0, columnspacing=1.2)
    fig.tight_layout(pad=0.4, w_pad=0.8, h_pad=0.8, rect=(0, 0.05 if nrows == 2 else 0.1, 1, 1))
    return fig, figure_data(rows)
