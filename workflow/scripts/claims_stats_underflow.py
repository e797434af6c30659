"""Rule stats_underflow: measured vs predicted underflow and MSE per configuration (collapse)."""

import pandas as pd

from kernels import stats
from kernels.claims import setup_log

log = setup_log(snakemake.log[0])  # noqa: F821 (snakemake is injected by the script directive)
cfg = snakemake.params.stats  # noqa: F821
tidy = pd.read_csv(snakemake.input.tidy)  # noqa: F821
log.info("collapse: %d rows, backends %s", len(tidy), sorted(tidy["backend"].unique()))
out = stats.collapse_summary(tidy, level=float(cfg["seed_interval"]))
stats.write_csv(out, snakemake.output.summary)  # noqa: F821
log.info("wrote %d rows to %s", len(out), snakemake.output.summary)  # noqa: F821
