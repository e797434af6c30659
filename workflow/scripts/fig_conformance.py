"""F6 (rule fig_conformance): Triton kernel vs emulator, max |Δout| and diagnostics, per combination."""

from pcast.analysis.plots import fig_conformance, render
from pcast.pipeline.logs import rule_log

with rule_log(snakemake):  # noqa: F821 (snakemake is injected by the script directive)
    render(fig_conformance, snakemake)  # noqa: F821
