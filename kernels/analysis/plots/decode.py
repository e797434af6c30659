"""F12 (rule fig_decode): decode rows under split-KV and partition-normalised P.

Two rows of four panels, one row per sink kind (sink keys; a learned sink logit that seeds split 0), one
column per (P normalisation, S): the mean non-sink underflow fraction over decode rows against the sink
strength Δ, one color per split count, forward order solid, reverse dashed (contiguous layout); the
interleaved layout's forward order as crosses; the theory (:mod:`pcast.analysis.decode`) thin and dotted
in the same color. A last panel: the relative RMS error of a partition-normalised P against the partition
size, measured (points, CI over seeds) and :func:`pcast.theory.decode.partition_rms_error` (lines), per S.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from pcast.analysis.plots.style import TEXT_WIDTH, figure_data, panel_label, series, use_style
from pcast.theory.decode import partition_rms_error

__all__ = ["fig_decode"]

_SPLIT_COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00")
_KINDS = {"keys": "sink keys", "logit": "sink logit (init)"}
_S_COLORS = {1.0: "#000000", 256.0: "#999999"}


def _split_color(splits: list[int], ns: int) -> str:
    return _SPLIT_COLORS[splits.index(ns) % len(_SPLIT_COLORS)]


def _panel(ax, part: pd.DataFrame, splits: list[int], letter: str, what: str) -> list[dict]:
    rows: list[dict] = []
    for (ns, layout, order), g in part.groupby(["num_splits", "split_layout", "order"], sort=True):
        g = g.sort_values("delta")
        color = _split_color(splits, int(ns))
        name = f"{what}, {ns} split{'s' if ns > 1 else ''} {layout} {order}"
        if layout == "interleaved" and order == "reverse":
            continue
        if layout == "interleaved":
            ax.plot(g["delta"], g["underflow_frac_mean"], ls="none", marker="x", ms=3, color=color)
        else:
            ax.plot(g["delta"], g["underflow_frac_mean"], color=color, lw=1.0, ls="-" if order == "forward" else "--")
            ax.plot(g["delta"], g["theory"], color=color, lw=0.7, ls=":")
            rows += series(letter, f"{name} theory", g["delta"], g["theory"], quantity="underflow_frac",
                           kind="theory")
        rows += series(letter, name, g["delta"], g["underflow_frac_mean"], g["underflow_frac_lo"],
                       g["underflow_frac_hi"], quantity="underflow_frac", kind="measured")
    panel_label(ax, letter)
    ax.set_ylim(-0.03, 1.03)
    return rows


def _rms_panel(ax, partition: pd.DataFrame, letter: str) -> list[dict]:
    rows: list[dict] = []
    sigma_fmt = {"sigma": 1.0, "fmt": "e4m3fn"}
    for s, g in partition.groupby("scale", sort=True):
        color = _S_COLORS.get(float(s), "#555555")
        n = g["n"].to_numpy(float)
        lo, hi = g["rel_rms_lo"].to_numpy(float), g["rel_rms_hi"].to_numpy(float)
        y = g["rel_rms"].to_numpy(float)
        err = np.vstack([np.nan_to_num(y - lo), np.nan_to_num(hi - y)])
        ax.errorbar(n, y, yerr=err, ls="none", marker="o", ms=3, color=color, capsize=2)
        grid = np.unique(np.round(np.geomspace(max(16, n.min() / 4), n.max() * 4, 25)).astype(int))
        theory = [partition_rms_error(int(m), float(s), **sigma_fmt) for m in grid]
        ax.plot(grid, theory, color=color, lw=0.8)
        rows += series(letter, f"S={float(s):g} measured", n, y, lo, hi, quantity="rel_rms", kind="measured")
        rows += series(letter, f"S={float(s):g} theory", grid, theory, quantity="rel_rms", kind="theory")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("partition keys n")
    ax.set_title("partition P: relative RMS error", fontsize=7.5)
    panel_label(ax, letter)
    return rows


def _legend(fig, splits: list[int]) -> None:
    handles = [Line2D([], [], color=_split_color(splits, ns), lw=1.0, label=f"{ns} split{'s' if ns > 1 else ''}")
               for ns in splits]
    handles += [Line2D([], [], color="#555555", lw=1.0, label="forward"),
                Line2D([], [], color="#555555", lw=1.0, ls="--", label="reverse"),
                Line2D([], [], color="#555555", ls="none", marker="x", ms=3, label="interleaved forward"),
                Line2D([], [], color="#555555", lw=0.7, ls=":", label="theory")]
    handles += [Line2D([], [], color=c, marker="o", ms=3, lw=0.8, label=f"(i) S={s:g}") for s, c in _S_COLORS.items()]
    fig.legend(handles=handles, loc="lower center", ncol=5, bbox_to_anchor=(0.5, 0.0), fontsize=6.5,
               handlelength=1.8, columnspacing=1.0)


def fig_decode(curves: pd.DataFrame, partition: pd.DataFrame):
    """F12 from ``results/stats/decode_curves.csv`` and ``decode_partition.csv`` (module docstring)."""
    use_style()
    curves = curves[curves["policy"] == "-"] if "policy" in curves else curves  # the grid; T8 has the presets
    kinds = [k for k in _KINDS if k in set(curves["kind"])]
    cols = [(pn, float(s)) for pn in ("online", "partition") for s in sorted(set(curves["scale"].astype(float)))
            if ((curves["p_normalize"] == pn) & (curves["scale"] == s)).any()]
    splits = sorted(int(x) for x in set(curves["num_splits"]))
    fig = plt.figure(figsize=(TEXT_WIDTH, 1.75 * len(kinds) + 2.4))
    grid = fig.add_gridspec(len(kinds) + 1, max(len(cols), 1), height_ratios=[1.0] * len(kinds) + [1.05])
    rows: list[dict] = []
    letter = iter("abcdefghijklmnopqrstuvwxyz")
    for i, kind in enumerate(kinds):
        for j, (pn, s) in enumerate(cols):
            ax = fig.add_subplot(grid[i, j])
            part = curves[(curves["kind"] == kind) & (curves["p_normalize"] == pn) & (curves["scale"] == s)]
            rows += _panel(ax, part, splits, next(letter), f"{kind} {pn} S={s:g}")
            if i == 0:
                ax.set_title(f"{pn} P, S = {s:g}", fontsize=7.5)
            if j == 0:
                ax.set_ylabel(f"{_KINDS[kind]}\nnon-sink underflow")
            ax.set_xlabel("sink strength Δ" if i == len(kinds) - 1 else "")
    if len(partition):
        rows += _rms_panel(fig.add_subplot(grid[len(kinds), : max(1, len(cols) // 2)]), partition, next(letter))
    _legend(fig, splits)
    height = fig.get_figheight()
    fig.subplots_adjust(left=0.09, right=0.99, top=1 - 0.22 / height, bottom=0.95 / height, wspace=0.3, hspace=0.55)
    return fig, figure_data(rows)
