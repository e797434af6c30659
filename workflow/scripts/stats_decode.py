"""Rule stats_decode: decode rows under splits and partition-normalised P, measured next to pcast.theory.decode."""

import pandas as pd

from pcast.analysis import stats
from pcast.analysis.summaries import write_csv
from pcast.pipeline.logs import rule_log

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    tidy = pd.read_csv(snakemake.input.tidy)  # noqa: F821
    log.info("decode: %d rows, kinds %s", len(tidy), sorted(tidy["kind"].unique()))
    curves, crossings, partition = stats.decode(tidy, snakemake.params.stats)  # noqa: F821
    for r in crossings.itertuples():
        log.info("%s %d %s %s %s S=%g: measured %s %.4g, theory %s %.4g", r.kind, r.num_splits, r.split_layout,
                 r.order, r.p_normalize, r.scale, r.status_meas, r.dc_meas, r.status_pred, r.dc_pred)
    write_csv(curves, snakemake.output.curves)  # noqa: F821
    write_csv(crossings, snakemake.output.summary)  # noqa: F821
    write_csv(partition, snakemake.output.partition)  # noqa: F821
    log.info("wrote %d curve rows, %d configurations, %d partition rows", len(curves), len(crossings), len(partition))
