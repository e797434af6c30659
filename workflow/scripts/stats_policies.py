"""Rule stats_policies: what each deployed P policy loses per Δ, measured next to the theory."""

import pandas as pd

from pcast.analysis import stats
from pcast.analysis.summaries import write_csv
from pcast.pipeline.logs import rule_log

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    tidy = pd.read_csv(snakemake.input.tidy)  # noqa: F821
    log.info("policies: %d rows, %d policies, variants %s, sink kinds %s", len(tidy), tidy["policy"].nunique(),
             sorted(tidy["variant"].unique()), sorted(tidy["sink_kind"].unique()))
    out = stats.policies(tidy, snakemake.params.stats)  # noqa: F821
    curves = out.drop_duplicates(["policy", "variant", "sink_kind", "sink_v_scale"])
    log.info("%d curves; %d with a measured Δc", len(curves), int(curves["dc_meas"].notna().sum()))
    write_csv(out, snakemake.output.summary)  # noqa: F821
    log.info("wrote %d rows", len(out))
