"""Rule stats_collapse: measured vs predicted underflow and MSE per configuration (collapse)."""

import pandas as pd

from pcast.analysis import stats
from pcast.analysis.summaries import write_csv
from pcast.pipeline.logs import rule_log

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    tidy = pd.read_csv(snakemake.input.tidy)  # noqa: F821
    log.info("collapse: %d rows, backends %s", len(tidy), sorted(tidy["backend"].unique()))
    out = stats.collapse(tidy, snakemake.params.stats)  # noqa: F821
    write_csv(out, snakemake.output.summary)  # noqa: F821
    log.info("wrote %d rows to %s", len(out), snakemake.output.summary)  # noqa: F821
