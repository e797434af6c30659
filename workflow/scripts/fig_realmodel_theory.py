"""F9 (rule fig_realmodel_theory): the theory's predicted underflow against the measured one, per head."""

from pcast.analysis.plots import fig_realmodel_theory, render
from pcast.pipeline.logs import rule_log

with rule_log(snakemake):  # noqa: F821 (snakemake is injected by the script directive)
    render(fig_realmodel_theory, snakemake)  # noqa: F821
