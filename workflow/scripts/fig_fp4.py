"""F11 (rule fig_fp4): P in microscaled FP4 against Δ: underflow by cause, flushed groups with theory, MSE."""

from pcast.analysis.plots import fig_fp4, render
from pcast.pipeline.logs import rule_log

with rule_log(snakemake):  # noqa: F821 (snakemake is injected by the script directive)
    render(fig_fp4, snakemake)  # noqa: F821
