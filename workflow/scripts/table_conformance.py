"""T4 (rule table_conformance): Triton kernel vs emulator per combination, causal and shape."""

import pandas as pd

from pcast.analysis import tables
from pcast.pipeline.logs import rule_log

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    table = tables.conformance(pd.read_csv(snakemake.input.conformance))  # noqa: F821
    tables.write(table, **snakemake.output)  # noqa: F821
    log.info("T4: %d rows", len(table.display))
