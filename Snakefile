# pcast-fp8: the paper's method, in order. One command rebuilds everything: `snakemake --cores all`
# (README.md). Presets: --config preset=smoke|default|paper. config.yaml is validated before any job.


configfile: "config.yaml"


# Config, presets and the helpers every rule file uses (no rules).
include: "workflow/rules/common.smk"
# 1. Synthetic sink inputs: the Δ-free base tensors of each seed.
include: "workflow/rules/inputs.smk"
# 2. The sweeps: every order x scale combination on every input; one tidy table per experiment.
include: "workflow/rules/sweeps.smk"
# 2b. A pretrained model's heads and embeddings (the realmodel experiment).
include: "workflow/rules/realmodel.smk"
# 2c. An FP8 tensor core's P·V accumulation against float32 (the tensorcore experiment).
include: "workflow/rules/tensorcore.smk"
# 3. The Triton kernel against the emulator, every difference explained.
include: "workflow/rules/conformance.smk"
# 4. Paired statistics from the tidy tables.
include: "workflow/rules/statistics.smk"
# 5. Figures, 6. tables, 7. the claims verdict.
include: "workflow/rules/figures.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/verdict.smk"


rule all:
    default_target: True
    input:
        TIDY_TABLES,
        TIMING_TABLES,
        ANALYSIS_TARGETS,
