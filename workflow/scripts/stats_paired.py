"""Rule stats_paired: the T1 family of paired tests (collapse) and the MSE knees derived from it."""

import pandas as pd

from pcast.analysis import stats
from pcast.analysis.summaries import write_csv
from pcast.pipeline.logs import rule_log

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    tidy = pd.read_csv(snakemake.input.tidy)  # noqa: F821
    log.info("collapse: %d rows", len(tidy))
    paired, knees = stats.paired(tidy, snakemake.params.stats)  # noqa: F821
    for note, n in paired["note"].fillna("").value_counts().items():
        if note:
            log.warning("%d rows: %s", n, note)
    log.info("Wilcoxon methods used: %s", paired["wilcoxon_method"].value_counts().to_dict())
    write_csv(paired, snakemake.output.paired)  # noqa: F821
    write_csv(knees, snakemake.output.knees)  # noqa: F821
    log.info("wrote %d paired rows and %d knee rows", len(paired), len(knees))
