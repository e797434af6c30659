"""F7 (rule fig_policies): underflow, saturation and relative MSE against Δ, one line per deployed policy."""

from pcast.analysis.plots import fig_policies, render
from pcast.pipeline.logs import rule_log

with rule_log(snakemake):  # noqa: F821 (snakemake is injected by the script directive)
    render(fig_policies, snakemake)  # noqa: F821
