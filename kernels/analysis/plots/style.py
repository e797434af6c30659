"""One shared figure style for the paper's figures, the helpers they share, deterministic saving.

* One fixed color (Okabe-Ito, colorblind-safe), marker and line style per combination, the same
  in every figure: :data:`COMBO_STYLE`. Forward order is drawn solid, reverse dashed; S=1 uses
  round/triangle markers, S=256 square/diamond, so the four stay apart in grey print too.
* Sizes for a two-column paper: :data:`COLUMN_WIDTH` (3.4 in) and :data:`TEXT_WIDTH` (7.0 in),
  8 pt text, no top/right spines, no frame around legends.
* :func:`save_figure` writes PDF + PNG with no timestamps or software strings, a fixed
  ``svg.hashsalt`` and the figure's data as CSV next to them, so two renders are byte-identical.
* Every figure builder returns ``(fig, data)``: ``data`` is the long table of exactly what is
  drawn, with columns :data:`DATA_COLUMNS` (+ a few named extras), built with :func:`series`
  and :func:`figure_data`.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
# The PDF backend subsets fonts with fontTools, whose INFO lines would flood each rule's log.
logging.getLogger("fontTools").setLevel(logging.WARNING)

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from pcast.contract import COMBO_LABELS  # noqa: E402
from pcast.analysis.summaries import write_csv  # noqa: E402

__all__ = [
    "COMBO_STYLE", "EXTRA_COLORS", "COLUMN_WIDTH", "TEXT_WIDTH", "RC", "DATA_COLUMNS", "S_COLORS",
    "KSINK_MARKERS", "BAND_COLOR", "SAT_COLOR", "use_style", "combo_style", "save_figure", "render",
    "panel_label", "figure_data", "series", "combos_present", "s_color", "log2_axis", "decade_ylim",
]

# Okabe & Ito (2008) palette: distinguishable under the common color-vision deficiencies.
# One entry per pcast.contract.COMBO_LABELS, in its order (forward S=1, forward S=256,
# reverse S=1, reverse S=256).
COMBO_STYLE = dict(zip(COMBO_LABELS, (
    {"color": "#D55E00", "marker": "o", "linestyle": "-"},    # vermillion
    {"color": "#0072B2", "marker": "s", "linestyle": "-"},    # blue
    {"color": "#CC79A7", "marker": "^", "linestyle": "--"},   # reddish purple
    {"color": "#009E73", "marker": "D", "linestyle": "--"},   # bluish green
)))
# Further Okabe-Ito colors for encodings that are not a combination (e.g. other S values).
EXTRA_COLORS = ("#E69F00", "#56B4E9", "#000000", "#999999", "#F0E442")
S_COLORS = {1.0: COMBO_STYLE["forward S=1"]["color"], 16.0: "#000000",
            256.0: COMBO_STYLE["forward S=256"]["color"]}
KSINK_MARKERS = {1: "o", 2: "s", 4: "D", 8: "^", 16: "v"}
BAND_COLOR = "#F0E442"  # Okabe-Ito yellow: the claimed 3-10x band
SAT_COLOR = "#DDDDDD"  # S above the format's max finite value: P = 1 saturates

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

DATA_COLUMNS = ["panel", "series", "x", "y", "y_lo", "y_hi"]


def use_style() -> None:
    """Apply the shared style (seaborn ticks theme plus :data:`RC`)."""
    import seaborn as sns  # lazy: seaborn is not part of the slim install

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


RULE_PARAMS = ("code",)  # every rule's hash of the library code it runs (workflow/rules/common.smk)


def render(build, snakemake) -> pd.DataFrame:
    """Run a figure rule: read its named inputs (CSV), call ``build(**inputs, **params)``, save
    to its ``pdf``, ``png`` and ``csv`` outputs; returns the figure's data.

    The rule names its inputs after ``build``'s tables and its params after its keyword
    arguments (workflow/rules/figures.smk), so no script maps config keys by hand; the params of
    :data:`RULE_PARAMS` describe the rule, not the figure, and are not passed.
    """
    tables = {name: pd.read_csv(path) for name, path in snakemake.input.items()}
    params = {k: v for k, v in snakemake.params.items() if k not in RULE_PARAMS}
    fig, data = build(**tables, **params)
    save_figure(fig, data, **snakemake.output)
    logging.getLogger(f"pcast.{snakemake.rule}").info("%s: %d data rows", snakemake.rule, len(data))
    return data


# ----------------------------------------------------------------------------- figure data


def figure_data(rows: list[dict]) -> pd.DataFrame:
    """The data table of a figure: :data:`DATA_COLUMNS` first, then any extra columns."""
    df = pd.DataFrame(rows)
    for c in DATA_COLUMNS:
        if c not in df.columns:
            df[c] = np.nan
    extra = [c for c in df.columns if c not in DATA_COLUMNS]
    return df[DATA_COLUMNS + extra]


def series(panel, name, x, y, lo=None, hi=None, **extra) -> list[dict]:
    """The data rows of one drawn series (``lo``/``hi``: its interval, NaN if none)."""
    n = len(x)
    lo = [np.nan] * n if lo is None else list(lo)
    hi = [np.nan] * n if hi is None else list(hi)
    return [{"panel": panel, "series": name, "x": float(a), "y": float(b), "y_lo": float(c),
             "y_hi": float(d), **extra} for a, b, c, d in zip(x, y, lo, hi)]


# ----------------------------------------------------------------------------- shared helpers


def combos_present(df: pd.DataFrame, col: str = "combo") -> list[str]:
    """The paper's combinations found in ``df[col]``, in :data:`pcast.contract.COMBO_LABELS` order."""
    present = set(df[col].unique())
    return [c for c in COMBO_LABELS if c in present]


def s_color(s: float, i: int = 0) -> str:
    """The color of a scale S: S = 1, 16, 256 fixed, others from :data:`EXTRA_COLORS`."""
    return S_COLORS.get(float(s), EXTRA_COLORS[i % len(EXTRA_COLORS)])


def log2_axis(ax, lo: float = 1, hi: float = 512) -> None:
    """A log2 x axis from ``lo`` to ``hi`` with a labelled tick at every power of two."""
    ax.set_xscale("log", base=2)
    ticks = [2.0 ** j for j in range(int(math.log2(lo)), int(math.log2(hi)) + 1)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlim(lo / 1.15, hi * 1.15)


def decade_ylim(ax, values) -> None:
    """Log axis limits on whole decades around ``values``, major labels only (no minor labels)."""
    from matplotlib.ticker import LogLocator, NullFormatter  # lazy: matplotlib is not part of the slim install

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
