"""Rule stats_fp4: P in microscaled FP4 per cast, order and Δ, measured next to pcast.theory.fp4."""

import pandas as pd

from pcast.analysis import stats
from pcast.analysis.summaries import write_csv
from pcast.pipeline.logs import rule_log

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    tidy = pd.read_csv(snakemake.input.tidy)  # noqa: F821
    log.info("fp4: %d rows, casts %s, orders %s", len(tidy), sorted(tidy["cast"].unique()),
             sorted(tidy["order"].unique()))
    out = stats.fp4(tidy, snakemake.params.stats)  # noqa: F821
    fwd = out[out["order"] == "forward"].drop_duplicates("cast")
    for r in fwd.itertuples():
        log.info("%s forward: group-flush Δc measured %.4g [%.4g, %.4g], closed form %.4g", r.cast, r.dc_meas,
                 r.dc_lo, r.dc_hi, r.dc_pred)
    write_csv(out, snakemake.output.summary)  # noqa: F821
    log.info("wrote %d rows", len(out))
