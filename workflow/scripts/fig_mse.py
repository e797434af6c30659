"""F3 (rule fig_mse): MSE vs Δ per sink_v_scale, four combinations, 3-10x band shaded."""

import pandas as pd

from kernels import plotting
from kernels.claims import setup_log

log = setup_log(snakemake.log[0])  # noqa: F821
p = snakemake.params  # noqa: F821
fig, data = plotting.fig_mse(pd.read_csv(snakemake.input.collapse), pd.read_csv(snakemake.input.paired),  # noqa: F821
                             baseline=p.baseline, reference=p.reference, band=tuple(p.band))
plotting.save_figure(fig, data, **dict(snakemake.output))  # noqa: F821
log.info("F3: %d data rows", len(data))
