"""F10 (rule fig_realmodel_outputs): the embedding cosine to the exact model, per combination and policy."""

from pcast.analysis.plots import fig_realmodel_outputs, render
from pcast.pipeline.logs import rule_log

with rule_log(snakemake):  # noqa: F821 (snakemake is injected by the script directive)
    render(fig_realmodel_outputs, snakemake)  # noqa: F821
