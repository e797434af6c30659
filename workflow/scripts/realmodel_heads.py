"""Rule realmodel_heads: every head of one layer under every combination, policy and the shuffled control."""

import json

import torch

from pcast.pipeline.logs import progress, rule_log
from pcast.pipeline.realmodel_runs import layer_names, load_captured, run_layer, write_layer

sm = snakemake  # noqa: F821 (injected by the script directive)
with rule_log(sm) as log:
    spec = json.loads(sm.params.spec)
    torch.set_num_threads(max(1, int(sm.threads)))  # one core per job: jobs run side by side
    layer = int(sm.wildcards.layer)
    tensors, meta = load_captured(sm.input.tensors, layer_names(layer))  # this layer's q, k, v only
    rows = run_layer(tensors, meta, layer, spec, spec["resolved_policies"], backend=spec["backend"])
    write_layer(rows, sm.output.rows)
    progress(f"realmodel heads: layer {layer}: {len(rows)} rows ({rows[0]['backend'] if rows else 'none'})")
