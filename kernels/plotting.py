"""One shared figure style for the paper's figures, and deterministic saving.

* One fixed color (Okabe-Ito, colorblind-safe), marker and line style per combination, the same
  in every figure: :data:`COMBO_STYLE`. Forward order is drawn solid, reverse dashed; S=1 uses
  round/triangle markers, S=256 square/diamond, so the four stay apart in grey print too.
* Sizes for a two-column paper: :data:`COLUMN_WIDTH` (3.4 in) and :data:`TEXT_WIDTH` (7.0 in),
  8 pt text, no top/right spines, no frame around legends.
* :func:`save_figure` writes PDF + PNG with no timestamps or software strings, a fixed
  ``svg.hashsalt`` and the figure's data as CSV next to them, so two renders are byte-identical.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from .stats import write_csv  # noqa: E402

__all__ = [
    "COMBOS", "COMBO_STYLE", "EXTRA_COLORS", "COLUMN_WIDTH", "TEXT_WIDTH", "RC",
    "use_style", "combo_style", "save_figure", "panel_label",
]

COMBOS = ("forward S=1", "forward S=256", "reverse S=1", "reverse S=256")

# Okabe & Ito (2008) palette: distinguishable under the common color-vision deficiencies.
COMBO_STYLE = {
    "forward S=1": {"color": "#D55E00", "marker": "o", "linestyle": "-"},    # vermillion
    "forward S=256": {"color": "#0072B2", "marker": "s", "linestyle": "-"},  # blue
    "reverse S=1": {"color": "#CC79A7", "marker": "^", "linestyle": "--"},   # reddish purple
    "reverse S=256": {"color": "#009E73", "marker": "D", "linestyle": "--"},  # bluish green
}
# Further Okabe-Ito colors for encodings that are not a combination (e.g. other S values).
EXTRA_COLORS = ("#E69F00", "#56B4E9", "#000000", "#999999", "#F0E442")

COLUMN_WIDTH = 3.4  # inches, one column of a two-column paper
TEXT_WIDTH = 7.0  # inches, full text width

RC = {
    "font.family": "DejaVu Sans",
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.frameon": False,
    "legend.handlelength": 2.2,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.linewidth": 0.6,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "xtick.minor.width": 0.4,
    "ytick.minor.width": 0.4,
    "lines.linewidth": 1.2,
    "lines.markersize": 3.5,
    "errorbar.capsize": 1.5,
    "figure.dpi": 100,
    "savefig.dpi": 300,
    "savefig.bbox": "standard",
    "pdf.fonttype": 42,  # embed TrueType: text stays text in the paper
    "ps.fonttype": 42,
    "svg.hashsalt": "pcast-fp8",
    "path.simplify": True,
}


def use_style() -> None:
    """Apply the shared style (seaborn ticks theme plus :data:`RC`)."""
    import seaborn as sns

    sns.set_theme(context="paper", style="ticks", rc=RC)
    matplotlib.rcParams.update(RC)


def combo_style(combo: str, **overrides) -> dict:
    """Keyword arguments for ``ax.plot`` for a combination (with ``label``)."""
    style = dict(COMBO_STYLE[combo])
    style["label"] = combo
    style.update(overrides)
    return style


def panel_label(ax, text: str) -> None:
    """A bold panel letter at the top left, outside the axes."""
    ax.text(-0.02, 1.02, text, transform=ax.transAxes, ha="right", va="bottom",
            fontweight="bold", fontsize=9)


def save_figure(fig, data: pd.DataFrame, pdf: str | Path, png: str | Path,
                csv: str | Path) -> None:
    """Write ``fig`` as PDF and PNG with deterministic bytes, and ``data`` as CSV.

    PDF: ``CreationDate`` removed (and no ``ModDate``); the producer string names the
    matplotlib version only. PNG: no ``Software`` chunk. Both use the fixed style's dpi.
    """
    for path in (pdf, png, csv):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(pdf, format="pdf", metadata={"CreationDate": None, "ModDate": None})
    fig.savefig(png, format="png", metadata={"Software": None})
    write_csv(data, csv)
    plt.close(fig)


# ============================================================================ figure builders
#
# Each builder takes the summary tables (results/stats/*.csv, results/tidy/conformance.csv) and
# returns ``(fig, data)``: ``data`` is the long table of exactly what is drawn, with columns
# ``panel, series, x, y, y_lo, y_hi`` (+ a few named extras), saved next to the figure.

import math  # noqa: E402

import numpy as np  # noqa: E402
from matplotlib.colors import TwoSlopeNorm  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

DATA_COLUMNS = ["panel", "series", "x", "y", "y_lo", "y_hi"]

S_COLORS = {1.0: COMBO_STYLE["forward S=1"]["color"], 16.0: "#000000",
            256.0: COMBO_STYLE["forward S=256"]["color"]}
KSINK_MARKERS = {1: "o", 2: "s", 4: "D", 8: "^", 16: "v"}
BAND_COLOR = "#F0E442"  # Okabe-Ito yellow: the claimed 3-10x band
SAT_COLOR = "#DDDDDD"


def _data(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    for c in DATA_COLUMNS:
        if c not in df.columns:
            df[c] = np.nan
    extra = [c for c in df.columns if c not in DATA_COLUMNS]
    return df[DATA_COLUMNS + extra]


def _series(panel, series, x, y, lo=None, hi=None, **extra) -> list[dict]:
    n = len(x)
    lo = [np.nan] * n if lo is None else list(lo)
    hi = [np.nan] * n if hi is None else list(hi)
    return [{"panel": panel, "series": series, "x": float(a), "y": float(b), "y_lo": float(c),
             "y_hi": float(d), **extra} for a, b, c, d in zip(x, y, lo, hi)]


def _combos_present(df: pd.DataFrame, col: str = "combo") -> list[str]:
    present = set(df[col].unique())
    return [c for c in COMBOS if c in present]


def _s_color(s: float, i: int = 0) -> str:
    return S_COLORS.get(float(s), EXTRA_COLORS[i % len(EXTRA_COLORS)])


def _log2_axis(ax, lo: float = 1, hi: float = 512) -> None:
    ax.set_xscale("log", base=2)
    ticks = [2.0 ** j for j in range(int(math.log2(lo)), int(math.log2(hi)) + 1)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlim(lo / 1.15, hi * 1.15)


def _decade_ylim(ax, values) -> None:
    """Log axis limits on whole decades around ``values``, major labels only (no minor labels)."""
    from matplotlib.ticker import LogLocator, NullFormatter

    v = pd.Series(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if v.empty:
        return
    lo, hi = math.floor(math.log10(v.min())), math.ceil(math.log10(v.max()))
    if hi - lo < 2:
        hi = lo + 2 if math.log10(v.max()) - lo > 1 else hi
        lo = hi - 2 if hi - lo < 2 else lo
    ax.set_ylim(10.0 ** lo, 10.0 ** hi)
    step = max(1, (hi - lo) // 6 + (1 if (hi - lo) > 6 else 0))
    ax.yaxis.set_major_locator(LogLocator(base=10.0 ** step))
    ax.yaxis.set_minor_locator(LogLocator(base=10.0, subs=np.arange(2, 10) * 0.1 if step == 1 else (1.0,),
                                          numticks=100))
    ax.yaxis.set_minor_formatter(NullFormatter())


def band_intervals(x, ratio, lo: float, hi: float, *, points: int = 2001) -> list[tuple[float, float]]:
    """Δ intervals where ``ratio`` (log-linearly interpolated between grid points) is in [lo, hi]."""
    x = np.asarray(x, dtype=float)
    r = np.asarray(ratio, dtype=float)
    ok = np.isfinite(r) & (r > 0)
    x, r = x[ok], r[ok]
    if len(x) < 2:
        return [(a, a) for a, b in zip(x, r) if lo <= b <= hi]
    fine = np.linspace(x.min(), x.max(), points)
    lr = np.interp(fine, x, np.log(r))
    inside = (lr >= math.log(lo)) & (lr <= math.log(hi))
    out, start = [], None
    for xi, flag in zip(fine, inside):
        if flag and start is None:
            start = xi
        if not flag and start is not None:
            out.append((start, prev))
            start = None
        prev = xi
    if start is not None:
        out.append((start, fine[-1]))
    return [(float(a), float(b)) for a, b in out]


# ----------------------------------------------------------------------------- F1


def fig_theory_scale(scales: pd.DataFrame, *, fmt: str = "e4m3fn", highlight: float = 256,
                     compare: float = 448, delta: float | None = None):
    """F1: dp(S) sawtooth with its 2^-4 envelope; normal-range coverage; measured MSE vs S.

    Panels: (a) dp(S) on S ∈ [1, 512] (log2 axis) with the powers of two, S = 256 and 448
    marked; (b) coverage(S) in octaves; (c, d, ...) the measured median MSE (95% interval over
    seeds) against S, one panel per sink_v_scale, one line per (order, Δ).
    """
    from . import theory
    from .formats import get_format

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
    rows: list[dict] = []
    env = 2.0 ** -(f.man_bits + 1)
    S = np.unique(np.concatenate([2.0 ** np.linspace(0, 9, 3601), 2.0 ** np.arange(10),
                                  [compare, 100, 300, 384]]))
    dps = theory.dp(S, fmt)
    cov = theory.coverage(S, fmt)
    pow2 = 2.0 ** np.arange(10)
    # (a) dp(S)
    ax = axes[0]
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
    _log2_axis(ax)
    ax.set_ylim(0.055, 0.152)
    ax.set_xlabel("scale S")
    ax.set_ylabel("worst-case step dp(S)")
    ax.legend(loc="upper left", ncol=4, fontsize=6, handlelength=1.0, columnspacing=0.8,
              borderaxespad=0.1)
    panel_label(ax, "a")
    rows += _series("a", "dp(S)", S, dps)
    rows += _series("a", "powers of two", pow2, theory.dp(pow2, fmt))
    # (b) coverage
    ax = axes[1]
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
    _log2_axis(ax)
    ax.set_xlabel("scale S")
    ax.set_ylabel("normal-range coverage (octaves)")
    panel_label(ax, "b")
    rows += _series("b", "coverage(S)", S, cov)
    # (c...) measured MSE
    deltas = sorted(scales["delta"].unique()) if len(scales) else []
    greys = ["#000000", "#666666", "#AAAAAA", "#CCCCCC"]
    dcol = {d: greys[min(i, len(greys) - 1)] for i, d in enumerate(sorted(deltas, reverse=True))}
    for i, svs in enumerate(svs_values):
        ax = axes[2 + i]
        ax.axvspan(f.max_finite, 512 * 1.15, color=SAT_COLOR, lw=0, zorder=0)
        part = scales[scales["sink_v_scale"] == svs]
        for (order, d), g in part.groupby(["order", "delta"], sort=True):
            g = g.sort_values("scale")
            ls = "-" if order == "forward" else "--"
            ax.fill_between(g["scale"], g["mse_lo"], g["mse_hi"], color=dcol[d], alpha=0.15, lw=0)
            ax.plot(g["scale"], g["mse_median"], ls=ls, color=dcol[d], marker="o" if order == "forward" else "s",
                    ms=2.5, lw=1.0, label=f"{order}, Δ={d:g}")
            rows += _series(chr(ord("c") + i), f"{order} Δ={d:g} sink_v_scale={svs:g}", g["scale"],
                            g["mse_median"], g["mse_lo"], g["mse_hi"])
        ax.axvline(highlight, color=S_COLORS[256.0], lw=0.6, ls=":")
        _log2_axis(ax)
        ax.set_yscale("log")
        ax.set_xlabel("scale S")
        ax.set_ylabel("MSE vs float64 reference")
        ax.set_title(f"measured, sink_v_scale = {svs:g}", fontsize=7.5)
        panel_label(ax, chr(ord("c") + i))
        _decade_ylim(ax, pd.concat([part["mse_lo"], part["mse_hi"], part["mse_median"]]))
    handles = [Line2D([], [], color=dcol[d], lw=1.5, label=f"Δ = {d:g}") for d in deltas]
    handles += [Line2D([], [], color="#555555", ls="-", marker="o", ms=2.5, label="forward"),
                Line2D([], [], color="#555555", ls="--", marker="s", ms=2.5, label="reverse")]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), bbox_to_anchor=(0.5, 0.0),
               fontsize=6.5, handlelength=2.0, columnspacing=1.2)
    fig.tight_layout(pad=0.4, w_pad=0.8, h_pad=0.8, rect=(0, 0.05 if nrows == 2 else 0.1, 1, 1))
    return fig, _data(rows)


# ----------------------------------------------------------------------------- F2


def fig_collapse(collapse: pd.DataFrame, *, linthresh: float = 1e-7):
    """F2: underflow fraction of non-sink P vs Δ, four combinations, with predictions and Δc.

    Measured: median and 95% interval over seeds (one sink_v_scale: the P values do not depend
    on V). Lines: the exact model (thin, each combination) and the leading-order Φ law (dashed,
    forward order). (a) linear axis; (b) symmetric-log axis (linear below ``linthresh``), which
    shows the reverse-order residual and where reverse S=256 leaves zero.
    """
    from . import theory

    use_style()
    if len(collapse) and "sink_v_scale" in collapse:
        collapse = collapse[collapse["sink_v_scale"] == sorted(collapse["sink_v_scale"].unique())[0]]
    fig, axes = plt.subplots(1, 2, figsize=(TEXT_WIDTH, 2.6))
    rows: list[dict] = []
    combos = _combos_present(collapse)
    k = int(collapse["ksink"].iloc[0]) if len(collapse) else 4
    fmt = str(collapse["fmt"].iloc[0]) if len(collapse) else "e4m3fn"
    for combo in combos:
        g = collapse[collapse["combo"] == combo].sort_values("delta")
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
        rows += _series("a,b", f"{combo} measured", x, g["underflow_frac_median"], g["underflow_frac_lo"],
                        g["underflow_frac_hi"], mean=None)
        rows += _series("a,b", f"{combo} exact model", x, g["pred_exact"])
        if combo.startswith("forward"):
            rows += _series("a,b", f"{combo} leading-order law", x, g["pred_leading"])
    scales_present = sorted({float(c.split("S=")[1]) for c in combos})
    for ax in axes:
        for s in scales_present:
            dc = theory.critical_delta(s, k=k, fmt=fmt)
            ax.axvline(dc, color=_s_color(s), lw=0.6, ls=":")
            rows += _series("a,b", f"Δc S={s:g}", [dc], [0.5])
        ax.set_xlabel("sink strength Δ (score units)")
    ax = axes[0]
    ax.axhline(0.5, color="#999999", lw=0.5, ls="-", zorder=0)
    for s in scales_present:
        dc = theory.critical_delta(s, k=k, fmt=fmt)
        ax.text(dc + 0.15, 0.3 if s == 1 else 0.2, f"Δc(S={s:g})\n= {dc:.2f}", fontsize=6.5,
                color=_s_color(s))
    ax.set_ylabel("underflow fraction of non-sink P")
    ax.set_ylim(-0.02, 1.02)
    panel_label(ax, "a")
    ax = axes[1]
    ax.set_yscale("symlog", linthresh=linthresh, linscale=0.5)
    ax.set_ylim(0, 1.5)
    ax.set_ylabel("underflow fraction (symlog)")
    ax.axhline(linthresh, color="#DDDDDD", lw=0.5, zorder=0)
    panel_label(ax, "b")
    handles = [Line2D([], [], color=COMBO_STYLE[c]["color"], marker=COMBO_STYLE[c]["marker"], mfc="white",
                      ls="none", label=c) for c in combos]
    handles += [Line2D([], [], color="#555555", lw=0.9, label="exact model"),
                Line2D([], [], color="#555555", lw=0.9, ls=(0, (4, 2)), label="Φ law (leading order)")]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), bbox_to_anchor=(0.5, 0.0),
               fontsize=6.5, handlelength=1.8, columnspacing=1.0)
    fig.tight_layout(pad=0.4, rect=(0, 0.08, 1, 1))
    data = _data(rows)
    return fig, data.drop(columns=[c for c in ("mean",) if c in data])


# ----------------------------------------------------------------------------- F3


def fig_mse(collapse: pd.DataFrame, paired: pd.DataFrame, *, baseline: str = "forward S=1",
            reference: str = "reverse S=256", band=(3.0, 10.0)):
    """F3: MSE vs Δ (log), four combinations with 95% intervals over seeds, one panel per
    sink_v_scale; shaded where the median paired ratio MSE(baseline)/MSE(reference) ∈ band."""
    from . import theory

    use_style()
    svs_values = sorted(collapse["sink_v_scale"].unique())
    fig, axes = plt.subplots(1, len(svs_values), figsize=(TEXT_WIDTH, 2.5), squeeze=False)
    axes = axes.ravel()
    rows: list[dict] = []
    combos = _combos_present(collapse)
    k = int(collapse["ksink"].iloc[0]) if len(collapse) else 4
    fmt = str(collapse["fmt"].iloc[0]) if len(collapse) else "e4m3fn"
    for i, (ax, svs) in enumerate(zip(axes, svs_values)):
        part = collapse[collapse["sink_v_scale"] == svs]
        pr = paired[(paired["sink_v_scale"] == svs) & (paired["a"] == baseline) & (paired["b"] == reference)]
        pr = pr.sort_values("delta")
        for a, b in band_intervals(pr["delta"], pr["median_ratio"], *band):
            ax.axvspan(a, b, color=BAND_COLOR, alpha=0.35, lw=0, zorder=0)
            rows += [{"panel": chr(ord("a") + i), "series": f"band {band[0]:g}-{band[1]:g}x sink_v_scale={svs:g}",
                      "x": a, "y": np.nan, "y_lo": np.nan, "y_hi": np.nan, "x_end": b}]
        for combo in combos:
            g = part[part["combo"] == combo].sort_values("delta")
            st = COMBO_STYLE[combo]
            ax.fill_between(g["delta"], g["mse_lo"], g["mse_hi"], color=st["color"], alpha=0.18, lw=0)
            ax.plot(g["delta"], g["mse_median"], color=st["color"], ls=st["linestyle"], marker=st["marker"],
                    ms=2.2, lw=1.0, label=combo)
            rows += _series(chr(ord("a") + i), f"{combo} sink_v_scale={svs:g}", g["delta"], g["mse_median"],
                            g["mse_lo"], g["mse_hi"])
        for s in sorted({float(c.split("S=")[1]) for c in combos}):
            ax.axvline(theory.critical_delta(s, k=k, fmt=fmt), color=_s_color(s), lw=0.6, ls=":")
        ax.set_yscale("log")
        _decade_ylim(ax, pd.concat([part["mse_lo"], part["mse_hi"]]))
        ax.set_xlabel("sink strength Δ")
        ax.set_title(f"sink_v_scale = {svs:g}", fontsize=7.5)
        panel_label(ax, chr(ord("a") + i))
    axes[0].set_ylabel("MSE vs float64 reference")
    handles = [Line2D([], [], color=COMBO_STYLE[c]["color"], ls=COMBO_STYLE[c]["linestyle"],
                      marker=COMBO_STYLE[c]["marker"], ms=3, label=c) for c in combos]
    handles.append(plt.Rectangle((0, 0), 1, 1, color=BAND_COLOR, alpha=0.35,
                                 label=f"{baseline} / {reference} in {band[0]:g}–{band[1]:g}×"))
    handles.append(Line2D([], [], color="#555555", ls=":", lw=0.6, label="predicted Δc"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), bbox_to_anchor=(0.5, 0.0),
               fontsize=6.5, handlelength=1.8, columnspacing=1.0)
    fig.tight_layout(pad=0.4, rect=(0, 0.09, 1, 1))
    return fig, _data(rows)


# ----------------------------------------------------------------------------- F4


def fig_improvement(paired: pd.DataFrame, scales: pd.DataFrame, *, baseline: str = "forward S=1",
                    fixes=("forward S=256", "reverse S=1", "reverse S=256"), band=(3.0, 10.0)):
    """F4: improvement ratio MSE(baseline)/MSE(fix) vs Δ with paired-bootstrap 95% CIs, one
    panel per sink_v_scale (top); heatmaps of the median paired improvement over (Δ, S) from the
    scales experiment, one per sink_v_scale, columns per (order, Δ) (bottom)."""
    use_style()
    svs_values = sorted(paired["sink_v_scale"].unique())
    svs_scales = sorted(scales["sink_v_scale"].unique()) if len(scales) else []
    ntop, nbot = max(len(svs_values), 1), max(len(svs_scales), 1)
    fig = plt.figure(figsize=(TEXT_WIDTH, 5.6))
    outer = fig.add_gridspec(2, 1, height_ratios=[1.0, 1.3], hspace=0.42)
    gtop = outer[0].subgridspec(1, ntop, wspace=0.3)
    gbot = outer[1].subgridspec(1, nbot + 1, width_ratios=[1.0] * nbot + [0.035], wspace=0.18)
    rows: list[dict] = []
    top = [fig.add_subplot(gtop[0, i]) for i in range(ntop)]
    p = paired[(paired["a"] == baseline) & paired["b"].isin(fixes)]
    ymax = max(p["ci_high"].replace(np.inf, np.nan).max() if len(p) else 10, band[1]) * 1.5
    ymin = min(p["ci_low"].replace(0, np.nan).min() if len(p) else 1, 1.0) / 1.5
    for i, (ax, svs) in enumerate(zip(top, svs_values)):
        ax.axhspan(*band, color=BAND_COLOR, alpha=0.35, lw=0, zorder=0)
        ax.axhline(1.0, color="#999999", lw=0.5)
        for fix in fixes:
            g = p[(p["sink_v_scale"] == svs) & (p["b"] == fix)].sort_values("delta")
            if g.empty:
                continue
            st = COMBO_STYLE[fix]
            ax.fill_between(g["delta"], g["ci_low"], g["ci_high"], color=st["color"], alpha=0.2, lw=0)
            ax.plot(g["delta"], g["median_ratio"], color=st["color"], ls=st["linestyle"], marker=st["marker"],
                    ms=2.2, lw=1.0, label=f"{baseline} / {fix}")
            rows += _series(chr(ord("a") + i), f"{baseline} / {fix} sink_v_scale={svs:g}", g["delta"],
                            g["median_ratio"], g["ci_low"], g["ci_high"])
        ax.set_yscale("log")
        ax.set_ylim(ymin, ymax)
        ax.set_xlabel("sink strength Δ")
        ax.set_title(f"sink_v_scale = {svs:g}", fontsize=7.5)
        panel_label(ax, chr(ord("a") + i))
    top[0].set_ylabel("MSE improvement (×)")
    handles = [Line2D([], [], color=COMBO_STYLE[f]["color"], ls=COMBO_STYLE[f]["linestyle"],
                      marker=COMBO_STYLE[f]["marker"], ms=3, label=f"{baseline} / {f}") for f in fixes]
    handles.append(plt.Rectangle((0, 0), 1, 1, color=BAND_COLOR, alpha=0.35, label=f"{band[0]:g}–{band[1]:g}× (claimed)"))
    top[-1].legend(handles=handles, loc="upper right", fontsize=6, handlelength=1.8)
    # heatmaps
    bottom = [fig.add_subplot(gbot[0, j]) for j in range(nbot)]
    cax = fig.add_subplot(gbot[0, nbot])
    vals = scales["improvement"].replace([np.inf, -np.inf], np.nan) if len(scales) else pd.Series(dtype=float)
    lim = max(abs(np.log10(vals[vals > 0])).max() if (vals > 0).any() else 1.0, 1.0)
    norm = TwoSlopeNorm(vmin=-lim, vcenter=0.0, vmax=lim)
    last_im = None
    for j, (ax, svs) in enumerate(zip(bottom, svs_scales)):
        part = scales[scales["sink_v_scale"] == svs].copy()
        part["col"] = part["order"] + "\nΔ=" + part["delta"].map(lambda v: f"{v:g}")
        cols = [f"{o}\nΔ={d:g}" for o in ("forward", "reverse") for d in sorted(part["delta"].unique())
                if f"{o}\nΔ={d:g}" in set(part["col"])]
        wide = part.pivot_table(index="scale", columns="col", values="improvement", aggfunc="first")
        wide = wide.reindex(columns=cols).sort_index(ascending=False)
        z = np.log10(wide.to_numpy(float))
        last_im = ax.imshow(z, cmap="vlag", norm=norm, aspect="auto", interpolation="nearest")
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
        panel_label(ax, chr(ord("a") + ntop + j))
        for sc, g in part.groupby("scale"):
            rows += _series(chr(ord("a") + ntop + j), f"scales S={sc:g} sink_v_scale={svs:g}",
                            g["delta"], g["improvement"], g["improvement_lo"], g["improvement_hi"],
                            order=None)
            rows[-len(g):] = [dict(r, order=o) for r, o in zip(rows[-len(g):], g["order"])]
    if last_im is not None:
        cb = fig.colorbar(last_im, cax=cax)
        cb.set_label(f"MSE({baseline}) / MSE(order, S)", fontsize=7)
        ticks = [t for t in (-3, -2, -1, 0, 1, 2, 3) if abs(t) <= lim]
        cb.set_ticks(ticks)
        cb.set_ticklabels([f"{10.0 ** t:g}×" for t in ticks])
        cb.ax.tick_params(labelsize=6)
        cb.outline.set_visible(False)
    if last_im is None:
        cax.set_visible(False)
    fig.subplots_adjust(left=0.08, right=0.92, top=0.95, bottom=0.08)
    return fig, _data(rows)


# ----------------------------------------------------------------------------- F5


def fig_threshold(thresholds: pd.DataFrame, knees: pd.DataFrame, *, tolerance: float = 0.5):
    """F5: (a) measured vs predicted Δc across ksink and S, identity line, bootstrap 95% CIs;
    (b) measured − predicted vs ksink with the ±tolerance band; (c) the MSE knee of the collapse
    experiment against the predicted Δc, per sink_v_scale."""
    use_style()
    fig, axes = plt.subplots(1, 3, figsize=(TEXT_WIDTH, 2.5), gridspec_kw={"width_ratios": [1.1, 1, 1]})
    rows: list[dict] = []
    t = thresholds.dropna(subset=["dc_pred"])
    scales_ = sorted(t["scale"].unique())
    ks = sorted(int(k) for k in t["ksink"].unique())
    ax = axes[0]
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
                        color=_s_color(s, i), ms=3.5, mfc="white", mew=0.8, elinewidth=0.8)
        g = t[t["scale"] == s].sort_values("ksink")
        rows += _series("a", f"S={s:g}", g["dc_pred"], g["dc_meas"], g["dc_lo"], g["dc_hi"],
                        ksink=None)
        rows[-len(g):] = [dict(r, ksink=int(k)) for r, k in zip(rows[-len(g):], g["ksink"])]
    ax.set_xlim(lo_v, hi_v)
    ax.set_ylim(lo_v, hi_v)
    ax.set_aspect("equal")
    ax.set_xlabel("predicted Δc = 6.93 + ln S − δk")
    ax.set_ylabel("measured Δc (fraction = 1/2)")
    panel_label(ax, "a")
    # (b) residuals
    ax = axes[1]
    ax.axhspan(-tolerance, tolerance, color="#999999", alpha=0.15, lw=0)
    ax.axhline(0, color="#999999", lw=0.7)
    offs = {s: (i - (len(scales_) - 1) / 2) * 0.15 for i, s in enumerate(scales_)}
    for i, s in enumerate(scales_):
        g = t[t["scale"] == s].sort_values("ksink")
        x = np.log2(g["ksink"].to_numpy(float)) + offs[s]
        yerr = np.vstack([g["dc_meas"] - g["dc_lo"], g["dc_hi"] - g["dc_meas"]])
        ax.errorbar(x, g["diff"], yerr=np.where(np.isfinite(yerr), yerr, 0), fmt="o", color=_s_color(s, i),
                    ms=3, mfc="white", mew=0.8, elinewidth=0.8, label=f"S = {s:g}")
        rows += _series("b", f"S={s:g} measured - predicted", g["ksink"], g["diff"],
                        g["dc_lo"] - g["dc_pred"], g["dc_hi"] - g["dc_pred"])
    ax.set_xticks(np.log2(ks))
    ax.set_xticklabels([str(k) for k in ks])
    span = max(tolerance * 1.6, float(np.nanmax(np.abs(t["diff"]))) * 1.3 if len(t) and t["diff"].notna().any() else 0)
    ax.set_ylim(-span, span)
    ax.set_xlabel("sink keys ksink")
    ax.set_ylabel("measured − predicted Δc")
    ax.text(0.02, 0.97, f"±{tolerance:g} (C4)", transform=ax.transAxes, fontsize=6.5, va="top", color="#555555")
    ax.legend(loc="lower right", fontsize=6, handlelength=1.5)
    panel_label(ax, "b")
    # (c) MSE knee
    ax = axes[2]
    if knees is not None and len(knees):
        kn = knees.sort_values(["scale", "sink_v_scale"])
        svs_v = sorted(kn["sink_v_scale"].unique())
        marks = ["o", "s", "D", "^"]
        for j, svs in enumerate(svs_v):
            g = kn[kn["sink_v_scale"] == svs]
            for _, r in g.iterrows():
                if np.isfinite(r["knee"]):
                    ax.plot([r["dc_pred"]], [r["knee"]], marks[j % 4], color=_s_color(r["scale"]), ms=4,
                            mfc="white" if j else _s_color(r["scale"]), mew=0.9)
            rows += _series("c", f"knee sink_v_scale={svs:g}", g["dc_pred"], g["knee"], scale=None)
            rows[-len(g):] = [dict(r, scale=float(s)) for r, s in zip(rows[-len(g):], g["scale"])]
        lo_k = np.nanmin(np.r_[kn["dc_pred"], kn["knee"]]) - 1
        hi_k = np.nanmax(np.r_[kn["dc_pred"], kn["knee"]]) + 1
        ax.plot([lo_k, hi_k], [lo_k, hi_k], color="#999999", lw=0.7, zorder=0)
        ax.set_xlim(lo_k, hi_k)
        ax.set_ylim(lo_k, hi_k)
        handles = [Line2D([], [], color="#555555", marker=marks[j % 4], ls="none", ms=4,
                          mfc="white" if j else "#555555", label=f"sink_v_scale = {svs:g}")
                   for j, svs in enumerate(svs_v)]
        ax.legend(handles=handles, loc="upper left", fontsize=6, handlelength=1.0)
        factor = kn["factor"].iloc[0]
        ref = kn["reference"].iloc[0]
        ax.set_ylabel("MSE knee Δ")
        missing = kn[~np.isfinite(kn["knee"])]
        note = f"knee: first Δ with\nMSE ≥ {factor:g}×\n{ref}"
        if len(missing):
            note += f"\n({len(missing)} of {len(kn)}: never)"
        # upper left, under the legend: knees lie below the diagonal, so this corner stays empty
        ax.text(0.03, 0.66, note, transform=ax.transAxes, ha="left", va="top", fontsize=6,
                color="#555555")
    ax.set_xlabel("predicted Δc (ksink = 4)")
    panel_label(ax, "c")
    handles = [Line2D([], [], color="#555555", marker=KSINK_MARKERS.get(k, "o"), ls="none", mfc="white",
                      ms=3.5, label=f"ksink={k}") for k in ks]
    handles += [Line2D([], [], color=_s_color(s, i), lw=2, label=f"S={s:g}") for i, s in enumerate(scales_)]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), bbox_to_anchor=(0.5, 0.0),
               fontsize=6.5, handlelength=1.2, columnspacing=1.0)
    fig.tight_layout(pad=0.4, rect=(0, 0.08, 1, 1), w_pad=1.2)
    return fig, _data(rows)


# ----------------------------------------------------------------------------- F6


def fig_conformance(conf: pd.DataFrame, *, linthresh: float = 1e-9):
    """F6: Triton kernel vs emulator per combination: max |Δout| per row of the conformance table
    (symlog axis: exact agreement shows as 0), filled where all diagnostics agree, open where
    they differ but every difference is explained, a cross where not explained."""
    use_style()
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 2.4))
    rows: list[dict] = []
    conf = conf.copy()
    conf["combo"] = [f"{o} S={float(s):g}" for o, s in zip(conf["order"], conf["scale"])]
    conf["causal_b"] = conf["causal"].astype(str).str.lower().isin(["true", "1"])
    conf["diag_b"] = conf["diag_equal"].astype(str).str.lower().isin(["true", "1"])
    conf["expl_b"] = conf["explained"].astype(str).str.lower().isin(["true", "1"])
    combos = _combos_present(conf)
    shapes = sorted({(int(n), int(d)) for n, d in zip(conf["n"], conf["d"])})
    for xi, combo in enumerate(combos):
        g = conf[conf["combo"] == combo]
        st = COMBO_STYLE[combo]
        for ci, causal in enumerate((False, True)):
            h = g[g["causal_b"] == causal].sort_values(["n", "d", "seed"])
            for si, (n, d) in enumerate(shapes):
                hh = h[(h["n"] == n) & (h["d"] == d)]
                if hh.empty:
                    continue
                x = xi + (ci - 0.5) * 0.36 + (si - (len(shapes) - 1) / 2) * 0.1
                for _, r in hh.iterrows():
                    if not r["expl_b"]:
                        ax.plot([x], [r["max_abs_diff"]], "x", color="#000000", ms=5, mew=1.2, zorder=4)
                    ax.plot([x], [r["max_abs_diff"]], "o" if not causal else "s", color=st["color"], ms=3.5,
                            mfc=st["color"] if r["diag_b"] else "white", mew=0.8, zorder=3)
                rows += _series("a", f"{combo} causal={causal} n={n} d={d}", hh["seed"], hh["max_abs_diff"],
                                diag_equal=None, explained=None)
                rows[-len(hh):] = [dict(r, diag_equal=bool(de), explained=bool(ex), combo=combo, causal=causal,
                                        n=n, d=d) for r, de, ex in zip(rows[-len(hh):], hh["diag_b"], hh["expl_b"])]
    ax.set_yscale("symlog", linthresh=linthresh, linscale=0.4)
    top = max(float(conf["max_abs_diff"].max()) * 10 if len(conf) else 1e-5, 1e-5)
    ax.set_ylim(0, top)
    ax.set_xticks(range(len(combos)))
    ax.set_xticklabels([c.replace(" ", "\n", 1) for c in combos], fontsize=6.5)
    ax.set_xlim(-0.6, len(combos) - 0.4)
    ax.set_ylabel("max |out_kernel − out_emulator|")
    backends = "+".join(sorted(set(map(str, conf.get("kernel_backend", [])))))
    ax.set_title(f"Triton kernel ({backends}) vs emulator", fontsize=7)
    handles = [Line2D([], [], color="#555555", marker="o", ls="none", ms=3.5, label="non-causal"),
               Line2D([], [], color="#555555", marker="s", ls="none", ms=3.5, label="causal"),
               Line2D([], [], color="#555555", marker="o", ls="none", ms=3.5, mfc="white",
                      label="diagnostics differ (explained)"),
               Line2D([], [], color="#000000", marker="x", ls="none", ms=5, label="not explained")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, fontsize=6)
    fig.tight_layout(pad=0.4)
    data = _data(rows)
    return fig, data
