"""Rule sweep_shard: every run of one shard of a sweep (pcast.pipeline.runs.run_sweep_shard), of
the policies experiment (pcast.pipeline.policy_runs.run_policies_shard), of the fp4 experiment
(pcast.pipeline.fp4_runs.run_fp4_shard), of the dynamic experiment
(pcast.pipeline.dynamic_runs.run_dynamic_shard) or of the decode experiment
(pcast.pipeline.decode_runs.run_decode_shard)."""

import json

from pcast.contract import DECODE_EXPERIMENT, DYNAMIC_EXPERIMENT, FP4_EXPERIMENT, POLICY_EXPERIMENT
from pcast.pipeline.config import n_shards
from pcast.pipeline.decode_runs import run_decode_shard
from pcast.pipeline.dynamic_runs import run_dynamic_shard
from pcast.pipeline.fp4_runs import run_fp4_shard
from pcast.pipeline.logs import rule_log
from pcast.pipeline.policy_runs import run_policies_shard
from pcast.pipeline.runs import run_sweep_shard

sm = snakemake  # noqa: F821 (injected by the script directive)
with rule_log(sm) as log:
    spec = json.loads(sm.params.spec)
    shards = n_shards(sm.config["experiments"][spec["experiment"]])
    runners = {POLICY_EXPERIMENT: run_policies_shard, FP4_EXPERIMENT: run_fp4_shard,
               DECODE_EXPERIMENT: run_decode_shard, DYNAMIC_EXPERIMENT: run_dynamic_shard}
    run = runners.get(spec["experiment"], run_sweep_shard)
    run(spec, sm.input[0], sm.output.rows, sm.output.timing, threads=sm.threads, n_shards=shards)
