"""F5 (rule fig_threshold): measured vs predicted Δc across ksink and S; the MSE knee."""

from pcast.analysis.plots import fig_threshold, render
from pcast.pipeline.logs import rule_log

with rule_log(snakemake):  # noqa: F821 (snakemake is injected by the script directive)
    render(fig_threshold, snakemake)  # noqa: F821
