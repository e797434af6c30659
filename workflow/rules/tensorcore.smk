# 2c. The tensorcore experiment: step 5 on an FP8 tensor core (mmasim's model of Hopper's wgmma and
# Blackwell's tcgen05.mma, checked against mmasim itself) against float32 P·V, by S and order over Δ
# (pcast.pipeline.tensorcore_runs). Without mmasim it writes empty tables and claims.md says so.


rule tensorcore:
    output:
        tidy=TIDY.format("tensorcore"),
        summary=f"{STATS_DIR}/tensorcore.csv",
        check=f"{STATS_DIR}/tensorcore_check.json",
    log:
        f"{ANALYSIS_LOGS}/tensorcore.log",
    benchmark:
        f"{ANALYSIS_BENCH}/tensorcore.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    resources:
        **fixed_resources("tensorcore"),
    params:
        code=library_code("tensorcore"),
        experiment=EXPERIMENT_CFG["tensorcore"],
    script:
        "../scripts/tensorcore.py"


rule fig_tensorcore:
    input:
        tensorcore=rules.tensorcore.output.summary,
    output:
        **figure_outputs("fig_tensorcore"),
    log:
        f"{ANALYSIS_LOGS}/fig_tensorcore.log",
    benchmark:
        f"{ANALYSIS_BENCH}/fig_tensorcore.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("fig_tensorcore"),
        max_share=float(CRITERIA["tensorcore"]["max_share"]),
    script:
        "../scripts/fig_tensorcore.py"
