"""F14 (rule fig_dynamic, beyond the paper): MSE and non-sink underflow against Δ, forward and reverse x
{S=1, S=256, tile_max, row_block_max}."""

from pcast.analysis.plots import fig_dynamic, render
from pcast.pipeline.logs import rule_log

with rule_log(snakemake):  # noqa: F821 (snakemake is injected by the script directive)
    render(fig_dynamic, snakemake)  # noqa: F821
