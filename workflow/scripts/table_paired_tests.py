"""T1 (rule table_paired_tests): paired tests per Δ and pair; CSV has every row, LaTeX/Markdown the
config's Δ subset."""

import pandas as pd

from kernels import claims
from kernels.claims import setup_log

log = setup_log(snakemake.log[0])  # noqa: F821
p = snakemake.params  # noqa: F821
paired = pd.read_csv(snakemake.input.paired)  # noqa: F821
display = claims.table_paired(paired, p.deltas)
caption = (f"T1. Paired tests of per-seed MSE (ratio a/b, paired by seed), at Δ ∈ {{{', '.join(f'{d:g}' for d in p.deltas)}}} "
           f"(every Δ in the CSV). Median ratio with paired-bootstrap {p.confidence:g} CI; Wilcoxon signed-rank "
           f"p (exact where n allows); paired t-test on log MSE; Holm over all {len(paired)} rows; TOST on log MSE "
           f"with margin ±ln(1 + {p.margin:g}), equivalent if Holm-adjusted p < {p.alpha:g}.")
claims.write_table(display, paired, caption=caption, label="tab:paired-tests", **dict(snakemake.output))  # noqa: F821
log.info("T1: %d rows shown, %d in the CSV", len(display), len(paired))
