"""F12 (rule fig_decode): decode rows' non-sink underflow against Δ per split count, order, P normalisation and S,
with the theory; the partition-normalised P's relative RMS error against its closed form."""

from pcast.analysis.plots import fig_decode, render
from pcast.pipeline.logs import rule_log

with rule_log(snakemake):  # noqa: F821 (snakemake is injected by the script directive)
    render(fig_decode, snakemake)  # noqa: F821
