"""T2 (rule table_scales): per S, bit-exactness, dp, coverage, saturation, measured MSE and underflow."""

import pandas as pd

from kernels import claims
from kernels.claims import setup_log

log = setup_log(snakemake.log[0])  # noqa: F821
scales = pd.read_csv(snakemake.input.scales)  # noqa: F821
display = claims.table_scales(scales)
caption = ("T2. The choice of S: bit-exact scaling, worst-case grid step dp(S), normal-range coverage (octaves), "
           "whether P = 1 saturates (S > 448); median MSE over seeds per Δ and sink value norm v, and the pooled "
           "non-sink underflow fraction per Δ.")
claims.write_table(display, scales, caption=caption, label="tab:scales", **dict(snakemake.output))  # noqa: F821
log.info("T2: %d rows", len(display))
