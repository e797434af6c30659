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
