"""Rule stats_realmodel: per (layer, head, run) summaries of the real model, and per run its outputs."""

import pandas as pd

from pcast.analysis import realmodel
from pcast.analysis.summaries import write_csv
from pcast.pipeline.logs import rule_log

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    inp, out = snakemake.input, snakemake.output  # noqa: F821
    heads = pd.concat([pd.read_csv(p, dtype={"sinks": str})
                       for p in inp.heads], ignore_index=True)
    log.info("realmodel: %d rows, %d layers, %d runs", len(heads), heads["layer"].nunique(), heads["run"].nunique())
    summary = realmodel.head_summary(heads)
    write_csv(summary, out.heads)
    outputs = realmodel.output_summary(pd.read_csv(inp.outputs), pd.read_csv(inp.pairs))
    write_csv(outputs, out.outputs)
    log.info("wrote %d head rows, %d output rows", len(summary), len(outputs))
