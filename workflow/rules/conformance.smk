# Step 3: the Triton kernel (compiled on a GPU, interpreted on a CPU) against the emulator with
# pcast.conformance.compare, and the experiments' calls through the multi-call engine against single
# calls, in shards of seeds (pcast.pipeline.conformance_runs). Rule tidy_table (sweeps.smk) merges the
# shards into results/tidy/conformance.csv.


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
    priority: 1
    conda:
        "../envs/pcast-fp8.yaml"
    threads: 1
    resources:
        gpu=gpu_resource,
        mem_mb=shard_mem_mb,
        runtime=shard_runtime,
    params:
        code=library_code("conformance_shard"),
        spec=shard_spec,
    script:
        "../scripts/conformance_shard.py"
