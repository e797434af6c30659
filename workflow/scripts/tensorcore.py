"""Rule tensorcore: the tensorcore experiment's runs (tidy), its summary and the mmasim check."""

import json
from pathlib import Path

import torch

from pcast.analysis.summaries import write_csv
from pcast.analysis.tensorcore import tensorcore_summary
from pcast.pipeline.logs import rule_log
from pcast.pipeline.tensorcore_runs import run_tensorcore

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    out = snakemake.output  # noqa: F821
    torch.set_num_threads(max(1, int(snakemake.threads)))  # noqa: F821 (one core per job: jobs run side by side)
    tidy, check = run_tensorcore(snakemake.params.experiment, log)  # noqa: F821
    Path(out.tidy).parent.mkdir(parents=True, exist_ok=True)
    write_csv(tidy, out.tidy)
    summary = tensorcore_summary(tidy)
    write_csv(summary, out.summary)
    Path(out.check).write_text(json.dumps(check, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    log.info("tensorcore: %d runs; check %s", len(tidy), json.dumps(check, sort_keys=True))
