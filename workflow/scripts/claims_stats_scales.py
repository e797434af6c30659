"""Rule stats_scales: theory of S next to measured MSE/underflow and the paired improvement (scales)."""

import pandas as pd

from kernels import stats
from kernels.claims import setup_log

log = setup_log(snakemake.log[0])  # noqa: F821
cfg = snakemake.params.stats  # noqa: F821
tidy = pd.read_csv(snakemake.input.tidy)  # noqa: F821
log.info("scales: %d rows, S = %s", len(tidy), sorted(tidy["scale"].unique()))
out = stats.scales_summary(
    tidy, baseline=cfg["baseline"], level=float(cfg["seed_interval"]),
    n_resamples=int(cfg["bootstrap_resamples"]), confidence_level=float(cfg["confidence_level"]),
    boot_method=cfg["bootstrap_method"], seed=int(cfg["seed"]),
)
stats.write_csv(out, snakemake.output.summary)  # noqa: F821
log.info("wrote %d rows", len(out))
