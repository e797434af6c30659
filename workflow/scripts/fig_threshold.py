"""F5 (rule fig_threshold): measured vs predicted Δc across ksink and S; the MSE knee."""

import pandas as pd

from kernels import plotting
from kernels.claims import setup_log

log = setup_log(snakemake.log[0])  # noqa: F821
fig, data = plotting.fig_threshold(pd.read_csv(snakemake.input.thresholds), pd.read_csv(snakemake.input.knees),  # noqa: F821
                                   tolerance=float(snakemake.params.tolerance))  # noqa: F821
plotting.save_figure(fig, data, **dict(snakemake.output))  # noqa: F821
log.info("F5: %d data rows", len(data))
