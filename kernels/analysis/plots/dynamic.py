"""F14 (rule fig_dynamic, beyond the paper): dynamic P scales beside static S against the sink strength Δ.

One row of two panels per order (forward, reverse) of the dynamic experiment: (a) the MSE of the output against
the float64 reference (median over seeds, log), (b) the non-sink underflow fraction (seed mean) with the theory
dashed (``pcast.theory.underflow_fraction`` for a static S, ``pcast.theory.dynamic`` for a dynamic scale). One
color and marker per P cast (:data:`CAST_STYLE`): S = 1 vermillion, S = 256 blue, tile_max green, row_block_max
reddish purple, tile_max_padded orange, any other S grey. The data CSV has the CIs.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D

from pcast.analysis.plots.style import TEXT_WIDTH, decade_ylim, figure_data, panel_label, series, use_style

__all__ = ["fig_dynamic", "CAST_STYLE", "cast_style"]

CAST_STYLE = {"S=1": {"color": "#D55E00", "marker": "o"}, "S=256": {"color": "#0072B2", "marker": "s"},
              "tile_max": {"color": "#009E73", "marker": "^"}, "row_block_max": {"color": "#CC79A7", "marker": "D"},
              "tile_max_padded": {"color": "#E69F00", "marker": "v"}}
_OTHER = {"color": "#999999", "marker": "x"}
_ORDERS = ("forward", "reverse")


def cast_style(cast: str) -> dict:
    """Color and marker of a P cast (module docstring)."""
    return CAST_STYLE.get(cast, _OTHER)


def _casts(s: pd.DataFrame) -> list[str]:
    """Static casts by S first, then the dynamic ones in :data:`CAST_STYLE` order."""
    first = s.drop_duplicates("cast")
    rank = list(CAST_STYLE)
    key = {r["cast"]: (r["scale_mode"] != "multiply", rank.index(r["cast"]) if r["cast"] in rank else len(rank),
                       float(r["scale"])) for _, r in first.iterrows()}
    return sorted(key, key=lambda c: key[c])


def _row(axes, part: pd.DataFrame, order: str, letters, casts) -> list[dict]:
    rows: list[dict] = []
    for i, cast in enumerate(casts):
        g = part[part["cast"] == cast].sort_values("delta")
        if g.empty:
            continue
        st = cast_style(cast)
        step = max(1, len(g) // 8)
        kw = {"color": st["color"], "marker": st["marker"], "ms": 2.8, "markevery": (i % step, step), "lw": 0.9}
        x = g["delta"]
        axes[0].plot(x, g["mse_median"], **kw)
        axes[1].plot(x, g["underflow_frac_mean"], **kw)
        rows += series(letters[0], f"{cast} {order} MSE", x, g["mse_median"], quantity="mse_median",
                       kind="measured")
        rows += series(letters[1], f"{cast} {order} underflow", x, g["underflow_frac_mean"], g["underflow_frac_lo"],
                       g["underflow_frac_hi"], quantity="underflow_frac", kind="measured")
        if g["pred_underflow"].notna().any():
            axes[1].plot(x, g["pred_underflow"], color=st["color"], ls="--", lw=0.7, alpha=0.85)
            rows += series(letters[1], f"{cast} {order} theory", x, g["pred_underflow"], quantity="underflow_frac",
                           kind="theory")
    for ax, letter in zip(axes, letters):
        panel_label(ax, letter)
    axes[0].set_ylabel(f"{order} order\nMSE")
    axes[0].set_yscale("log")
    decade_ylim(axes[0], part["mse_median"])
    axes[1].set_ylabel("fraction")
    axes[1].set_ylim(-0.03, 1.03)
    return rows


def fig_dynamic(dynamic: pd.DataFrame):
    """F14 from ``results/stats/dynamic.csv``: per order (row), MSE and non-sink underflow (theory dashed) against
    Δ for every P cast; with several shapes or sink settings, the first."""
    use_style()
    first = dynamic.sort_values(["n", "d", "sink_v_scale", "sigma", "ksink"], kind="mergesort").iloc[0]
    s = dynamic
    for c in ("n", "d", "sink_v_scale", "sigma", "ksink", "causal"):
        s = s[s[c] == first[c]]
    orders = [o for o in _ORDERS if o in set(s["order"])]
    casts = _casts(s)
    fig, axes = plt.subplots(len(orders), 2, figsize=(TEXT_WIDTH, 1.9 * len(orders) + 0.8), squeeze=False)
    rows: list[dict] = []
    for i, order in enumerate(orders):
        rows += _row(axes[i], s[s["order"] == order], order, [chr(ord("a") + 2 * i + j) for j in range(2)], casts)
    for ax in axes[-1]:
        ax.set_xlabel("sink strength Δ")
    for ax, title in zip(axes[0], ("MSE (median over seeds)", "non-sink underflow")):
        ax.set_title(title, fontsize=7.5)
    handles = [Line2D([], [], lw=0.9, ms=3.5, label=c, **cast_style(c)) for c in casts]
    handles.append(Line2D([], [], color="#555555", ls="--", lw=0.7, label="theory"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), bbox_to_anchor=(0.5, 0.0), fontsize=6.5,
               handlelength=1.8, columnspacing=1.0)
    height = fig.get_figheight()
    fig.subplots_adjust(left=0.1, right=0.99, top=1 - 0.22 / height, bottom=0.62 / height, wspace=0.28, hspace=0.42)
    return fig, figure_data(rows)
