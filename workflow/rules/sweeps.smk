# Step 2: the sweeps (collapse, scales, threshold) and the policies experiment in shards of seeds
# (pcast.pipeline.runs, pcast.pipeline.policy_runs), and one tidy table per experiment, the
# conformance check's included (rule tidy_table, for every experiment; policies.csv has its own
# columns, pcast.contract.POLICY_TIDY_COLUMNS), with the shard timings kept apart in
# results/timing/ (pcast.pipeline.tables).
# Priorities (here, inputs, conformance, realmodel): the long jobs first -- the real model's capture and
# whole-model outputs (3), its layer jobs (2), inputs and shards (1) -- so that the short statistics,
# figure and table jobs (0) fill both cores at the end instead of one long job running alone.


rule sweep_shard:
    input:
        "results/inputs/{experiment}/shard{shard}.safetensors",
    output:
        rows="results/shards/{experiment}/shard{shard}.csv",
        timing="results/shards/{experiment}/shard{shard}.timing.csv",
    log:
        "results/logs/sweeps/{experiment}/shard{shard}.log",
    benchmark:
        "results/benchmarks/sweeps/{experiment}/shard{shard}.tsv"
    wildcard_constraints:
        experiment="|".join(SHARD_EXPERIMENTS),
        shard=r"\d{3}",
    priority: 1
    conda:
        "../envs/pcast-fp8.yaml"
    threads: 1
    resources:
        gpu=gpu_resource,
        mem_mb=shard_mem_mb,
        runtime=shard_runtime,
    params:
        code=library_code("sweep_shard"),
        spec=shard_spec,
    script:
        "../scripts/sweep_shard.py"


rule tidy_table:
    input:
        rows=shard_files("results/shards/{experiment}/shard{shard}.csv"),
        timing=shard_files("results/shards/{experiment}/shard{shard}.timing.csv"),
    output:
        tidy=report(
            "results/tidy/{experiment}.csv",
            caption="../report/tidy.rst",
            category=category,
            subcategory="Tidy table",
            labels=tidy_labels,
        ),
        timing="results/timing/{experiment}.csv",
    log:
        "results/logs/tidy/{experiment}.log",
    benchmark:
        "results/benchmarks/tidy/{experiment}.tsv"
    wildcard_constraints:
        experiment="|".join(ALL_EXPERIMENTS),
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        code=library_code("tidy_table"),
        expected=expected_rows,
    script:
        "../scripts/tidy_table.py"
