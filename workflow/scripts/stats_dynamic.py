"""Rule stats_dynamic: dynamic P scales beside static S per cast, order and Δ, next to pcast.theory.dynamic
(beyond the paper: read by F14 and the findings, by no claim)."""

import pandas as pd

from pcast.analysis import stats
from pcast.analysis.summaries import write_csv
from pcast.pipeline.logs import rule_log

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    tidy = pd.read_csv(snakemake.input.tidy)  # noqa: F821
    log.info("dynamic: %d rows, casts %s, orders %s", len(tidy), sorted(tidy["cast"].unique()),
             sorted(tidy["order"].unique()))
    out = stats.dynamic(tidy, snakemake.params.stats)  # noqa: F821
    top = out[out["delta"] == out["delta"].max()]
    for r in top.itertuples():
        log.info("%s %s at Δ = %g: underflow %.4g (theory %.4g), MSE / reference %.4g [%.4g, %.4g]", r.order,
                 r.cast, r.delta, r.underflow_frac_mean, r.pred_underflow, r.ref_ratio, r.ref_ratio_lo,
                 r.ref_ratio_hi)
    write_csv(out, snakemake.output.summary)  # noqa: F821
    log.info("wrote %d rows", len(out))
