"""F2 (rule fig_collapse): underflow fraction against Δ, four combinations, predictions and Δc."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D

from pcast import theory
from pcast.analysis.plots.style import (
    COMBO_STYLE, TEXT_WIDTH, combos_present, figure_data, panel_label, s_color, series, use_style,
)
from pcast.analysis.verdicts.underflow import leading_order_tolerance

__all__ = ["fig_collapse"]


def _draw_combo(axes, g: pd.DataFrame, combo: str, tol: float = 0.0) -> list[dict]:
    """One combination on both panels: measured (median, interval), exact model, Φ law (forward order, shaded
    ± ``tol``: C1's allowance, the band the measurement must meet beside z·SE)."""
    st = COMBO_STYLE[combo]
    x = g["delta"].to_numpy(float)
    for ax in axes:
        ax.errorbar(x, g["underflow_frac_median"], yerr=[g["underflow_frac_median"] - g["underflow_frac_lo"],
                                                        g["underflow_frac_hi"] - g["underflow_frac_median"]],
                    fmt=st["marker"], color=st["color"], ms=3, mfc="white", mew=0.8, elinewidth=0.7,
                    capsize=0, label=f"{combo} (measured)", zorder=3)
        ax.plot(x, g["pred_exact"], color=st["color"], lw=0.9, ls="-", zorder=2)
        if combo.startswith("forward"):
            ax.plot(x, g["pred_leading"], color=st["color"], lw=0.9, ls=(0, (4, 2)), alpha=0.8, zorder=2)
            if tol > 0:
                ax.fill_between(x, (g["pred_leading"] - tol).clip(lower=0), (g["pred_leading"] + tol).clip(upper=1),
                                color=st["color"], alpha=0.12, lw=0, zorder=1)
    rows = series("a,b", f"{combo} measured", x, g["underflow_frac_median"], g["underflow_frac_lo"],
                  g["underflow_frac_hi"], mean=None)
    rows += series("a,b", f"{combo} exact model", x, g["pred_exact"])
    if combo.startswith("forward"):
        rows += series("a,b", f"{combo} leading-order law", x, g["pred_leading"])
        if tol > 0:
            rows += series("a,b", f"{combo} C1 tolerance (law ± {tol:.3g})", x, g["pred_leading"],
                           (g["pred_leading"] - tol).clip(lower=0), (g["pred_leading"] + tol).clip(upper=1))
    return rows


def _finish_axes(axes, scales_present, k: int, fmt: str, linthresh: float) -> None:
    """Axis labels and limits; (a) linear with the Δc labels, (b) symmetric-log."""
    ax = axes[0]
    ax.axhline(0.5, color="#999999", lw=0.5, ls="-", zorder=0)
    for s in scales_present:
        dc = theory.critical_delta(s, k=k, fmt=fmt)
        ax.text(dc + 0.15, 0.3 if s == 1 else 0.2, f"Δc(S={s:g})\n= {dc:.2f}", fontsize=6.5,
                color=s_color(s))
    ax.set_ylabel("underflow fraction of non-sink P")
    ax.set_ylim(-0.02, 1.02)
    panel_label(ax, "a")
    ax = axes[1]
    ax.set_yscale("symlog", linthresh=linthresh, linscale=0.5)
    ax.set_ylim(0, 1.5)
    ax.set_ylabel("underflow fraction (symlog)")
    ax.axhline(linthresh, color="#DDDDDD", lw=0.5, zorder=0)
    panel_label(ax, "b")


def _share(collapse: pd.DataFrame) -> float | None:
    """The sink block's share of non-sink keys, (block_n − k)/(n − k): C2's allowance outside the sink block."""
    if not len(collapse) or not {"block_n", "n", "ksink"} <= set(collapse.columns):
        return None
    r = collapse.iloc[0]
    return (min(int(r["block_n"]), int(r["n"])) - int(r["ksink"])) / (int(r["n"]) - int(r["ksink"]))


def fig_collapse(collapse: pd.DataFrame, *, linthresh: float = 1e-7, allowance: float = 1.0):
    """F2: underflow fraction of non-sink P vs Δ, four combinations, with predictions and Δc.

    Measured: median and 95% interval over seeds (one sink_v_scale: the P values do not depend
    on V). Lines: the exact model (thin, each combination) and the leading-order Φ law (dashed,
    forward order). (a) linear axis; (b) symmetric-log axis (linear below ``linthresh``), which
    shows the reverse-order residual and where reverse S=256 leaves zero. Marked: C1's tolerance around the Φ
    law (``allowance`` × its first neglected term, claims.C1.allowance; shaded) and C2's sink-block share
    (dash-dotted), the most the reverse combinations may underflow outside the sink block.
    """
    use_style()
    if len(collapse) and "sink_v_scale" in collapse:
        collapse = collapse[collapse["sink_v_scale"] == sorted(collapse["sink_v_scale"].unique())[0]]
    fig, axes = plt.subplots(1, 2, figsize=(TEXT_WIDTH, 2.6))
    rows: list[dict] = []
    combos = combos_present(collapse)
    k = int(collapse["ksink"].iloc[0]) if len(collapse) else 4
    fmt = str(collapse["fmt"].iloc[0]) if len(collapse) else "e4m3fn"

    tol = float(allowance) * leading_order_tolerance(k)
    for combo in combos:
        rows += _draw_combo(axes, collapse[collapse["combo"] == combo].sort_values("delta"), combo, tol)
    share = _share(collapse)
    if share is not None:
        for ax in axes:
            ax.axhline(share, color="#555555", lw=0.7, ls="-.", zorder=1)
        axes[0].text(0.2, share + 0.02, f"sink block's share {share:.3g} (C2)", fontsize=6, color="#555555")
        rows += series("a,b", "C2 sink-block share", [float(collapse["delta"].min()), float(collapse["delta"].max())],
                       [share, share])
    scales_present = sorted({float(c.split("S=")[1]) for c in combos})
    for ax in axes:
        for s in scales_present:
            dc = theory.critical_delta(s, k=k, fmt=fmt)
            ax.axvline(dc, color=s_color(s), lw=0.6, ls=":")
            rows += series("a,b", f"Δc S={s:g}", [dc], [0.5])
        ax.set_xlabel("sink strength Δ (score units)")
    _finish_axes(axes, scales_present, k, fmt, linthresh)
    handles = [Line2D([], [], color=COMBO_STYLE[c]["color"], marker=COMBO_STYLE[c]["marker"], mfc="white",
                      ls="none", label=c) for c in combos]
    handles += [Line2D([], [], color="#555555", lw=0.9, label="exact model"),
                Line2D([], [], color="#555555", lw=0.9, ls=(0, (4, 2)), label="Φ law (leading order)"),
                plt.Rectangle((0, 0), 1, 1, color="#555555", alpha=0.15, lw=0, label=f"C1 tolerance ±{tol:.3g}")]
    if share is not None:
        handles.append(Line2D([], [], color="#555555", lw=0.7, ls="-.", label="C2 sink-block share"))
    fig.legend(handles=handles, loc="lower center", ncol=(len(handles) + 1) // 2, bbox_to_anchor=(0.5, 0.0),
               fontsize=6.5, handlelength=1.8, columnspacing=1.0)
    fig.tight_layout(pad=0.4, rect=(0, 0.14, 1, 1))
    data = figure_data(rows)
    return fig, data.drop(columns=[c for c in ("mean",) if c in data])
