"""T1 (rule table_paired_tests): paired tests per Δ and pair; CSV has every row, LaTeX/Markdown the
config's Δ subset."""

import pandas as pd

from pcast.analysis import tables
from pcast.pipeline.logs import rule_log

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    table = tables.paired_tests(pd.read_csv(snakemake.input.paired), snakemake.params.stats)  # noqa: F821
    tables.write(table, **snakemake.output)  # noqa: F821
    log.info("T1: %d rows shown, %d in the CSV", len(table.display), len(table.data))
