"""Rule stats_scales: theory of S next to measured MSE/underflow and the paired improvement (scales)."""

import pandas as pd

from pcast.analysis import stats
from pcast.analysis.summaries import write_csv
from pcast.pipeline.logs import rule_log

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    tidy = pd.read_csv(snakemake.input.tidy)  # noqa: F821
    log.info("scales: %d rows, S = %s", len(tidy), sorted(tidy["scale"].unique()))
    out = stats.scales(tidy, snakemake.params.stats)  # noqa: F821
    write_csv(out, snakemake.output.summary)  # noqa: F821
    log.info("wrote %d rows", len(out))
