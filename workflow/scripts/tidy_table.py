"""Rule tidy_table: the shard tables of one experiment -> one sorted tidy table, plus its timing.

The conformance experiment has its own columns (pcast.contract.CONFORMANCE_COLUMNS), and so have
the policies experiment (pcast.contract.POLICY_TIDY_COLUMNS), the fp4 experiment
(pcast.contract.FP4_TIDY_COLUMNS; the dynamic experiment's are the same, DYNAMIC_TIDY_COLUMNS) and the decode
experiment (pcast.contract.DECODE_TIDY_COLUMNS).
"""

from pcast.pipeline.logs import rule_log
from pcast.pipeline.tables import merge_tidy, merge_timing

sm = snakemake  # noqa: F821 (injected by the script directive)
with rule_log(sm) as log:
    n = merge_tidy(sm.input.rows, sm.output.tidy, experiment=sm.wildcards.experiment, expected=sm.params.expected)
    merge_timing(sm.input.timing, sm.output.timing)
    log.info("%s: %d rows from %d shards", sm.output.tidy, n, len(sm.input.rows))
