"""F4 (rule fig_improvement): improvement ratio vs Δ with paired-bootstrap CIs; (Δ, S) heatmaps."""

import pandas as pd

from kernels import plotting
from kernels.claims import setup_log

log = setup_log(snakemake.log[0])  # noqa: F821
p = snakemake.params  # noqa: F821
fig, data = plotting.fig_improvement(pd.read_csv(snakemake.input.paired), pd.read_csv(snakemake.input.scales),  # noqa: F821
                                     baseline=p.baseline, fixes=tuple(p.fixes), band=tuple(p.band))
plotting.save_figure(fig, data, **dict(snakemake.output))  # noqa: F821
log.info("F4: %d data rows", len(data))
