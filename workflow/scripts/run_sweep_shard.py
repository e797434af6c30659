"""Step 2 (rule sweep_shard): every run of one shard of a sweep; see kernels.pipeline.run_sweep_shard."""

import json

from kernels import pipeline

sm = snakemake  # noqa: F821 (injected by the script directive)
pipeline.setup_logging(sm.log[0])
with pipeline.logged_errors():
    spec = json.loads(sm.params.spec)
    n_shards = pipeline.n_shards(sm.config["experiments"][spec["experiment"]])
    pipeline.run_sweep_shard(spec, sm.input[0], sm.output.rows, sm.output.timing, threads=sm.threads, n_shards=n_shards)
