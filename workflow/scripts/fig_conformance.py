"""F6 (rule fig_conformance): Triton kernel vs emulator, max |Δout| and diagnostics, per combination."""

import pandas as pd

from kernels import plotting
from kernels.claims import setup_log

log = setup_log(snakemake.log[0])  # noqa: F821
fig, data = plotting.fig_conformance(pd.read_csv(snakemake.input.conformance))  # noqa: F821
plotting.save_figure(fig, data, **dict(snakemake.output))  # noqa: F821
log.info("F6: %d data rows", len(data))
