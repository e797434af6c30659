"""T10 (rule table_deployed): deployed kernels' own code fingerprinted and measured on the real model's heads."""

from pathlib import Path

import pandas as pd
import torch
from safetensors.numpy import load_file

from pcast.analysis import tables
from pcast.pipeline.deployed import T10_COLUMNS, t10_rows
from pcast.pipeline.logs import rule_log

CAPTION = ("T10, deployed kernels' own code. Per kernel (release, file, function): the policy its fingerprint "
           "names on the small probe set and the probe rows outside its preset; on one layer of the real model's "
           "heads, the rows outside the tolerance between the kernel and its preset's prediction, and both "
           "relative MSEs against the float64 reference.")
DISPLAY = ("kernel", "release", "function", "preset", "fingerprint", "probe_rows_outside", "real_rows_outside",
           "rel_mse_measured", "rel_mse_predicted", "status", "reason")

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    out, spec = snakemake.output, dict(snakemake.params.spec)  # noqa: F821
    torch.set_num_threads(1)
    rows = t10_rows(load_file(snakemake.input.tensors), layer=int(spec["layer"]), heads=int(spec["heads"]),  # noqa: F821
                    rows=int(spec["rows"]))
    df = pd.DataFrame(rows, columns=T10_COLUMNS)
    df.to_csv(out.csv, index=False)
    display = df[list(DISPLAY)]
    Path(out.md).write_text(tables.to_markdown(display, caption=CAPTION), encoding="utf-8")
    Path(out.tex).write_text(tables.to_booktabs(display, caption=CAPTION, label="tab:deployed",
                                                align="lllllrrrrll"), encoding="utf-8")
    log.info("T10: %s", {r["kernel"]: (r["status"], r.get("seconds")) for r in rows})
