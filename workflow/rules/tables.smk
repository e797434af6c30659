# Step 6: the tables T1-T9 (figures/table_*.{csv,tex,md}), one rule each. Each script
# writes pcast.analysis.tables.<builder>(...) with tables.write: the CSV holds every number,
# LaTeX (booktabs) and Markdown the display.


rule table_paired_tests:
    input:
        paired=rules.stats_paired.output.paired,
    output:
        **table_outputs("table_paired_tests"),
    log:
        f"{ANALYSIS_LOGS}/table_paired_tests.log",
    benchmark:
        f"{ANALYSIS_BENCH}/table_paired_tests.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("table_paired_tests"),
        stats=registry.statistics_reads("table_paired_tests", STATS_CFG),
    script:
        "../scripts/table_paired_tests.py"


rule table_scales:
    input:
        scales=rules.stats_scales.output.summary,
    output:
        **table_outputs("table_scales"),
    log:
        f"{ANALYSIS_LOGS}/table_scales.log",
    benchmark:
        f"{ANALYSIS_BENCH}/table_scales.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("table_scales"),
    script:
        "../scripts/table_scales.py"


rule table_thresholds:
    input:
        thresholds=rules.stats_threshold.output.summary,
        knees=rules.stats_paired.output.knees,
    output:
        **table_outputs("table_thresholds"),
    log:
        f"{ANALYSIS_LOGS}/table_thresholds.log",
    benchmark:
        f"{ANALYSIS_BENCH}/table_thresholds.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("table_thresholds"),
        level=float(STATS_CFG["confidence_level"]),
    script:
        "../scripts/table_thresholds.py"


rule table_conformance:
    input:
        conformance=TIDY.format("conformance"),
    output:
        **table_outputs("table_conformance"),
    log:
        f"{ANALYSIS_LOGS}/table_conformance.log",
    benchmark:
        f"{ANALYSIS_BENCH}/table_conformance.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("table_conformance"),
    script:
        "../scripts/table_conformance.py"


rule table_policies:
    input:
        policies=rules.stats_policies.output.summary,
    output:
        **table_outputs("table_policies"),
    log:
        f"{ANALYSIS_LOGS}/table_policies.log",
    benchmark:
        f"{ANALYSIS_BENCH}/table_policies.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("table_policies"),
        stats=registry.statistics_reads("table_policies", STATS_CFG),
        audit=CRITERIA["audit"],
    script:
        "../scripts/table_policies.py"


rule table_realmodel:
    input:
        heads=rules.stats_realmodel.output.heads,
    output:
        **table_outputs("table_realmodel"),
    log:
        f"{ANALYSIS_LOGS}/table_realmodel.log",
    benchmark:
        f"{ANALYSIS_BENCH}/table_realmodel.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("table_realmodel"),
        realmodel=CRITERIA["realmodel"],
    script:
        "../scripts/table_realmodel.py"


rule table_fp4:
    input:
        fp4=rules.stats_fp4.output.summary,
    output:
        **table_outputs("table_fp4"),
    log:
        f"{ANALYSIS_LOGS}/table_fp4.log",
    benchmark:
        f"{ANALYSIS_BENCH}/table_fp4.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("table_fp4"),
        stats=registry.statistics_reads("table_fp4", STATS_CFG),
        fp4=CRITERIA["fp4"],
    script:
        "../scripts/table_fp4.py"


rule table_cases:
    output:
        **table_outputs("table_cases"),
    log:
        f"{ANALYSIS_LOGS}/table_cases.log",
    benchmark:
        f"{ANALYSIS_BENCH}/table_cases.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("table_cases"),
    script:
        "../scripts/table_cases.py"


rule table_deployed:
    input:
        tensors=rules.realmodel_capture.output.tensors,
    output:
        **table_outputs("table_deployed"),
    log:
        f"{ANALYSIS_LOGS}/table_deployed.log",
    benchmark:
        f"{ANALYSIS_BENCH}/table_deployed.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    resources:
        **fixed_resources("table_deployed"),
    params:
        code=library_code("table_deployed"),
        spec=config["experiments"]["deployed"],
        fetched=deployed_fetched(),
    script:
        "../scripts/table_deployed.py"


rule table_decode:
    input:
        summary=rules.stats_decode.output.summary,
        curves=rules.stats_decode.output.curves,
        partition=rules.stats_decode.output.partition,
    output:
        **table_outputs("table_decode"),
    log:
        f"{ANALYSIS_LOGS}/table_decode.log",
    benchmark:
        f"{ANALYSIS_BENCH}/table_decode.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("table_decode"),
        stats=registry.statistics_reads("table_decode", STATS_CFG),
        decode=CRITERIA["decode"],
    script:
        "../scripts/table_decode.py"
