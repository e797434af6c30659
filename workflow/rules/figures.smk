# Step 5: the paper's figures F1-F13 and F14 beyond the paper (figures/fig_*.{pdf,png,csv}), one rule each, e.g.
# `snakemake --cores 2 fig_collapse`. Each script calls pcast.analysis.plots.fig_<name> on the
# statistics it reads; the params are that function's keyword arguments, taken from config.yaml.


rule fig_theory_scale:
    input:
        scales=rules.stats_scales.output.summary,
    output:
        **figure_outputs("fig_theory_scale"),
    log:
        f"{ANALYSIS_LOGS}/fig_theory_scale.log",
    benchmark:
        f"{ANALYSIS_BENCH}/fig_theory_scale.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("fig_theory_scale"),
        fmt=EXPERIMENT_CFG["scales"].get("fmt", "e4m3fn"),
        highlight=CRITERIA["C3"]["scale"],
        compare=CRITERIA["C3"]["compare_scale"],
    script:
        "../scripts/fig_theory_scale.py"


rule fig_collapse:
    input:
        collapse=rules.stats_collapse.output.summary,
    output:
        **figure_outputs("fig_collapse"),
    log:
        f"{ANALYSIS_LOGS}/fig_collapse.log",
    benchmark:
        f"{ANALYSIS_BENCH}/fig_collapse.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("fig_collapse"),
        allowance=float(CRITERIA["C1"]["allowance"]),
    script:
        "../scripts/fig_collapse.py"


rule fig_mse:
    input:
        collapse=rules.stats_collapse.output.summary,
        paired=rules.stats_paired.output.paired,
    output:
        **figure_outputs("fig_mse"),
    log:
        f"{ANALYSIS_LOGS}/fig_mse.log",
    benchmark:
        f"{ANALYSIS_BENCH}/fig_mse.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("fig_mse"),
        baseline=STATS_CFG["baseline"],
        reference=STATS_CFG["reference"],
        band=CRITERIA["C5"]["band"],
    script:
        "../scripts/fig_mse.py"


rule fig_improvement:
    input:
        paired=rules.stats_paired.output.paired,
        scales=rules.stats_scales.output.summary,
        collapse=rules.stats_collapse.output.summary,
    output:
        **figure_outputs("fig_improvement"),
    log:
        f"{ANALYSIS_LOGS}/fig_improvement.log",
    benchmark:
        f"{ANALYSIS_BENCH}/fig_improvement.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("fig_improvement"),
        baseline=STATS_CFG["baseline"],
        fixes=STATS_CFG["fixes"],
        band=CRITERIA["C5"]["band"],
        moderate=CRITERIA["C5"]["moderate"],
    script:
        "../scripts/fig_improvement.py"


rule fig_threshold:
    input:
        thresholds=rules.stats_threshold.output.summary,
        knees=rules.stats_paired.output.knees,
    output:
        **figure_outputs("fig_threshold"),
    log:
        f"{ANALYSIS_LOGS}/fig_threshold.log",
    benchmark:
        f"{ANALYSIS_BENCH}/fig_threshold.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("fig_threshold"),
        level=float(STATS_CFG["confidence_level"]),
        onset_fraction=float(CRITERIA["C4"]["knee_onset_fraction"]),
    script:
        "../scripts/fig_threshold.py"


rule fig_conformance:
    input:
        conformance=TIDY.format("conformance"),
    output:
        **figure_outputs("fig_conformance"),
    log:
        f"{ANALYSIS_LOGS}/fig_conformance.log",
    benchmark:
        f"{ANALYSIS_BENCH}/fig_conformance.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("fig_conformance"),
    script:
        "../scripts/fig_conformance.py"


rule fig_policies:
    input:
        policies=rules.stats_policies.output.summary,
    output:
        **figure_outputs("fig_policies"),
    log:
        f"{ANALYSIS_LOGS}/fig_policies.log",
    benchmark:
        f"{ANALYSIS_BENCH}/fig_policies.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("fig_policies"),
        variant=CRITERIA["audit"]["variant"],
        floor_variant=CRITERIA["audit"]["floor_variant"],
    script:
        "../scripts/fig_policies.py"


rule fig_realmodel_heads:
    input:
        summary=rules.stats_realmodel.output.heads,
    output:
        **figure_outputs("fig_realmodel_heads"),
    log:
        f"{ANALYSIS_LOGS}/fig_realmodel_heads.log",
    benchmark:
        f"{ANALYSIS_BENCH}/fig_realmodel_heads.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("fig_realmodel_heads"),
    script:
        "../scripts/fig_realmodel_heads.py"


rule fig_realmodel_theory:
    input:
        summary=rules.stats_realmodel.output.heads,
    output:
        **figure_outputs("fig_realmodel_theory"),
    log:
        f"{ANALYSIS_LOGS}/fig_realmodel_theory.log",
    benchmark:
        f"{ANALYSIS_BENCH}/fig_realmodel_theory.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("fig_realmodel_theory"),
    script:
        "../scripts/fig_realmodel_theory.py"


rule fig_realmodel_outputs:
    input:
        outputs=rules.realmodel_outputs.output.outputs,
    output:
        **figure_outputs("fig_realmodel_outputs"),
    log:
        f"{ANALYSIS_LOGS}/fig_realmodel_outputs.log",
    benchmark:
        f"{ANALYSIS_BENCH}/fig_realmodel_outputs.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("fig_realmodel_outputs"),
    script:
        "../scripts/fig_realmodel_outputs.py"


rule fig_fp4:
    input:
        fp4=rules.stats_fp4.output.summary,
    output:
        **figure_outputs("fig_fp4"),
    log:
        f"{ANALYSIS_LOGS}/fig_fp4.log",
    benchmark:
        f"{ANALYSIS_BENCH}/fig_fp4.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("fig_fp4"),
    script:
        "../scripts/fig_fp4.py"


rule fig_decode:
    input:
        curves=rules.stats_decode.output.curves,
        partition=rules.stats_decode.output.partition,
    output:
        **figure_outputs("fig_decode"),
    log:
        f"{ANALYSIS_LOGS}/fig_decode.log",
    benchmark:
        f"{ANALYSIS_BENCH}/fig_decode.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("fig_decode"),
    script:
        "../scripts/fig_decode.py"


rule fig_dynamic:
    input:
        dynamic=rules.stats_dynamic.output.summary,
    output:
        **figure_outputs("fig_dynamic"),
    log:
        f"{ANALYSIS_LOGS}/fig_dynamic.log",
    benchmark:
        f"{ANALYSIS_BENCH}/fig_dynamic.tsv"
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("fig_dynamic"),
    script:
        "../scripts/fig_dynamic.py"
