# One command rebuilds everything: `snakemake --cores all` (see README.md).
# Presets: --config preset=smoke|default|paper. Config: config.yaml, validated before any job runs.


configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/inputs.smk"
include: "workflow/rules/sweeps.smk"
include: "workflow/rules/conformance.smk"
include: "workflow/rules/claims.smk"


rule all:
    default_target: True
    input:
        TIDY_TABLES,
        TIMING_TABLES,
        CLAIMS_TARGETS,
