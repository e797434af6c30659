"""Rule realmodel_outputs: the whole model with pcast.attention in every layer, per combination and policy."""

import json

import torch

from pcast.host.files import atomic_write_text
from pcast.pipeline.logs import rule_log
from pcast.pipeline.realmodel_runs import (
    OUTPUT_COLUMNS, OUTPUT_INPUTS, PAIR_COLUMNS, load_captured, run_outputs,
)
from pcast.pipeline.tables import csv_text

sm = snakemake  # noqa: F821 (injected by the script directive)
with rule_log(sm) as log:
    spec = json.loads(sm.params.spec)
    torch.set_num_threads(max(1, int(sm.threads)))  # one core per job: jobs run side by side
    tensors, meta = load_captured(sm.input.tensors, OUTPUT_INPUTS)  # not the layers' q, k, v
    out, pairs = run_outputs(tensors, meta, spec, spec["resolved_policies"], backend=spec["backend"])
    atomic_write_text(sm.output.outputs, csv_text(OUTPUT_COLUMNS, out))
    atomic_write_text(sm.output.pairs, csv_text(PAIR_COLUMNS, pairs))
    log.info("%d output rows, %d pair rows", len(out), len(pairs))
