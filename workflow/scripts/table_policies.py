"""T5 (rule table_policies): per policy and sink, Δc, MSE peaks against the best policy and the V floor."""

import pandas as pd

from pcast.analysis import tables
from pcast.pipeline.logs import rule_log

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    params = snakemake.params  # noqa: F821
    table = tables.policies(pd.read_csv(snakemake.input.policies), params.stats, params.audit)  # noqa: F821
    tables.write(table, **snakemake.output)  # noqa: F821
    log.info("T5: %d rows", len(table.display))
