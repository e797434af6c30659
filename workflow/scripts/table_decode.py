"""T8 (rule table_decode): per decode configuration, underflow and Δc measured and predicted; the partition P error."""

import pandas as pd

from pcast.analysis import decode_table, tables
from pcast.pipeline.logs import rule_log

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    inp, params = snakemake.input, snakemake.params  # noqa: F821
    table = decode_table.decode(pd.read_csv(inp.summary), pd.read_csv(inp.curves), pd.read_csv(inp.partition),
                                params.stats, params.decode)
    tables.write(table, **snakemake.output)  # noqa: F821
    log.info("T8: %d rows", len(table.display))
