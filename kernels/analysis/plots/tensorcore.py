"""F13 (rule fig_tensorcore): an FP8 tensor core's P·V accumulation against float32's, by S and KV order, over Δ.

Two panels per tensor core of the tensorcore experiment (one row each): (a) the MSE with the tensor core's
arithmetic over the MSE with float32's (1 = no change); (b) the accumulation's own error over the P-cast
error (log), with the verdict's limit ``max_share`` dotted. One line per combination (:data:`COMBO_STYLE`);
seed means, the largest per-seed share in the data CSV. Without data (mmasim not installed) the figure says
that the experiment was skipped.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from pcast.contract import PV_ARITHS
from pcast.analysis.plots.style import (TEXT_WIDTH, combo_style, combos_present, decade_ylim, figure_data,
                                          panel_label, series, use_style)

__all__ = ["fig_tensorcore"]

SKIPPED = "tensorcore experiment skipped: mmasim not installed (pip install pcast-fp8[tensorcore])"


def fig_tensorcore(tensorcore: pd.DataFrame, max_share: float):
    """``(fig, data)`` from the tensorcore summary (:func:`pcast.analysis.tensorcore.tensorcore_summary`)."""
    use_style()
    if tensorcore.empty:
        fig, ax = plt.subplots(figsize=(TEXT_WIDTH, 1.0))
        ax.axis("off")
        ax.text(0.5, 0.5, SKIPPED, ha="center", va="center")
        return fig, figure_data([{"panel": "skipped", "series": SKIPPED}])
    cores = [a for a in PV_ARITHS if a in set(tensorcore["pv_arith"])]
    fig, axes = plt.subplots(len(cores), 2, figsize=(TEXT_WIDTH, 2.2 * len(cores)), squeeze=False)
    rows = []
    for i, (core, (ax_r, ax_s)) in enumerate(zip(cores, axes)):
        d = tensorcore[tensorcore["pv_arith"] == core]
        for combo in combos_present(d):
            c = d[d["combo"] == combo].sort_values("delta")
            ax_r.plot(c["delta"], c["ratio"], **combo_style(combo))
            ax_s.plot(c["delta"], c["share"], **combo_style(combo))
            rows += series(f"{core} ratio", combo, c["delta"], c["ratio"])
            rows += series(f"{core} share", combo, c["delta"], c["share"], share_max=list(c["share_max"]))
        ax_r.axhline(1.0, color="#999999", linewidth=0.6)
        ax_r.ticklabel_format(axis="y", useOffset=False, style="plain")
        ax_s.axhline(max_share, color="#000000", linestyle=":", linewidth=0.8, label=f"limit {max_share:g}")
        ax_s.set_yscale("log")
        decade_ylim(ax_s, list(d["share"]) + [max_share])
        ax_r.set_ylabel(f"{core}\nMSE / MSE float32 P·V")
        ax_s.set_ylabel("accumulation / P-cast error")
        for ax, letter in ((ax_r, "a"), (ax_s, "b")):
            ax.set_xlabel("sink strength Δ")
            panel_label(ax, f"{letter}{i + 1}")
    axes[0][1].legend(loc="best", ncol=1)
    fig.tight_layout()
    return fig, figure_data(rows)
