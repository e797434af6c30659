"""F7 (rule fig_policies): what each deployed P policy loses against the sink strength Δ.

One row of three panels per sink setting of the policies experiment (sink keys at each
sink_v_scale, then the learned sink logit): (a) the non-sink underflow fraction, (b) the saturated
fraction, (c) the relative MSE (log), each against Δ, one line per policy in the
``variant`` (default ``p_only``: only P is cast), the theory dashed in the policy's color, and in
(c) the V-cast floor of the ``floor_variant`` (default ``deployed``: FP8 Q, K, V with P unrounded)
as a grey band over policies. A policy keeps its color and marker in every panel
(:func:`policy_style`).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from pcast.contract import combo_label
from pcast.analysis.plots.style import COMBO_STYLE, TEXT_WIDTH, decade_ylim, figure_data, panel_label, series, use_style
from pcast.policies import POLICIES

__all__ = ["fig_policies", "policy_style", "POLICY_STYLE"]

# The paper's four policies wear their combination's style; each deployed preset its own color
# (Okabe-Ito first, then distinct tab10 hues) and marker; a user's policy the next of USER_STYLES.
POLICY_STYLE = {
    **{f"{o}-s{s:g}": {"color": COMBO_STYLE[combo_label(o, s)]["color"], "marker": COMBO_STYLE[combo_label(o, s)]["marker"]}
       for o in ("forward", "reverse") for s in (1, 256)},
    "fa3": {"color": "#000000", "marker": "s"},
    "fa4": {"color": "#E69F00", "marker": "v"},
    "sage2": {"color": "#56B4E9", "marker": "P"},
    "flashinfer-hopper": {"color": "#8C564B", "marker": "X"},
    "hpc-ops": {"color": "#17BECF", "marker": "h"},
    "hpc-ops-s1": {"color": "#BCBD22", "marker": "<"},
    "vllm-unified": {"color": "#7F7F7F", "marker": ">"},
    "vllm-unified-1c98a49": {"color": "#D55E00", "marker": "D"},
    "triton-tutorial": {"color": "#9467BD", "marker": "*"},
}
USER_STYLES = tuple({"color": c, "marker": m} for c, m in zip(
    ("#B8860B", "#C51B7D", "#4D9221", "#542788", "#8B0000", "#01665E"), ("d", "p", "8", "H", "o", "s")))
FLOOR_COLOR = "#BBBBBB"
LEGEND_COLUMNS = 6  # entries per legend row: 6 fit the text width at 6.5 pt
_PANELS = (("underflow_frac", "underflow fraction", "pred_underflow"),
           ("saturated_frac", "saturated fraction", "pred_saturated"),
           ("rel_mse", "relative MSE", None))


def policy_style(name: str, users: list[str]) -> dict:
    """Color and marker of a policy: fixed for the presets above; for a user's policy, or a preset without a
    style here, by its rank in ``users`` plus those names (so a new preset plots before anyone styles it)."""
    if name in POLICY_STYLE:
        return POLICY_STYLE[name]
    names = sorted(set(users) | {name})
    return USER_STYLES[names.index(name) % len(USER_STYLES)]


def _settings(s: pd.DataFrame) -> list[tuple[str, float]]:
    """(sink_kind, sink_v_scale) rows of the figure: sink keys first, then the logit."""
    order = {"keys": 0, "logit": 1}
    pairs = {(k, float(v)) for k, v in zip(s["sink_kind"], s["sink_v_scale"])}
    return sorted(pairs, key=lambda p: (order.get(p[0], 2), p[1]))


def _row(axes, s: pd.DataFrame, floor: pd.DataFrame, setting, letters, users) -> list[dict]:
    """One sink setting: underflow, saturation and MSE panels."""
    kind, svs = setting
    tag = "learned sink logit" if kind == "logit" else f"sink keys, v = {svs:g}"
    rows: list[dict] = []
    part = s[(s["sink_kind"] == kind) & (s["sink_v_scale"] == svs)]
    fl = floor[(floor["sink_kind"] == kind) & (floor["sink_v_scale"] == svs)]
    if len(fl):
        band = fl.groupby("delta", sort=True)["floor_rel_mse_median"].agg(["min", "max"])
        axes[2].fill_between(band.index, band["min"], band["max"], color=FLOOR_COLOR, alpha=0.6, lw=0, zorder=0)
        axes[2].plot(band.index, np.sqrt(band["min"] * band["max"]), color=FLOOR_COLOR, lw=2.2, zorder=0)
        rows += series(letters[2], f"V-cast floor {tag}", band.index, band["max"], band["min"], band["max"],
                       quantity="floor_rel_mse", kind="floor")
    for i, (name, g) in enumerate(part.groupby("policy", sort=True)):
        g = g.sort_values("delta")
        st = policy_style(name, users)
        # markers every `step` points, each policy from its own offset: coinciding lines stay apart
        step = max(1, len(g) // 8)
        for ax, letter, (col, _, pred) in zip(axes, letters, _PANELS):
            y = g[f"{col}_median" if col == "rel_mse" else f"{col}_mean"]
            ax.plot(g["delta"], y, color=st["color"], marker=st["marker"], ms=2.6, markevery=(i % step, step),
                    lw=0.9)
            lo, hi = (None, None) if col == "rel_mse" else (g[f"{col}_lo"], g[f"{col}_hi"])
            rows += series(letter, f"{name} {tag}", g["delta"], y, lo, hi, quantity=col, kind="measured")
            if pred is not None and g[pred].notna().any():
                ax.plot(g["delta"], g[pred], color=st["color"], ls="--", lw=0.7, alpha=0.85)
                rows += series(letter, f"{name} {tag} theory", g["delta"], g[pred], quantity=col, kind="theory")
    for ax, letter in zip(axes, letters):
        panel_label(ax, letter)
    axes[0].set_ylabel(f"{tag}\nfraction")
    axes[2].set_ylabel("relative MSE")
    axes[0].set_ylim(-0.03, 1.03)
    top = float(np.nanmax(part[["saturated_frac_mean", "pred_saturated"]].to_numpy(float))) if len(part) else 0.0
    top = max(top * 1.15, 0.01) if np.isfinite(top) else 0.01
    axes[1].set_ylim(-0.03 * top, top)
    axes[2].set_yscale("log")
    decade_ylim(axes[2], pd.concat([part["rel_mse_median"], fl["floor_rel_mse_median"]]))
    return rows


def _legend(fig, names: list[str], users: list[str], floor_variant: str) -> None:
    handles = [Line2D([], [], color=policy_style(n, users)["color"], marker=policy_style(n, users)["marker"],
                      ms=3.5, lw=0.9, label=n) for n in names]
    handles.append(Line2D([], [], color="#555555", ls="--", lw=0.7, label="theory"))
    handles.append(Line2D([], [], color=FLOOR_COLOR, lw=2.2, label=f"V-cast floor ({floor_variant})"))
    ncol = min(len(handles), LEGEND_COLUMNS)
    fig.legend(handles=handles, loc="lower center", ncol=ncol, bbox_to_anchor=(0.5, 0.0), fontsize=6.5,
               handlelength=1.8, columnspacing=1.0)


def fig_policies(policies: pd.DataFrame, *, variant: str = "p_only", floor_variant: str = "deployed"):
    """F7: per sink setting (row), underflow, saturated fraction and relative MSE against Δ, one line
    per policy of ``variant``, theory dashed, the ``floor_variant``'s V-cast floor shaded in the MSE
    panel. ``policies`` is ``results/stats/policies.csv``; with several shapes, the first (n, d)."""
    for name, v in (("variant", variant), ("floor_variant", floor_variant)):
        if v not in set(policies["variant"]):
            raise ValueError(f"{name}={v!r} is not in the policies summary; allowed: "
                             f"{', '.join(sorted(set(policies['variant'])))}")
    use_style()
    n, d = sorted(zip(policies["n"], policies["d"]))[0]
    shape = policies[(policies["n"] == n) & (policies["d"] == d)]
    s, floor = shape[shape["variant"] == variant], shape[shape["variant"] == floor_variant]
    settings = _settings(s)
    names = sorted(s["policy"].unique())

    users = [p for p in names if p not in POLICIES]
    fig, axes = plt.subplots(len(settings), 3, figsize=(TEXT_WIDTH, 1.85 * len(settings) + 0.75), squeeze=False)
    rows: list[dict] = []
    for i, setting in enumerate(settings):
        letters = [chr(ord("a") + 3 * i + j) for j in range(3)]
        rows += _row(axes[i], s, floor, setting, letters, users)
    for ax in axes[-1]:
        ax.set_xlabel("sink strength Δ")
    for ax, (_, label, _) in zip(axes[0], _PANELS):
        ax.set_title(f"{label} ({variant})", fontsize=7.5)
    _legend(fig, names, users, floor_variant)
    # fixed margins (inches) instead of tight_layout: as good here, and a fraction of the time
    height = fig.get_figheight()
    legend_rows = -(-(len(names) + 2) // LEGEND_COLUMNS)
    fig.subplots_adjust(left=0.085, right=0.99, top=1 - 0.22 / height,
                        bottom=(0.5 + 0.14 * legend_rows) / height, wspace=0.32, hspace=0.42)
    return fig, figure_data(rows)
