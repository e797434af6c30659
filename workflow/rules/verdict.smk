# Step 7: the claims verdict, PASS / PARTIAL / FAIL / INCONCLUSIVE per claim with the numbers
# behind it (figures/claims.md and claims.json), by pcast.analysis.verdicts.evaluate from the
# statistics and the `claims:` section of config.yaml, the audit of deployed P policies included
# (claims.audit), the real-model section (claims.realmodel), the FP4 section (claims.fp4), the tensor-core section
# (claims.tensorcore), the decode section (claims.decode), the reported cases (table T9) and the deployed
# kernels' own code (table T10); and the findings beyond the paper (claims.json's `findings`: the dynamic
# experiment, which no verdict reads):
# `snakemake --cores 2 claims`.
# claims.md also shows the preset's expected verdicts (presets.<name>.expected_verdicts) beside this run's.


rule claims:
    input:
        collapse=rules.stats_collapse.output.summary,
        tidy_collapse=TIDY.format("collapse"),
        paired=rules.stats_paired.output.paired,
        knees=rules.stats_paired.output.knees,
        scales=rules.stats_scales.output.summary,
        thresholds=rules.stats_threshold.output.summary,
        conformance=TIDY.format("conformance"),
        policies=rules.stats_policies.output.summary,
        realmodel=rules.stats_realmodel.output.heads,
        realmodel_outputs=rules.stats_realmodel.output.outputs,
        realmodel_tensors=rules.realmodel_capture.output.tensors,
        fp4=rules.stats_fp4.output.summary,
        cases=rules.table_cases.output.csv,
        deployed=rules.table_deployed.output.csv,
        tensorcore=rules.tensorcore.output.summary,
        tensorcore_check=rules.tensorcore.output.check,
        decode=rules.stats_decode.output.summary,
        decode_partition=rules.stats_decode.output.partition,
        dynamic=rules.stats_dynamic.output.summary,
    output:
        **verdict_outputs(),
    log:
        f"{ANALYSIS_LOGS}/claims.log",
    benchmark:
        f"{ANALYSIS_BENCH}/claims.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("claims"),
        claims=CRITERIA,
        confidence_level=float(config["statistics"]["confidence_level"]),
        statistics=STATS_CFG,
        defaults=ANALYSIS_DEFAULTS,
        preset=config["preset"],
        expected=config["presets"][config["preset"]].get("expected_verdicts", {}),
    script:
        "../scripts/claims.py"
