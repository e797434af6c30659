"""T4 (rule table_conformance): Triton kernel vs emulator per combination, causal and shape."""

import pandas as pd

from kernels import claims
from kernels.claims import setup_log

log = setup_log(snakemake.log[0])  # noqa: F821
conf = pd.read_csv(snakemake.input.conformance)  # noqa: F821
display = claims.table_conformance(conf)
caption = ("T4. Conformance: the Triton kernel against the emulator on identical inputs, aggregated over seeds: "
           "max |Δout| and relative difference of outputs, rows whose five diagnostics agree, and whether every "
           "difference is explained by P values within fp32 score error of an FP8 rounding boundary.")
claims.write_table(display, conf, caption=caption, label="tab:conformance", **dict(snakemake.output))  # noqa: F821
log.info("T4: %d rows", len(display))
