"""F8 (rule fig_realmodel_heads): layers x heads heatmaps of the MSE ratio and the mass-weighted underflow."""

from pcast.analysis.plots import fig_realmodel_heads, render
from pcast.pipeline.logs import rule_log

with rule_log(snakemake):  # noqa: F821 (snakemake is injected by the script directive)
    render(fig_realmodel_heads, snakemake)  # noqa: F821
