"""F13 (rule fig_tensorcore): an FP8 tensor core's P·V accumulation against float32's, by S and order."""

from pcast.analysis.plots import fig_tensorcore, render
from pcast.pipeline.logs import rule_log

with rule_log(snakemake):  # noqa: F821 (snakemake is injected by the script directive)
    render(fig_tensorcore, snakemake)  # noqa: F821
