"""Rule stats_threshold: measured Δc (crossing of 1/2, bootstrap CI over seeds) vs predicted."""

import pandas as pd

from pcast.analysis import stats
from pcast.analysis.summaries import write_csv
from pcast.pipeline.logs import rule_log

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    tidy = pd.read_csv(snakemake.input.tidy)  # noqa: F821
    log.info("threshold: %d rows, ksink %s, S %s", len(tidy), sorted(tidy["ksink"].unique()),
             sorted(tidy["scale"].unique()))
    out = stats.threshold(tidy, snakemake.params.stats)  # noqa: F821
    missing = out[out["dc_meas"].isna()]
    if len(missing):
        log.warning("%d configurations: the Δ grid does not bracket the crossing", len(missing))
    write_csv(out, snakemake.output.summary)  # noqa: F821
    log.info("wrote %d rows", len(out))
