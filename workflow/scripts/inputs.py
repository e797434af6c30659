"""Rule inputs: store the Δ-free base tensors of one shard (kernels.pipeline.inputs.write_inputs)."""

import json

from kernels.pipeline.inputs import write_inputs
from kernels.pipeline.logs import rule_log

sm = snakemake  # noqa: F821 (injected by the script directive)
with rule_log(sm) as log:
    write_inputs(json.loads(sm.params.spec), sm.output[0])
