"""Rule conformance_shard: Triton kernel vs emulator, engine vs single calls (pcast.pipeline.conformance_runs)."""

import json

from pcast.pipeline.config import n_shards
from pcast.pipeline.logs import rule_log
from pcast.pipeline.conformance_runs import run_conformance_shard

sm = snakemake  # noqa: F821 (injected by the script directive)
with rule_log(sm) as log:
    spec = json.loads(sm.params.spec)
    shards = n_shards(sm.config["experiments"][spec["experiment"]])
    run_conformance_shard(spec, sm.input[0], sm.output.rows, sm.output.timing, threads=sm.threads, n_shards=shards)
