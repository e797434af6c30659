"""T6 (rule table_realmodel): the real model's worst heads by MSE ratio forward S=1 / reverse S=256."""

import pandas as pd

from pcast.analysis import tables
from pcast.pipeline.logs import rule_log

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    heads = pd.read_csv(snakemake.input.heads, dtype={"sinks": str})  # noqa: F821 (sinks "0;511" stay text)
    table = tables.realmodel(heads, snakemake.params.realmodel)  # noqa: F821
    tables.write(table, **snakemake.output)  # noqa: F821
    log.info("T6: %d rows", len(table.display))
