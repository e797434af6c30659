# Step 4: paired statistics from the tidy tables (results/stats/), one rule per summary. Each
# script calls one builder of pcast.analysis.stats with the `statistics:` section of config.yaml:
# stats_collapse -> stats.collapse, stats_paired -> stats.paired, stats_scales -> stats.scales,
# stats_threshold -> stats.threshold, stats_policies -> stats.policies, stats_fp4 -> stats.fp4,
# stats_decode -> stats.decode, stats_dynamic -> stats.dynamic (beyond the paper: read by F14 and the findings
# of figures/claims.md, by no claim).
# Figures, tables and the verdict read these files.


rule stats_collapse:
    input:
        tidy=TIDY.format("collapse"),
    output:
        summary=f"{STATS_DIR}/collapse.csv",
    log:
        f"{ANALYSIS_LOGS}/stats_collapse.log",
    benchmark:
        f"{ANALYSIS_BENCH}/stats_collapse.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    resources:
        **fixed_resources("stats_collapse"),
    params:
        code=library_code("stats_collapse"),
        stats=registry.statistics_reads("collapse", STATS_CFG),
    script:
        "../scripts/stats_collapse.py"


rule stats_paired:
    input:
        tidy=TIDY.format("collapse"),
    output:
        paired=f"{STATS_DIR}/paired.csv",
        knees=f"{STATS_DIR}/knees.csv",
    log:
        f"{ANALYSIS_LOGS}/stats_paired.log",
    benchmark:
        f"{ANALYSIS_BENCH}/stats_paired.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    resources:
        **fixed_resources("stats_paired"),
    params:
        code=library_code("stats_paired"),
        stats=registry.statistics_reads("paired", STATS_CFG),
    script:
        "../scripts/stats_paired.py"


rule stats_scales:
    input:
        tidy=TIDY.format("scales"),
    output:
        summary=f"{STATS_DIR}/scales.csv",
    log:
        f"{ANALYSIS_LOGS}/stats_scales.log",
    benchmark:
        f"{ANALYSIS_BENCH}/stats_scales.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    resources:
        **fixed_resources("stats_scales"),
    params:
        code=library_code("stats_scales"),
        stats=registry.statistics_reads("scales", STATS_CFG),
    script:
        "../scripts/stats_scales.py"


rule stats_threshold:
    input:
        tidy=TIDY.format("threshold"),
    output:
        summary=f"{STATS_DIR}/threshold.csv",
    log:
        f"{ANALYSIS_LOGS}/stats_threshold.log",
    benchmark:
        f"{ANALYSIS_BENCH}/stats_threshold.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    resources:
        **fixed_resources("stats_threshold"),
    params:
        code=library_code("stats_threshold"),
        stats=registry.statistics_reads("threshold", STATS_CFG),
    script:
        "../scripts/stats_threshold.py"


rule stats_policies:
    input:
        tidy=POLICY_TIDY,
    output:
        summary=f"{STATS_DIR}/policies.csv",
    log:
        f"{ANALYSIS_LOGS}/stats_policies.log",
    benchmark:
        f"{ANALYSIS_BENCH}/stats_policies.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    resources:
        **fixed_resources("stats_policies"),
    params:
        code=library_code("stats_policies"),
        stats=registry.statistics_reads("policies", STATS_CFG),
    script:
        "../scripts/stats_policies.py"


rule stats_fp4:
    input:
        tidy=FP4_TIDY,
    output:
        summary=f"{STATS_DIR}/fp4.csv",
    log:
        f"{ANALYSIS_LOGS}/stats_fp4.log",
    benchmark:
        f"{ANALYSIS_BENCH}/stats_fp4.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    resources:
        **fixed_resources("stats_fp4"),
    params:
        code=library_code("stats_fp4"),
        stats=registry.statistics_reads("fp4", STATS_CFG),
    script:
        "../scripts/stats_fp4.py"


rule stats_decode:
    input:
        tidy=DECODE_TIDY,
    output:
        curves=f"{STATS_DIR}/decode_curves.csv",
        summary=f"{STATS_DIR}/decode.csv",
        partition=f"{STATS_DIR}/decode_partition.csv",
    log:
        f"{ANALYSIS_LOGS}/stats_decode.log",
    benchmark:
        f"{ANALYSIS_BENCH}/stats_decode.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    resources:
        **fixed_resources("stats_decode"),
    params:
        code=library_code("stats_decode"),
        stats=registry.statistics_reads("decode", STATS_CFG),
    script:
        "../scripts/stats_decode.py"


rule stats_dynamic:
    input:
        tidy=DYNAMIC_TIDY,
    output:
        summary=f"{STATS_DIR}/dynamic.csv",
    log:
        f"{ANALYSIS_LOGS}/stats_dynamic.log",
    benchmark:
        f"{ANALYSIS_BENCH}/stats_dynamic.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    resources:
        **fixed_resources("stats_dynamic"),
    params:
        code=library_code("stats_dynamic"),
        stats=registry.statistics_reads("dynamic", STATS_CFG),
    script:
        "../scripts/stats_dynamic.py"


rule stats_realmodel:
    input:
        heads=expand(rules.realmodel_heads.output.rows, layer=REALMODEL_LAYERS),
        outputs=rules.realmodel_outputs.output.outputs,
        pairs=rules.realmodel_outputs.output.pairs,
    output:
        heads=f"{STATS_DIR}/realmodel_heads.csv",
        outputs=f"{STATS_DIR}/realmodel_outputs.csv",
    log:
        f"{ANALYSIS_LOGS}/stats_realmodel.log",
    benchmark:
        f"{ANALYSIS_BENCH}/stats_realmodel.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    resources:
        **fixed_resources("stats_realmodel"),
    params:
        code=library_code("stats_realmodel"),
    script:
        "../scripts/stats_realmodel.py"
