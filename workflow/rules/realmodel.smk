# Step 2b: the realmodel experiment (pcast.models.realmodel, pcast.models.heads, pcast.pipeline.realmodel_runs):
# a pretrained model's Q, K, V captured once (all-MiniLM-L6-v2 from its wheel, offline; or the user's
# own tensors, experiments.realmodel.tensors), every head of every layer through the four combinations,
# the named policies and the key-shuffled control (one job per layer), and the whole model's
# embeddings with its attention run by pcast.attention (one job).


rule realmodel_capture:
    input:
        realmodel_user_tensors,
    output:
        tensors=f"{REALMODEL_INPUTS}/tensors.safetensors",
        passages=f"{REALMODEL_INPUTS}/passages.json",
    log:
        "results/logs/realmodel/realmodel_capture.log",
    benchmark:
        "results/benchmarks/realmodel/realmodel_capture.tsv"
    priority: 3
    conda:
        "../envs/pcast-fp8.yaml"
    resources:
        **fixed_resources("realmodel_capture"),
    params:
        code=library_code("realmodel_capture"),
        spec=realmodel_spec("capture"),
    script:
        "../scripts/realmodel_capture.py"


rule realmodel_heads:
    input:
        tensors=rules.realmodel_capture.output.tensors,
    output:
        rows=f"{REALMODEL_DIR}/heads/layer{{layer}}.csv",
    log:
        "results/logs/realmodel/realmodel_heads/layer{layer}.log",
    benchmark:
        "results/benchmarks/realmodel/realmodel_heads/layer{layer}.tsv"
    wildcard_constraints:
        layer=r"\d+",
    priority: 2
    conda:
        "../envs/pcast-fp8.yaml"
    threads: 1
    resources:
        **fixed_resources("realmodel_heads"),
        gpu=pconfig.gpu_jobs(REALMODEL_CFG),
    params:
        code=library_code("realmodel_heads"),
        spec=realmodel_spec("heads"),
    script:
        "../scripts/realmodel_heads.py"


rule realmodel_outputs:
    input:
        tensors=rules.realmodel_capture.output.tensors,
    output:
        outputs=f"{REALMODEL_DIR}/outputs.csv",
        pairs=f"{REALMODEL_DIR}/pairs.csv",
    log:
        "results/logs/realmodel/realmodel_outputs.log",
    benchmark:
        "results/benchmarks/realmodel/realmodel_outputs.tsv"
    priority: 3
    conda:
        "../envs/pcast-fp8.yaml"
    threads: 1
    resources:
        **fixed_resources("realmodel_outputs"),
        gpu=pconfig.gpu_jobs(REALMODEL_CFG),
    params:
        code=library_code("realmodel_outputs"),
        spec=realmodel_spec("outputs"),
    script:
        "../scripts/realmodel_outputs.py"
