"""F2 (rule fig_collapse): underflow fraction vs Δ, four combinations, predictions and Δc."""

import pandas as pd

from kernels import plotting
from kernels.claims import setup_log

log = setup_log(snakemake.log[0])  # noqa: F821
collapse = pd.read_csv(snakemake.input.collapse)  # noqa: F821
fig, data = plotting.fig_collapse(collapse)
plotting.save_figure(fig, data, **dict(snakemake.output))  # noqa: F821
log.info("F2: %d data rows", len(data))
