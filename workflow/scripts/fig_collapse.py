"""F2 (rule fig_collapse): underflow fraction vs Δ, four combinations, predictions and Δc."""

from pcast.analysis.plots import fig_collapse, render
from pcast.pipeline.logs import rule_log

with rule_log(snakemake):  # noqa: F821 (snakemake is injected by the script directive)
    render(fig_collapse, snakemake)  # noqa: F821
