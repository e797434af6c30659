"""F4 (rule fig_improvement): improvement ratio vs Δ with paired-bootstrap CIs; (Δ, S) heatmaps."""

from pcast.analysis.plots import fig_improvement, render
from pcast.pipeline.logs import rule_log

with rule_log(snakemake):  # noqa: F821 (snakemake is injected by the script directive)
    render(fig_improvement, snakemake)  # noqa: F821
