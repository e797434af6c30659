"""T3 (rule table_thresholds): δk, predicted and measured Δc with CI, difference, MSE knee."""

import pandas as pd

from pcast.analysis import tables
from pcast.pipeline.logs import rule_log

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    inp = snakemake.input  # noqa: F821
    table = tables.thresholds(pd.read_csv(inp.thresholds), pd.read_csv(inp.knees), snakemake.params.level)  # noqa: F821
    tables.write(table, **snakemake.output)  # noqa: F821
    log.info("T3: %d rows", len(table.display))
