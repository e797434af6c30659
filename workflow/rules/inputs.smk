# Step 1: the Δ-free base tensors (pcast.models.sinks.make_base) of every seed, shape and sigma of a
# shard, stored in one safetensors file (pcast.pipeline.inputs). Δ, ksink and sink_v_scale are
# applied at run time.


rule inputs:
    output:
        "results/inputs/{experiment}/shard{shard}.safetensors",
    log:
        "results/logs/inputs/{experiment}/shard{shard}.log",
    benchmark:
        "results/benchmarks/inputs/{experiment}/shard{shard}.tsv"
    wildcard_constraints:
        experiment="|".join(ALL_EXPERIMENTS),
        shard=r"\d{3}",
    priority: 1
    conda:
        "../envs/pcast-fp8.yaml"
    threads: 1
    resources:
        mem_mb=inputs_mem_mb,
        runtime=resources.RUNTIME_FLOOR_MIN,
    params:
        code=library_code("inputs"),
        spec=inputs_spec,
    script:
        "../scripts/inputs.py"
