# Statistics, figures, tables and the claims verdict (issue: the paper's claims rebuilt).
# Rules here read results/tidy/*.csv, keep intermediate statistics in results/stats/ and write
# the paper's outputs under figures/. Each figure and table is a named target whose inputs trace
# back only to the tidy tables it needs, e.g. `snakemake --cores 2 fig_collapse`.
# CLAIMS_TARGETS lists every final output; the Snakefile's `rule all` asks for it.


include: "claims_common.smk"


# ----------------------------------------------------------------------------- statistics


rule stats_underflow:
    input:
        tidy=TIDY.format("collapse"),
    output:
        summary=f"{STATS_DIR}/collapse_summary.csv",
    log:
        f"{CLAIMS_LOGS}/stats_underflow.log",
    benchmark:
        f"{CLAIMS_BENCH}/stats_underflow.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        stats=STATS,
    script:
        "../scripts/claims_stats_underflow.py"


rule stats_paired:
    input:
        tidy=TIDY.format("collapse"),
    output:
        paired=f"{STATS_DIR}/paired_tests.csv",
        knees=f"{STATS_DIR}/knees.csv",
    log:
        f"{CLAIMS_LOGS}/stats_paired.log",
    benchmark:
        f"{CLAIMS_BENCH}/stats_paired.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        stats=STATS,
    script:
        "../scripts/claims_stats_paired.py"


rule stats_scales:
    input:
        tidy=TIDY.format("scales"),
    output:
        summary=f"{STATS_DIR}/scales_summary.csv",
    log:
        f"{CLAIMS_LOGS}/stats_scales.log",
    benchmark:
        f"{CLAIMS_BENCH}/stats_scales.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        stats=STATS,
    script:
        "../scripts/claims_stats_scales.py"


rule stats_thresholds:
    input:
        tidy=TIDY.format("threshold"),
    output:
        summary=f"{STATS_DIR}/thresholds.csv",
    log:
        f"{CLAIMS_LOGS}/stats_thresholds.log",
    benchmark:
        f"{CLAIMS_BENCH}/stats_thresholds.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        stats=STATS,
    script:
        "../scripts/claims_stats_thresholds.py"


# ----------------------------------------------------------------------------- figures


rule fig_theory_scale:
    input:
        scales=f"{STATS_DIR}/scales_summary.csv",
    output:
        **figure_outputs("fig_theory_scale"),
    log:
        f"{CLAIMS_LOGS}/fig_theory_scale.log",
    benchmark:
        f"{CLAIMS_BENCH}/fig_theory_scale.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        fmt=config["experiments"]["scales"].get("fmt", "e4m3fn"),
        scale=CLAIMS["C3"]["scale"],
        compare_scale=CLAIMS["C3"]["compare_scale"],
    script:
        "../scripts/fig_theory_scale.py"


rule fig_collapse:
    input:
        collapse=f"{STATS_DIR}/collapse_summary.csv",
    output:
        **figure_outputs("fig_collapse"),
    log:
        f"{CLAIMS_LOGS}/fig_collapse.log",
    benchmark:
        f"{CLAIMS_BENCH}/fig_collapse.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    script:
        "../scripts/fig_collapse.py"


rule fig_mse:
    input:
        collapse=f"{STATS_DIR}/collapse_summary.csv",
        paired=f"{STATS_DIR}/paired_tests.csv",
    output:
        **figure_outputs("fig_mse"),
    log:
        f"{CLAIMS_LOGS}/fig_mse.log",
    benchmark:
        f"{CLAIMS_BENCH}/fig_mse.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        baseline=STATS["baseline"],
        reference=STATS["reference"],
        band=CLAIMS["C5"]["band"],
    script:
        "../scripts/fig_mse.py"


rule fig_improvement:
    input:
        paired=f"{STATS_DIR}/paired_tests.csv",
        scales=f"{STATS_DIR}/scales_summary.csv",
    output:
        **figure_outputs("fig_improvement"),
    log:
        f"{CLAIMS_LOGS}/fig_improvement.log",
    benchmark:
        f"{CLAIMS_BENCH}/fig_improvement.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        baseline=STATS["baseline"],
        fixes=STATS["fixes"],
        band=CLAIMS["C5"]["band"],
    script:
        "../scripts/fig_improvement.py"


rule fig_threshold:
    input:
        thresholds=f"{STATS_DIR}/thresholds.csv",
        knees=f"{STATS_DIR}/knees.csv",
    output:
        **figure_outputs("fig_threshold"),
    log:
        f"{CLAIMS_LOGS}/fig_threshold.log",
    benchmark:
        f"{CLAIMS_BENCH}/fig_threshold.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        tolerance=CLAIMS["C4"]["max_abs_error"],
    script:
        "../scripts/fig_threshold.py"


rule fig_conformance:
    input:
        conformance=TIDY.format("conformance"),
    output:
        **figure_outputs("fig_conformance"),
    log:
        f"{CLAIMS_LOGS}/fig_conformance.log",
    benchmark:
        f"{CLAIMS_BENCH}/fig_conformance.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    script:
        "../scripts/fig_conformance.py"


# ----------------------------------------------------------------------------- tables


rule table_paired_tests:
    input:
        paired=f"{STATS_DIR}/paired_tests.csv",
    output:
        **table_outputs("table_paired_tests"),
    log:
        f"{CLAIMS_LOGS}/table_paired_tests.log",
    benchmark:
        f"{CLAIMS_BENCH}/table_paired_tests.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        deltas=STATS["table_deltas"],
        confidence=STATS["confidence_level"],
        margin=STATS["tost_margin"],
        alpha=STATS["alpha"],
    script:
        "../scripts/table_paired_tests.py"


rule table_scales:
    input:
        scales=f"{STATS_DIR}/scales_summary.csv",
    output:
        **table_outputs("table_scales"),
    log:
        f"{CLAIMS_LOGS}/table_scales.log",
    benchmark:
        f"{CLAIMS_BENCH}/table_scales.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    script:
        "../scripts/table_scales.py"


rule table_thresholds:
    input:
        thresholds=f"{STATS_DIR}/thresholds.csv",
        knees=f"{STATS_DIR}/knees.csv",
    output:
        **table_outputs("table_thresholds"),
    log:
        f"{CLAIMS_LOGS}/table_thresholds.log",
    benchmark:
        f"{CLAIMS_BENCH}/table_thresholds.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        tolerance=CLAIMS["C4"]["max_abs_error"],
    script:
        "../scripts/table_thresholds.py"


rule table_conformance:
    input:
        conformance=TIDY.format("conformance"),
    output:
        **table_outputs("table_conformance"),
    log:
        f"{CLAIMS_LOGS}/table_conformance.log",
    benchmark:
        f"{CLAIMS_BENCH}/table_conformance.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    script:
        "../scripts/table_conformance.py"


# ----------------------------------------------------------------------------- verdict


rule claims:
    input:
        collapse=f"{STATS_DIR}/collapse_summary.csv",
        paired=f"{STATS_DIR}/paired_tests.csv",
        knees=f"{STATS_DIR}/knees.csv",
        scales=f"{STATS_DIR}/scales_summary.csv",
        thresholds=f"{STATS_DIR}/thresholds.csv",
        conformance=TIDY.format("conformance"),
    output:
        md=report(
            "figures/claims.md",
            caption="../report/claims.rst",
            category=CLAIM_CATEGORY["claims"],
            labels={"output": "claims", "kind": "verdict"},
        ),
        json="figures/claims.json",
    log:
        f"{CLAIMS_LOGS}/claims.log",
    benchmark:
        f"{CLAIMS_BENCH}/claims.tsv"
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        claims=CLAIMS,
        preset=config["preset"],
    script:
        "../scripts/claims_verdict.py"
