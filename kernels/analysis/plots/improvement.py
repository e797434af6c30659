"""F4 (rule fig_improvement): the improvement of each fix against Δ with paired-bootstrap CIs
(top), and heatmaps of the improvement over (Δ, S) from the scales experiment (bottom)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm
from matplotlib.lines import Line2D

from pcast.analysis.plots.style import BAND_COLOR, COMBO_STYLE, TEXT_WIDTH, figure_data, panel_label, series, use_style
from pcast.analysis.verdicts import baseline_fraction
from pcast.analysis.verdicts.mse import moderate_windows

__all__ = ["fig_improvement"]


WINDOW_HATCHES = ("////", "\\\\\\\\", "....", "xxxx")
WINDOW_COLORS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a")  # each window its own hatch colour, edges and number


def _ratio_panels(top, paired: pd.DataFrame, svs_values, baseline: str, fixes, band,
                  windows: list[tuple[str, list[float]]] = (), half: float = 0.1) -> list[dict]:
    """(a, b, ...) MSE(baseline)/MSE(fix) against Δ, one panel per sink_v_scale, band shaded; each of C5's
    windows of "moderate" (``windows``: (label, its Δ)) hatched over its Δ, ± ``half`` a grid step."""
    rows: list[dict] = []
    p = paired[(paired["a"] == baseline) & paired["b"].isin(fixes)]
    ymax = max(p["ci_high"].replace(np.inf, np.nan).max() if len(p) else 10, band[1]) * 1.5
    ymin = min(p["ci_low"].replace(0, np.nan).min() if len(p) else 1, 1.0) / 1.5
    for i, (ax, svs) in enumerate(zip(top, svs_values)):
        ax.axhspan(*band, color=BAND_COLOR, alpha=0.35, lw=0, zorder=0)
        ax.axhline(1.0, color="#999999", lw=0.5)
        for j, (label, ds) in enumerate(windows):
            if ds:
                c = WINDOW_COLORS[j % len(WINDOW_COLORS)]
                ax.axvspan(min(ds) - half, max(ds) + half, facecolor="none", edgecolor=c, lw=0,
                           hatch=WINDOW_HATCHES[j % len(WINDOW_HATCHES)], alpha=0.6, zorder=0)
                for edge in (min(ds) - half, max(ds) + half):
                    ax.axvline(edge, color=c, lw=0.6, ls=(0, (2, 1)), zorder=0.5)
                ax.text((min(ds) + max(ds)) / 2, 0.97, f"W{j + 1}", color=c, fontsize=6, ha="center", va="top",
                        transform=ax.get_xaxis_transform())
                if i == 0:
                    rows += series("a", f"C5 window {label}", [min(ds), max(ds)], [band[0], band[0]],
                                   [band[0], band[0]], [band[1], band[1]])
        for fix in fixes:
            g = p[(p["sink_v_scale"] == svs) & (p["b"] == fix)].sort_values("delta")
            if g.empty:
                continue
            st = COMBO_STYLE[fix]
            ax.fill_between(g["delta"], g["ci_low"], g["ci_high"], color=st["color"], alpha=0.2, lw=0)
            ax.plot(g["delta"], g["median_ratio"], color=st["color"], ls=st["linestyle"], marker=st["marker"],
                    ms=2.2, lw=1.0, label=f"{baseline} / {fix}")
            rows += series(chr(ord("a") + i), f"{baseline} / {fix} sink_v_scale={svs:g}", g["delta"],
                           g["median_ratio"], g["ci_low"], g["ci_high"])
        ax.set_yscale("log")
        ax.set_ylim(ymin, ymax)
        ax.set_xlabel("sink strength Δ")
        ax.set_title(f"sink_v_scale = {svs:g}", fontsize=7.5)
        panel_label(ax, chr(ord("a") + i))
    top[0].set_ylabel("MSE improvement (×)")
    handles = [Line2D([], [], color=COMBO_STYLE[f]["color"], ls=COMBO_STYLE[f]["linestyle"],
                      marker=COMBO_STYLE[f]["marker"], ms=3, label=f"{baseline} / {f}") for f in fixes]
    handles.append(plt.Rectangle((0, 0), 1, 1, color=BAND_COLOR, alpha=0.35,
                                 label=f"{band[0]:g}–{band[1]:g}× (claimed, C5's band)"))
    handles += [plt.Rectangle((0, 0), 1, 1, facecolor="none", edgecolor=WINDOW_COLORS[j % len(WINDOW_COLORS)], lw=0,
                              hatch=WINDOW_HATCHES[j % len(WINDOW_HATCHES)], label=f"W{j + 1}, C5: {label}")
                for j, (label, ds) in enumerate(windows) if ds]
    top[-1].legend(handles=handles, loc="upper right", fontsize=6, handlelength=1.8)
    return rows


def _heatmap(ax, j: int, part: pd.DataFrame, svs: float, norm, lim: float, letter: str) -> tuple:
    """One heatmap of the scales experiment's improvement: rows S, columns (order, Δ)."""
    part["col"] = part["order"] + "\nΔ=" + part["delta"].map(lambda v: f"{v:g}")
    cols = [f"{o}\nΔ={d:g}" for o in ("forward", "reverse") for d in sorted(part["delta"].unique())
            if f"{o}\nΔ={d:g}" in set(part["col"])]
    wide = part.pivot_table(index="scale", columns="col", values="improvement", aggfunc="first")
    wide = wide.reindex(columns=cols).sort_index(ascending=False)
    im = ax.imshow(np.log10(wide.to_numpy(float)), cmap="vlag", norm=norm, aspect="auto", interpolation="nearest")
    for (r, c), v in np.ndenumerate(wide.to_numpy(float)):
        if np.isfinite(v):
            txt = f"{v:.0f}" if v >= 10 else (f"{v:.1f}" if v >= 0.95 else f"{v:.2f}")
            ax.text(c, r, txt, ha="center", va="center", fontsize=5.5,
                    color="white" if abs(np.log10(v)) > 0.6 * lim else "black")
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels(cols, fontsize=6)
    ax.set_yticks(range(len(wide.index)))
    ax.set_yticklabels([f"{s:g}" for s in wide.index], fontsize=6)
    if j == 0:
        ax.set_ylabel("scale S")
    ax.tick_params(length=0)
    for sp in ax.spines.values():
        sp.set_visible(False)
    ax.set_title(f"scales experiment, sink_v_scale = {svs:g}", fontsize=7.5)
    panel_label(ax, letter)
    rows: list[dict] = []
    for sc, g in part.groupby("scale"):
        rows += series(letter, f"scales S={sc:g} sink_v_scale={svs:g}", g["delta"], g["improvement"],
                       g["improvement_lo"], g["improvement_hi"], order=None)
        rows[-len(g):] = [dict(r, order=o) for r, o in zip(rows[-len(g):], g["order"])]
    return im, rows


def _colorbar(fig, cax, im, lim: float, baseline: str) -> None:
    cb = fig.colorbar(im, cax=cax)
    cb.set_label(f"MSE({baseline}) / MSE(order, S)", fontsize=7)
    ticks = [t for t in (-3, -2, -1, 0, 1, 2, 3) if abs(t) <= lim]
    cb.set_ticks(ticks)
    cb.set_ticklabels([f"{10.0 ** t:g}×" for t in ticks])
    cb.ax.tick_params(labelsize=6)
    cb.outline.set_visible(False)


def fig_improvement(paired: pd.DataFrame, scales: pd.DataFrame, collapse: pd.DataFrame | None = None, *,
                    baseline: str = "forward S=1", fixes=("forward S=256", "reverse S=1", "reverse S=256"),
                    band=(3.0, 10.0), moderate=()):
    """F4: improvement ratio MSE(baseline)/MSE(fix) vs Δ with paired-bootstrap 95% CIs, one
    panel per sink_v_scale (top), C5's band shaded and its windows of "moderate" hatched (``moderate``:
    ``claims.C5.moderate``, read on the baseline's predicted underflow in ``collapse``, as C5 reads
    them); heatmaps of the median paired improvement over (Δ, S) from the scales experiment, one per
    sink_v_scale, columns per (order, Δ) (bottom)."""
    use_style()
    windows = []
    if collapse is not None and len(moderate):
        grid = sorted(paired["delta"].unique())
        frac = baseline_fraction(collapse, baseline)
        windows = [(f"[{lo:g}, {hi:g}]", ds) for (lo, hi), (_, ds) in
                   zip(moderate, moderate_windows([tuple(w) for w in moderate], frac, grid))] if frac is not None else []
    svs_values = sorted(paired["sink_v_scale"].unique())
    svs_scales = sorted(scales["sink_v_scale"].unique()) if len(scales) else []
    ntop, nbot = max(len(svs_values), 1), max(len(svs_scales), 1)
    fig = plt.figure(figsize=(TEXT_WIDTH, 5.6))
    outer = fig.add_gridspec(2, 1, height_ratios=[1.0, 1.3], hspace=0.42)
    gtop = outer[0].subgridspec(1, ntop, wspace=0.3)
    gbot = outer[1].subgridspec(1, nbot + 1, width_ratios=[1.0] * nbot + [0.035], wspace=0.18)
    top = [fig.add_subplot(gtop[0, i]) for i in range(ntop)]
    steps = np.diff(sorted(paired["delta"].unique())) if len(paired) else np.array([])
    half = float(steps.min()) / 2 if len(steps) else 0.1
    rows = _ratio_panels(top, paired, svs_values, baseline, fixes, band, windows, half)
    bottom = [fig.add_subplot(gbot[0, j]) for j in range(nbot)]
    cax = fig.add_subplot(gbot[0, nbot])
    vals = scales["improvement"].replace([np.inf, -np.inf], np.nan) if len(scales) else pd.Series(dtype=float)
    lim = max(abs(np.log10(vals[vals > 0])).max() if (vals > 0).any() else 1.0, 1.0)
    norm = TwoSlopeNorm(vmin=-lim, vcenter=0.0, vmax=lim)
    last_im = None
    for j, (ax, svs) in enumerate(zip(bottom, svs_scales)):
        last_im, more = _heatmap(ax, j, scales[scales["sink_v_scale"] == svs].copy(), svs, norm, lim,
                                 chr(ord("a") + ntop + j))
        rows += more
    if last_im is not None:
        _colorbar(fig, cax, last_im, lim, baseline)
    else:
        cax.set_visible(False)
    fig.subplots_adjust(left=0.08, right=0.92, top=0.95, bottom=0.08)
    return fig, figure_data(rows)
