"""Rule claims: the verdict per claim (figures/claims.md and figures/claims.json), from the data."""

from pathlib import Path

import pandas as pd

from kernels import claims
from kernels.claims import setup_log

log = setup_log(snakemake.log[0])  # noqa: F821
inp = snakemake.input  # noqa: F821
result = claims.evaluate(
    collapse=pd.read_csv(inp.collapse), paired=pd.read_csv(inp.paired),
    scales=pd.read_csv(inp.scales), thresholds=pd.read_csv(inp.thresholds),
    knees=pd.read_csv(inp.knees), conformance=pd.read_csv(inp.conformance),
    claims_cfg=snakemake.params.claims,  # noqa: F821
)
for key, r in result.items():
    log.info("%s: %s", key, r["verdict"])
out = snakemake.output  # noqa: F821
Path(out.md).write_text(claims.render_markdown(result, preset=snakemake.params.preset),  # noqa: F821
                        encoding="utf-8")
Path(out.json).write_text(claims.to_json({"preset": snakemake.params.preset,  # noqa: F821
                                          "claims": result}), encoding="utf-8")
