"""F3 (rule fig_mse): MSE vs Δ per sink_v_scale, four combinations, 3-10x band shaded."""

from pcast.analysis.plots import fig_mse, render
from pcast.pipeline.logs import rule_log

with rule_log(snakemake):  # noqa: F821 (snakemake is injected by the script directive)
    render(fig_mse, snakemake)  # noqa: F821
