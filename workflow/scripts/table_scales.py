"""T2 (rule table_scales): per S, bit-exactness, dp, coverage, saturation, measured MSE and underflow."""

import pandas as pd

from pcast.analysis import tables
from pcast.pipeline.logs import rule_log

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    table = tables.scales(pd.read_csv(snakemake.input.scales))  # noqa: F821
    tables.write(table, **snakemake.output)  # noqa: F821
    log.info("T2: %d rows", len(table.display))
