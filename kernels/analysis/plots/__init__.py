"""The paper's figures F1–F13, and F14 beyond the paper: one module per figure, one shared style (:mod:`.style`).

Each ``fig_*`` function takes the summary tables (``results/stats/*.csv``,
``results/tidy/conformance.csv``) and returns ``(fig, data)``; :func:`save_figure` writes the PDF,
the PNG and ``data`` as CSV with deterministic bytes. The rule ``fig_<name>`` runs
``workflow/scripts/fig_<name>.py``: ``render(fig_<name>, snakemake)`` (``fig_<name>`` lives in the
module ``<name>`` here).
"""

from pcast.analysis.plots.collapse import fig_collapse
from pcast.analysis.plots.conformance import fig_conformance
from pcast.analysis.plots.decode import fig_decode
from pcast.analysis.plots.dynamic import fig_dynamic
from pcast.analysis.plots.fp4 import fig_fp4
from pcast.analysis.plots.improvement import fig_improvement
from pcast.analysis.plots.mse import band_intervals, fig_mse
from pcast.analysis.plots.policies import POLICY_STYLE, fig_policies, policy_style
from pcast.analysis.plots.realmodel import fig_realmodel_heads, fig_realmodel_outputs, fig_realmodel_theory
from pcast.analysis.plots.style import COMBO_STYLE, DATA_COLUMNS, render, save_figure, use_style
from pcast.analysis.plots.tensorcore import fig_tensorcore
from pcast.analysis.plots.theory_scale import fig_theory_scale
from pcast.analysis.plots.threshold import fig_threshold

__all__ = [
    "fig_theory_scale", "fig_collapse", "fig_mse", "fig_improvement", "fig_threshold",
    "fig_conformance", "fig_policies", "fig_fp4", "fig_tensorcore", "fig_decode", "fig_dynamic", "fig_realmodel_heads", "fig_realmodel_theory", "fig_realmodel_outputs", "policy_style", "POLICY_STYLE", "render", "save_figure", "use_style", "band_intervals", "COMBO_STYLE", "DATA_COLUMNS",
]
