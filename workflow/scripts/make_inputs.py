"""Step 1 (rule inputs): store the Δ-free base tensors of one shard; see kernels.pipeline.write_inputs."""

import json

from kernels import pipeline

pipeline.setup_logging(snakemake.log[0])  # noqa: F821 (snakemake is injected by the script directive)
with pipeline.logged_errors():
    spec = json.loads(snakemake.params.spec)  # noqa: F821
    pipeline.write_inputs(spec, snakemake.output[0])  # noqa: F821
