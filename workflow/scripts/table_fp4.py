"""T7 (rule table_fp4): per P cast, closed-form and measured group-flush Δc, MSE ratios at claims.fp4.delta."""

import pandas as pd

from pcast.analysis import fp4_table, tables
from pcast.pipeline.logs import rule_log

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    params = snakemake.params  # noqa: F821
    table = fp4_table.fp4(pd.read_csv(snakemake.input.fp4), params.stats, params.fp4)  # noqa: F821
    tables.write(table, **snakemake.output)  # noqa: F821
    log.info("T7: %d rows", len(table.display))
