"""Rule realmodel_capture: the model's files and passage sources checked against their expected sha256, then
passages, Q, K, V of every layer and the exact embeddings (or the user's tensors)."""

import json

import torch

from pcast.pipeline.logs import rule_log
from pcast.pipeline.realmodel_runs import run_capture

sm = snakemake  # noqa: F821 (injected by the script directive)
with rule_log(sm) as log:
    spec = json.loads(sm.params.spec)
    torch.set_num_threads(max(1, int(sm.threads)))  # one core per job: jobs run side by side
    meta = run_capture(spec, tensors_out=sm.output.tensors, meta_out=sm.output.passages)
    if meta["model_sha256"]:  # checked against the expected value before the capture
        log.info("model %s (%s) weights sha256 %s", meta["model"], meta["revision"], meta["model_sha256"])
    for p in meta["passages"]:
        log.info("passage %s sha256 %s tokens %s", p["source"], p["sha256"], p["tokens"])
