"""F1 (rule fig_theory_scale): dp(S) sawtooth, normal-range coverage, measured MSE vs S."""

from pcast.analysis.plots import fig_theory_scale, render
from pcast.pipeline.logs import rule_log

with rule_log(snakemake):  # noqa: F821 (snakemake is injected by the script directive)
    render(fig_theory_scale, snakemake)  # noqa: F821
