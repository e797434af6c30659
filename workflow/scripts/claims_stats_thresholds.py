"""Rule stats_thresholds: measured Δc (crossing of 1/2, bootstrap CI over seeds) vs predicted."""

import pandas as pd

from kernels import stats
from kernels.claims import setup_log

log = setup_log(snakemake.log[0])  # noqa: F821
cfg = snakemake.params.stats  # noqa: F821
tidy = pd.read_csv(snakemake.input.tidy)  # noqa: F821
log.info("threshold: %d rows, ksink %s, S %s", len(tidy), sorted(tidy["ksink"].unique()),
         sorted(tidy["scale"].unique()))
out = stats.threshold_summary(
    tidy, level=float(cfg["crossing_level"]), n_resamples=int(cfg["bootstrap_resamples"]),
    confidence_level=float(cfg["confidence_level"]), boot_method=cfg["bootstrap_method"],
    seed=int(cfg["seed"]),
)
missing = out[out["dc_meas"].isna()]
if len(missing):
    log.warning("%d configurations: the Δ grid does not bracket the crossing", len(missing))
stats.write_csv(out, snakemake.output.summary)  # noqa: F821
log.info("wrote %d rows", len(out))
