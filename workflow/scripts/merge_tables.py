"""Step 3 (rules tidy_table, conformance_table): shard tables -> one sorted tidy table, plus timing."""

from kernels import pipeline

sm = snakemake  # noqa: F821 (injected by the script directive)
log = pipeline.setup_logging(sm.log[0])
with pipeline.logged_errors():
    conformance = sm.wildcards.experiment == "conformance"
    n = pipeline.merge_tidy(sm.input.rows, sm.output.tidy, conformance=conformance, expected=sm.params.expected)
    pipeline.merge_timing(sm.input.timing, sm.output.timing)
    log.info("%s: %d rows from %d shards", sm.output.tidy, n, len(sm.input.rows))
