"""Rule claims: the verdict per claim (figures/claims.md and figures/claims.json), from the data, and the findings
beyond the paper (claims.json's ``findings``; no verdict reads them)."""

import json
from pathlib import Path

import pandas as pd
from safetensors.numpy import load_file

from pcast.analysis import verdicts
from pcast.analysis.dynamic import dynamic_finding
from pcast.pipeline.logs import rule_log

with rule_log(snakemake) as log:  # noqa: F821 (snakemake is injected by the script directive)
    inp, out, params = snakemake.input, snakemake.output, snakemake.params  # noqa: F821
    result = verdicts.evaluate(
        collapse=pd.read_csv(inp.collapse), paired=pd.read_csv(inp.paired),
        scales=pd.read_csv(inp.scales), thresholds=pd.read_csv(inp.thresholds),
        knees=pd.read_csv(inp.knees), conformance=pd.read_csv(inp.conformance),
        claims_cfg=params.claims, policies=pd.read_csv(inp.policies),
        realmodel=pd.read_csv(inp.realmodel, dtype={"sinks": str}),
        realmodel_outputs=pd.read_csv(inp.realmodel_outputs), fp4=pd.read_csv(inp.fp4),
        cases=pd.read_csv(inp.cases, dtype=str, keep_default_na=False),
        deployed=pd.read_csv(inp.deployed, dtype=str, keep_default_na=False),
        decode=pd.read_csv(inp.decode), decode_partition=pd.read_csv(inp.decode_partition),
        confidence_level=params.confidence_level, tidy_collapse=pd.read_csv(inp.tidy_collapse),
        stats_cfg=dict(params.statistics), realmodel_tensors=load_file(inp.realmodel_tensors),
        tensorcore=(pd.read_csv(inp.tensorcore), json.loads(Path(inp.tensorcore_check).read_text())),
        defaults=dict(params.defaults),
    )
    for key, r in result.items():
        log.info("%s: %s", key, r["verdict"])
    findings = {"dynamic": dynamic_finding(pd.read_csv(inp.dynamic), reference=str(params.statistics["reference"]),
                                           confidence=params.confidence_level)}
    log.info("findings: %s", ", ".join(findings))
    expected = dict(params.expected)
    # the verdicts are computed: claims.json first, then claims.md, which never fails the job (a failed job's
    # outputs are deleted): a rendering error leaves the verdict table and the error in its place
    Path(out.json).write_text(verdicts.to_json({"preset": params.preset, "claims": result, "expected": expected,
                                                "findings": findings}), encoding="utf-8")
    try:
        md = verdicts.render_markdown(result, preset=params.preset, expected=expected, findings=findings)
    except Exception as e:  # noqa: BLE001 - any rendering error: the verdicts are still written
        log.exception("claims.md could not be rendered in full; writing the verdict table")
        md = verdicts.verdict_table(result, error=e)
    Path(out.md).write_text(md, encoding="utf-8")
