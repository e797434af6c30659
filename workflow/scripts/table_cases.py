"""T9 (rule table_cases): the public reports of FP8-P failures rebuilt, one row per number a report printed."""

from pathlib import Path

import pandas as pd
import torch

from pcast.analysis import tables
from pcast.cases import T9_COLUMNS, write_t9
from pcast.pipeline.logs import rule_log

CAPTION = ("T9, reported cases. Per number a public report printed: the report's value at its printed "
           "precision, the instrument's, and the status (PASS within half a unit of the last printed digit; "
           "PARTIAL or INCONCLUSIVE with the reason).")
DISPLAY = ("case", "number", "measured", "report", "instrument", "status", "reason")

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    out = snakemake.output  # noqa: F821
    torch.set_num_threads(1)
    rows = write_t9(out.csv, out.md)
    display = pd.DataFrame(rows, columns=T9_COLUMNS)[list(DISPLAY)]
    Path(out.tex).write_text(tables.to_booktabs(display, caption=CAPTION, label="tab:cases", align="lllrrll"),
                             encoding="utf-8")
    log.info("T9: %d rows, %s", len(rows), {s: int(n) for s, n in display["status"].value_counts().items()})
