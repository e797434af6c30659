# Step 4: the Triton kernel (compiled on a GPU, interpreted on a CPU) against the emulator with
# kernels.conformance.compare, in shards of seeds; one table results/tidy/conformance.csv.


rule conformance_shard:
    input:
        "results/inputs/{experiment}/shard{shard}.safetensors",
    output:
        rows="results/shards/{experiment}/shard{shard}.csv",
        timing="results/shards/{experiment}/shard{shard}.timing.csv",
    log:
        "results/logs/conformance/{experiment}/shard{shard}.log",
    benchmark:
        "results/benchmarks/conformance/{experiment}/shard{shard}.tsv"
    wildcard_constraints:
        experiment=CONFORMANCE,
        shard=r"\d{3}",
    conda:
        "../envs/pcast-fp8.yaml"
    threads: 1
    resources:
        gpu=gpu_resource,
    params:
        spec=shard_spec,
    script:
        "../scripts/run_conformance_shard.py"


rule conformance_table:
    input:
        rows=shard_files("results/shards/{experiment}/shard{shard}.csv"),
        timing=shard_files("results/shards/{experiment}/shard{shard}.timing.csv"),
    output:
        tidy=report(
            "results/tidy/{experiment}.csv",
            caption="../report/tidy.rst",
            category=category,
            subcategory="Tidy table",
            labels={
                "experiment": "{experiment}",
                "table": "Triton kernel vs emulator",
            },
        ),
        timing="results/timing/{experiment}.csv",
    log:
        "results/logs/tidy/{experiment}.log",
    benchmark:
        "results/benchmarks/tidy/{experiment}.tsv"
    wildcard_constraints:
        experiment=CONFORMANCE,
    localrule: True
    conda:
        "../envs/pcast-fp8.yaml"
    params:
        expected=expected_rows,
    script:
        "../scripts/merge_tables.py"
