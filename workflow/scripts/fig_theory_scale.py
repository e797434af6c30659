"""F1 (rule fig_theory_scale): dp(S) sawtooth, normal-range coverage, measured MSE vs S."""

import pandas as pd

from kernels import plotting
from kernels.claims import setup_log

log = setup_log(snakemake.log[0])  # noqa: F821
p = snakemake.params  # noqa: F821
scales = pd.read_csv(snakemake.input.scales)  # noqa: F821
fig, data = plotting.fig_theory_scale(scales, fmt=p.fmt, highlight=p.scale, compare=p.compare_scale)
plotting.save_figure(fig, data, **dict(snakemake.output))  # noqa: F821
log.info("F1: %d data rows", len(data))
