"""T3 (rule table_thresholds): δk, predicted and measured Δc with CI, difference, MSE knee."""

import pandas as pd

from kernels import claims
from kernels.claims import setup_log

log = setup_log(snakemake.log[0])  # noqa: F821
tol = float(snakemake.params.tolerance)  # noqa: F821
thr = pd.read_csv(snakemake.input.thresholds)  # noqa: F821
knees = pd.read_csv(snakemake.input.knees)  # noqa: F821
display = claims.table_thresholds(thr, knees, tol)
caption = ("T3. Critical sink strength: δk = E[max of ksink N(0,1)], predicted Δc = 6.93 + ln S − δk, the exact "
           "model's crossing, and the measured Δc where the seed-mean underflow fraction crosses 1/2 (linear "
           f"interpolation on the Δ grid, bootstrap-over-seeds CI); C4 asks |difference| ≤ {tol:g}. MSE knee: the "
           "first Δ where MSE(forward S) ≥ 2× MSE(reverse S=256) in the collapse experiment (ksink = 4).")
claims.write_table(display, thr, caption=caption, label="tab:thresholds", **dict(snakemake.output))  # noqa: F821
log.info("T3: %d rows", len(display))
