"""Rule stats_paired: the T1 family of paired tests (collapse) and the MSE knees derived from it."""

import pandas as pd

from kernels import stats
from kernels.claims import setup_log

log = setup_log(snakemake.log[0])  # noqa: F821
cfg = snakemake.params.stats  # noqa: F821
tidy = pd.read_csv(snakemake.input.tidy)  # noqa: F821
pairs = [tuple(p) for p in cfg["pairs"]]
log.info("collapse: %d rows; pairs %s; TOST margin %s", len(tidy), pairs, cfg["tost_margin"])
paired = stats.paired_tests(
    tidy, pairs, margin=float(cfg["tost_margin"]), alpha=float(cfg["alpha"]),
    n_resamples=int(cfg["bootstrap_resamples"]), confidence_level=float(cfg["confidence_level"]),
    boot_method=cfg["bootstrap_method"], seed=int(cfg["seed"]),
)
for note, n in paired["note"].fillna("").value_counts().items():
    if note:
        log.warning("%d rows: %s", n, note)
log.info("Wilcoxon methods used: %s", paired["wilcoxon_method"].value_counts().to_dict())
knees = stats.knee_summary(paired, reference=cfg["reference"], factor=float(cfg["knee_factor"]))
stats.write_csv(paired, snakemake.output.paired)  # noqa: F821
stats.write_csv(knees, snakemake.output.knees)  # noqa: F821
log.info("wrote %d paired rows and %d knee rows", len(paired), len(knees))
