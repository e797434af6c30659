"""F8–F10: a pretrained model's heads and outputs (the realmodel experiment).

* F8 :func:`fig_realmodel_heads`: layers x heads heatmaps of the MSE ratio forward S=1 / reverse
  S=256 (log color scale) and, beside it, the mass-weighted underflow of forward S=1;
* F9 :func:`fig_realmodel_theory`: the Gaussian theory's predicted underflow against the measured
  one per head, one panel per combination, marked by sink type, the key-shuffled control as
  open markers;
* F10 :func:`fig_realmodel_outputs`: 1 − cosine of each passage's embedding to the exact one, per
  combination and policy (log scale), the passages as points and their median as a bar.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from pcast.contract import COMBO_LABELS
from pcast.analysis.realmodel import BASELINE, FIXED
from pcast.analysis.plots.policies import POLICY_STYLE, policy_style
from pcast.analysis.plots.style import COLUMN_WIDTH, COMBO_STYLE, TEXT_WIDTH, figure_data, panel_label, series, use_style

__all__ = ["fig_realmodel_heads", "fig_realmodel_theory", "fig_realmodel_outputs", "SINK_MARKERS"]

SINK_MARKERS = {"clean": "o", "multi": "s", "other": "^", "none": "x"}


def _grid(summary: pd.DataFrame, run: str, value: str) -> pd.DataFrame:
    s = summary[summary["run"] == run]
    return s.pivot(index="layer", columns="head", values=value).sort_index().sort_index(axis=1)


def fig_realmodel_heads(summary: pd.DataFrame):
    """F8 from ``results/stats/realmodel_heads.csv``."""
    import seaborn as sns  # lazy: seaborn is not part of the slim install
    from matplotlib.colors import LogNorm  # lazy: matplotlib is not part of the slim install

    use_style()
    ratio = _grid(summary, BASELINE, "ratio")
    mass = _grid(summary, BASELINE, "mass_underflow")
    nl, nh = ratio.shape
    fig, axes = plt.subplots(1, 2, figsize=(TEXT_WIDTH, 0.5 + 0.32 * nl + 0.6), constrained_layout=True)
    lo = max(float(np.nanmin(ratio.values)), 1e-2)
    hi = max(float(np.nanmax(ratio.values)), lo * 10)
    sns.heatmap(ratio, ax=axes[0], cmap="viridis", norm=LogNorm(vmin=lo, vmax=hi), annot=ratio.round(0 if hi > 20
                else 1), fmt="g", annot_kws={"fontsize": 5}, linewidths=0.3, cbar_kws={"label": "MSE ratio"})
    axes[0].set_title(f"MSE {BASELINE} / {FIXED}")
    sns.heatmap(mass * 100, ax=axes[1], cmap="magma_r", annot=(mass * 100).round(1), fmt="g",
                annot_kws={"fontsize": 5}, linewidths=0.3, cbar_kws={"label": "P mass lost (%)"})
    axes[1].set_title(f"mass-weighted underflow, {BASELINE}")
    for ax, letter in zip(axes, "ab"):
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        panel_label(ax, letter)
    rows = []
    for (panel, grid) in (("a", ratio), ("b", mass)):
        for layer in grid.index:
            rows += series(panel, f"layer {layer}", grid.columns, grid.loc[layer].values, layer=layer)
    return fig, figure_data(rows)


def fig_realmodel_theory(summary: pd.DataFrame):
    """F9 from ``results/stats/realmodel_heads.csv``: predicted against measured, per combination."""
    use_style()
    combos = [c for c in COMBO_LABELS if c in set(summary["run"])]
    fig, axes = plt.subplots(1, len(combos), figsize=(TEXT_WIDTH, TEXT_WIDTH / len(combos) + 0.3),
                             constrained_layout=True, squeeze=False)
    rows = []
    for ax, combo, letter in zip(axes[0], combos, "abcd"):
        s = summary[summary["run"] == combo]
        color = COMBO_STYLE[combo]["color"]
        for kind, marker in SINK_MARKERS.items():
            k = s[s["sink_type"] == kind]
            if k.empty:
                continue
            filled = marker != "x"
            ax.scatter(k["pred_gauss"], k["underflow_frac"], marker=marker, s=12, color=color,
                       linewidths=0.4 if filled else 0.8, label=f"{kind} ({len(k)})")
            if filled:  # the key-shuffled control: the same marker, open and grey
                ax.scatter(k["pred_gauss"], k["shuffled_frac"], marker=marker, s=12, facecolors="none",
                           edgecolors="#999999", linewidths=0.5)
            else:
                ax.scatter(k["pred_gauss"], k["shuffled_frac"], marker="+", s=12, color="#999999", linewidths=0.5)
            pts = series(letter, f"{combo} {kind}", k["pred_gauss"], k["underflow_frac"], combo=combo, sink_type=kind)
            for pt, layer, head, shuf in zip(pts, k["layer"], k["head"], k["shuffled_frac"]):
                pt.update(layer=int(layer), head=int(head), shuffled=float(shuf))
            rows += pts
        ax.plot([0, 1], [0, 1], color="#000000", linewidth=0.6, linestyle=":")
        ax.set_xlim(-0.02, 1.02)
        ax.set_ylim(-0.02, 1.02)
        ax.set_aspect("equal")
        ax.set_title(combo)
        panel_label(ax, letter)
        ax.legend(loc="upper left", fontsize=5, handletextpad=0.2, markerscale=0.8, title="sink type",
                  title_fontsize=5)
    axes[0][0].set_ylabel("measured (grey: keys shuffled)")
    fig.supxlabel("predicted non-sink underflow fraction (Gaussian theory, measured Δ, σ, sinks)", fontsize=8)
    return fig, figure_data(rows)


def fig_realmodel_outputs(outputs: pd.DataFrame):
    """F10 from ``results/realmodel/outputs.csv``: 1 − cosine per run, passages as points."""
    use_style()
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH * 1.6, 2.4), constrained_layout=True)
    rows = []
    if outputs.empty:
        ax.text(0.5, 0.5, "no model was run (experiments.realmodel.tensors is a user's file)", ha="center",
                va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig, figure_data(rows)
    runs = list(dict.fromkeys(outputs["run"]))
    users = [r for r in runs if r not in COMBO_STYLE and r not in POLICY_STYLE]
    floor = 1e-12  # 1 - cos below this (float64 rounding of a unit vector's dot product) is drawn here
    for i, run in enumerate(runs):
        o = outputs[outputs["run"] == run]
        y = np.maximum(o["one_minus_cos"].to_numpy(float), floor)
        color = COMBO_STYLE[run]["color"] if run in COMBO_STYLE else policy_style(run, users)["color"]
        x = i + np.linspace(-0.18, 0.18, len(y)) if len(y) > 1 else np.full(len(y), float(i))
        ax.scatter(x, y, s=6, color=color, edgecolors="none")
        med = float(np.median(y))
        ax.plot([i - 0.3, i + 0.3], [med, med], color=color, linewidth=1.2)
        pts = series("a", run, x, y, median=med)
        for pt, passage in zip(pts, o["passage"]):
            pt["passage"] = int(passage)
        rows += pts
    ax.set_yscale("log")
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels(runs, rotation=60, ha="right")
    ax.set_ylabel("1 − cosine to exact")
    ax.set_xlim(-0.6, len(runs) - 0.4)
    v = np.maximum(outputs["one_minus_cos"].to_numpy(float), floor)
    ax.set_ylim(10 ** math.floor(math.log10(v.min())), 10 ** math.ceil(math.log10(v.max() * 1.01)))
    return fig, figure_data(rows)
