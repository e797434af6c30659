"""F11 (rule fig_fp4): P in microscaled FP4 against the sink strength Δ, per P cast and KV order.

One row of three panels per order (forward, reverse) of the fp4 experiment: (a) the non-sink underflow
fraction by cause, lost on the E2M1 element grid (solid) and lost because the group's scale flushed
(dotted); (b) the fraction of scale groups whose scale flushed, the closed form
(``pcast.theory.fp4.group_flush_fraction``) dashed; (c) the relative MSE (log). One color per P cast
(:func:`cast_style`): NVFP4's static S₁ on a sequential scale, per-row NVFP4 black, MXFP4 orange, the
FP8 baseline grey. Seed means; the data CSV has their CIs.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D

from pcast.analysis.plots.style import TEXT_WIDTH, decade_ylim, figure_data, panel_label, series, use_style

__all__ = ["fig_fp4", "cast_style"]

_FIXED = {"per_row": {"color": "#000000", "marker": "s"}, "mxfp4": {"color": "#E69F00", "marker": "^"},
          "fp8": {"color": "#999999", "marker": "D"}}
_MARKERS = ("o", "v", "P", "X", "h", "<", ">", "*", "p")
_ORDERS = ("forward", "reverse")


def cast_style(row, static_scales) -> dict:
    """Color and marker of a P cast (a summary row): static NVFP4 by the rank of its S₁ among
    ``static_scales`` on viridis, the others fixed (module docstring)."""
    if row["fmt"] == "nvfp4" and row["scale_mode"] == "per_row":
        return _FIXED["per_row"]
    if row["fmt"] == "mxfp4":
        return _FIXED["mxfp4"]
    if row["fmt"] != "nvfp4":
        return _FIXED["fp8"]
    ranks = sorted(float(s) for s in static_scales)
    i = ranks.index(float(row["scale"]))
    t = 0.0 if len(ranks) == 1 else i / (len(ranks) - 1)
    r, g, b, _ = plt.get_cmap("viridis")(0.05 + 0.8 * t)
    return {"color": f"#{int(r * 255):02X}{int(g * 255):02X}{int(b * 255):02X}", "marker": _MARKERS[i % len(_MARKERS)]}


def _cast_order(s: pd.DataFrame) -> list[str]:
    """Casts in display order: static NVFP4 by S₁, per-row, MXFP4, FP8."""
    first = s.drop_duplicates("cast")
    rank = {"nvfp4": 0, "mxfp4": 2}
    key = {r["cast"]: (rank.get(r["fmt"], 3) + (1 if r["scale_mode"] == "per_row" else 0), float(r["scale"]))
           for _, r in first.iterrows()}
    return sorted(key, key=lambda c: key[c])


def _static(s: pd.DataFrame) -> list[float]:
    st = s[(s["fmt"] == "nvfp4") & (s["scale_mode"] != "per_row")]
    return sorted(set(st["scale"].astype(float)))


def _row(axes, part: pd.DataFrame, order: str, letters, casts, static) -> list[dict]:
    rows: list[dict] = []
    for i, cast in enumerate(casts):
        g = part[part["cast"] == cast].sort_values("delta")
        if g.empty:
            continue
        st = cast_style(g.iloc[0], static)
        step = max(1, len(g) // 8)
        kw = {"color": st["color"], "marker": st["marker"], "ms": 2.6, "markevery": (i % step, step), "lw": 0.9}
        x = g["delta"]
        axes[0].plot(x, g["underflow_elem_frac_mean"], **kw)
        axes[0].plot(x, g["underflow_scale_frac_mean"], color=st["color"], ls=":", lw=1.0)
        axes[1].plot(x, g["groups_flushed_frac_mean"], **kw)
        axes[2].plot(x, g["rel_mse_mean"], **kw)
        for col, letter, what in (("underflow_elem_frac", letters[0], "element grid"),
                                  ("underflow_scale_frac", letters[0], "flushed scale"),
                                  ("groups_flushed_frac", letters[1], "flushed groups"),
                                  ("rel_mse", letters[2], "relative MSE")):
            rows += series(letter, f"{cast} {order} {what}", x, g[f"{col}_mean"], g[f"{col}_lo"], g[f"{col}_hi"],
                           quantity=col, kind="measured")
        if g["pred_groups_flushed"].notna().any():
            axes[1].plot(x, g["pred_groups_flushed"], color=st["color"], ls="--", lw=0.7, alpha=0.85)
            rows += series(letters[1], f"{cast} {order} theory", x, g["pred_groups_flushed"],
                           quantity="groups_flushed_frac", kind="theory")
    for ax, letter in zip(axes, letters):
        panel_label(ax, letter)
    axes[0].set_ylabel(f"{order} order\nfraction")
    axes[0].set_ylim(-0.03, 1.03)
    axes[1].set_ylim(-0.03, 1.03)
    axes[2].set_yscale("log")
    decade_ylim(axes[2], part["rel_mse_mean"])
    return rows


def _legend(fig, s: pd.DataFrame, casts, static) -> int:
    first = s.drop_duplicates("cast").set_index("cast")
    handles = [Line2D([], [], color=cast_style(first.loc[c], static)["color"],
                      marker=cast_style(first.loc[c], static)["marker"], ms=3.5, lw=0.9, label=c) for c in casts]
    handles += [Line2D([], [], color="#555555", ls=":", lw=1.0, label="(a) lost to a flushed scale"),
                Line2D([], [], color="#555555", ls="--", lw=0.7, label="(b) theory")]
    ncol = min(len(handles), 5)
    fig.legend(handles=handles, loc="lower center", ncol=ncol, bbox_to_anchor=(0.5, 0.0), fontsize=6.5,
               handlelength=1.8, columnspacing=1.0)
    return -(-len(handles) // ncol)


def fig_fp4(fp4: pd.DataFrame):
    """F11 from ``results/stats/fp4.csv``: per order (row), underflow by cause, flushed-group fraction with
    the theory dashed, relative MSE, against Δ; with several shapes or sink settings, the first."""
    use_style()
    first = fp4.sort_values(["n", "d", "sink_v_scale", "sigma", "ksink"], kind="mergesort").iloc[0]
    s = fp4
    for c in ("n", "d", "sink_v_scale", "sigma", "ksink", "causal"):
        s = s[s[c] == first[c]]
    orders = [o for o in _ORDERS if o in set(s["order"])]
    casts, static = _cast_order(s), _static(s)
    fig, axes = plt.subplots(len(orders), 3, figsize=(TEXT_WIDTH, 1.9 * len(orders) + 0.9), squeeze=False)
    rows: list[dict] = []
    for i, order in enumerate(orders):
        letters = [chr(ord("a") + 3 * i + j) for j in range(3)]
        rows += _row(axes[i], s[s["order"] == order], order, letters, casts, static)
    for ax in axes[-1]:
        ax.set_xlabel("sink strength Δ")
    for ax, title in zip(axes[0], ("non-sink underflow by cause", "flushed scale groups", "relative MSE")):
        ax.set_title(title, fontsize=7.5)
    legend_rows = _legend(fig, s, casts, static)
    height = fig.get_figheight()
    fig.subplots_adjust(left=0.085, right=0.99, top=1 - 0.22 / height,
                        bottom=(0.5 + 0.14 * legend_rows) / height, wspace=0.32, hspace=0.42)
    return fig, figure_data(rows)
