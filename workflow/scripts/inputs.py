"""Rule inputs: store the Δ-free base tensors of one shard (pcast.pipeline.inputs.write_inputs)."""

import json

from pcast.pipeline.inputs import write_inputs
from pcast.pipeline.logs import rule_log

sm = snakemake  # noqa: F821 (injected by the script directive)
with rule_log(sm) as log:
    write_inputs(json.loads(sm.params.spec), sm.output[0])
