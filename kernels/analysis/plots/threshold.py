"""F5 (rule fig_threshold): measured against predicted Δc across ksink and S; the MSE knee."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from pcast.analysis.plots.style import KSINK_MARKERS, TEXT_WIDTH, figure_data, panel_label, s_color, series, use_style
from pcast.analysis.tolerance import crossing_tolerances
from pcast.analysis.verdicts.threshold import onset_span

__all__ = ["fig_threshold"]


def _panel_identity(ax, t: pd.DataFrame, scales_, ks, tolerance: float) -> list[dict]:
    """(a) measured against predicted Δc with bootstrap CIs, identity line and ±tolerance band."""
    rows: list[dict] = []
    allv = pd.concat([t["dc_pred"], t["dc_meas"]]).dropna()
    lo_v, hi_v = (allv.min() - 0.5, allv.max() + 0.5) if len(allv) else (0, 16)
    ax.plot([lo_v, hi_v], [lo_v, hi_v], color="#999999", lw=0.7, zorder=0)
    ax.fill_between([lo_v, hi_v], [lo_v - tolerance, hi_v - tolerance], [lo_v + tolerance, hi_v + tolerance],
                    color="#999999", alpha=0.15, lw=0, zorder=0)
    for i, s in enumerate(scales_):
        for k in ks:
            r = t[(t["scale"] == s) & (t["ksink"] == k)]
            if r.empty:
                continue
            r = r.iloc[0]
            yerr = [[r["dc_meas"] - r["dc_lo"]], [r["dc_hi"] - r["dc_meas"]]] if np.isfinite(r["dc_lo"]) else None
            ax.errorbar([r["dc_pred"]], [r["dc_meas"]], yerr=yerr, fmt=KSINK_MARKERS.get(k, "o"),
                        color=s_color(s, i), ms=3.5, mfc="white", mew=0.8, elinewidth=0.8)
        g = t[t["scale"] == s].sort_values("ksink")
        rows += series("a", f"S={s:g}", g["dc_pred"], g["dc_meas"], g["dc_lo"], g["dc_hi"], ksink=None)
        rows[-len(g):] = [dict(r, ksink=int(k)) for r, k in zip(rows[-len(g):], g["ksink"])]
    ax.set_xlim(lo_v, hi_v)
    ax.set_ylim(lo_v, hi_v)
    ax.set_aspect("equal")
    ax.set_xlabel("predicted Δc = 6.93 + ln S − δk")
    ax.set_ylabel("measured Δc (fraction = 1/2)")
    panel_label(ax, "a")
    return rows


def _panel_residuals(ax, t: pd.DataFrame, scales_, ks, tolerance: float) -> list[dict]:
    """(b) measured − predicted Δc against ksink, per S, with the ±tolerance band."""
    rows: list[dict] = []
    ax.axhspan(-tolerance, tolerance, color="#999999", alpha=0.15, lw=0)
    ax.axhline(0, color="#999999", lw=0.7)
    offs = {s: (i - (len(scales_) - 1) / 2) * 0.15 for i, s in enumerate(scales_)}
    for i, s in enumerate(scales_):
        g = t[t["scale"] == s].sort_values("ksink")
        x = np.log2(g["ksink"].to_numpy(float)) + offs[s]
        yerr = np.vstack([g["dc_meas"] - g["dc_lo"], g["dc_hi"] - g["dc_meas"]])
        ax.errorbar(x, g["diff"], yerr=np.where(np.isfinite(yerr), yerr, 0), fmt="o", color=s_color(s, i),
                    ms=3, mfc="white", mew=0.8, elinewidth=0.8, label=f"S = {s:g}")
        rows += series("b", f"S={s:g} measured - predicted", g["ksink"], g["diff"],
                       g["dc_lo"] - g["dc_pred"], g["dc_hi"] - g["dc_pred"])
    ax.set_xticks(np.log2(ks))
    ax.set_xticklabels([str(k) for k in ks])
    span = max(tolerance * 1.6, float(np.nanmax(np.abs(t["diff"]))) * 1.3 if len(t) and t["diff"].notna().any() else 0)
    ax.set_ylim(-span, span)
    ax.set_xlabel("sink keys ksink")
    ax.set_ylabel("measured − predicted Δc")
    ax.text(0.02, 0.97, f"±{tolerance:.3f} (C4, widest)", transform=ax.transAxes, fontsize=6.5, va="top", color="#555555")
    ax.legend(loc="lower right", fontsize=6, handlelength=1.5)
    panel_label(ax, "b")
    return rows


def _panel_knee(ax, knees: pd.DataFrame, span: float | None = None) -> list[dict]:
    """(c) the MSE knee of the collapse experiment against the predicted Δc, per sink_v_scale; shaded, the
    window C4 accepts a knee in: Δc ± ``span`` (the onset span)."""
    rows: list[dict] = []
    kn = knees.sort_values(["scale", "sink_v_scale"])
    svs_v = sorted(kn["sink_v_scale"].unique())
    marks = ["o", "s", "D", "^"]
    for j, svs in enumerate(svs_v):
        g = kn[kn["sink_v_scale"] == svs]
        for _, r in g.iterrows():
            if np.isfinite(r["knee"]):
                ax.plot([r["dc_pred"]], [r["knee"]], marks[j % 4], color=s_color(r["scale"]), ms=4,
                        mfc="white" if j else s_color(r["scale"]), mew=0.9)
        rows += series("c", f"knee sink_v_scale={svs:g}", g["dc_pred"], g["knee"], scale=None)
        rows[-len(g):] = [dict(r, scale=float(s)) for r, s in zip(rows[-len(g):], g["scale"])]
    lo_k = np.nanmin(np.r_[kn["dc_pred"], kn["knee"]]) - 1
    hi_k = np.nanmax(np.r_[kn["dc_pred"], kn["knee"]]) + 1
    if span is not None and np.isfinite(span):
        lo_k, hi_k = min(lo_k, np.nanmin(kn["dc_pred"]) - span - 0.5), max(hi_k, np.nanmax(kn["dc_pred"]) + span + 0.5)
        ax.fill_between([lo_k, hi_k], [lo_k - span, hi_k - span], [lo_k + span, hi_k + span], color="#999999",
                        alpha=0.15, lw=0, zorder=0)
        rows += series("c", "knee window (C4): Δc ± onset span", [lo_k, hi_k], [lo_k, hi_k],
                       [lo_k - span, hi_k - span], [lo_k + span, hi_k + span])
    ax.plot([lo_k, hi_k], [lo_k, hi_k], color="#999999", lw=0.7, zorder=0)
    ax.set_xlim(lo_k, hi_k)
    ax.set_ylim(lo_k, hi_k)
    handles = [Line2D([], [], color="#555555", marker=marks[j % 4], ls="none", ms=4,
                      mfc="white" if j else "#555555", label=f"sink_v_scale = {svs:g}")
               for j, svs in enumerate(svs_v)]
    ax.legend(handles=handles, loc="upper left", fontsize=6, handlelength=1.0)
    ax.set_ylabel("MSE knee Δ")
    missing = kn[~np.isfinite(kn["knee"])]
    note = f"knee: first Δ with\nMSE ≥ {kn['factor'].iloc[0]:g}×\n{kn['reference'].iloc[0]}"
    if len(missing):
        note += f"\n({len(missing)} of {len(kn)}: never)"
    if span is not None and np.isfinite(span):
        note += f"\nshaded: Δc ± {span:.2f}σ (C4)"
    # upper left, under the legend: knees lie below the diagonal, so this corner stays empty
    ax.text(0.03, 0.66, note, transform=ax.transAxes, ha="left", va="top", fontsize=6, color="#555555")
    return rows


def fig_threshold(thresholds: pd.DataFrame, knees: pd.DataFrame, *, level: float = 0.95,
                  onset_fraction: float | None = None):
    """F5: (a) measured vs predicted Δc across ksink and S, identity line, bootstrap 95% CIs;
    (b) measured − predicted vs ksink with the ±tolerance band (C4's largest per-row tolerance: the
    crossing's CI at ``level`` widened over the rows); (c) the MSE knee of the collapse experiment
    against the predicted Δc, per sink_v_scale, with the window C4's knee reading accepts (Δc ±
    σ·abs(Φ⁻¹(``onset_fraction``)), ``claims.C4.knee_onset_fraction``)."""
    use_style()
    tol = crossing_tolerances(thresholds, level) if len(thresholds) else np.array([])
    tolerance = float(np.nanmax(tol)) if np.isfinite(tol).any() else 0.0
    fig, axes = plt.subplots(1, 3, figsize=(TEXT_WIDTH, 2.5), gridspec_kw={"width_ratios": [1.1, 1, 1]})
    t = thresholds.dropna(subset=["dc_pred"])
    scales_ = sorted(t["scale"].unique())
    ks = sorted(int(k) for k in t["ksink"].unique())
    rows = _panel_identity(axes[0], t, scales_, ks, tolerance)
    rows += _panel_residuals(axes[1], t, scales_, ks, tolerance)
    if knees is not None and len(knees):
        span = None
        if onset_fraction is not None:
            span = onset_span(float(onset_fraction), float(knees["sigma"].iloc[0]) if "sigma" in knees else 1.0)
        rows += _panel_knee(axes[2], knees, span)
    axes[2].set_xlabel("predicted Δc (ksink = 4)")
    panel_label(axes[2], "c")
    handles = [Line2D([], [], color="#555555", marker=KSINK_MARKERS.get(k, "o"), ls="none", mfc="white",
                      ms=3.5, label=f"ksink={k}") for k in ks]
    handles += [Line2D([], [], color=s_color(s, i), lw=2, label=f"S={s:g}") for i, s in enumerate(scales_)]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), bbox_to_anchor=(0.5, 0.0),
               fontsize=6.5, handlelength=1.2, columnspacing=1.0)
    fig.tight_layout(pad=0.4, rect=(0, 0.08, 1, 1), w_pad=1.2)
    return fig, figure_data(rows)
