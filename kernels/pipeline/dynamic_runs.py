"""The dynamic experiment's shard job: every P cast (static S, dynamic scales) in both orders on the stored
sink inputs of a shard.

Its rows are the fp4 experiment's (:data:`pcast.contract.DYNAMIC_TIDY_COLUMNS`, the group columns 0 for an FP8
cast), so the fp4 shard job runs it (:func:`pcast.pipeline.fp4_runs.run_fp4_shard`): per seed, shape, sigma
and causal flag, the Δ values stacked along the batch dimension, one float64 reference per value tensor, and
every (cast, order) of :func:`pcast.pipeline.dynamic_config.casts` through one :func:`pcast.attention_calls` on
the same tensors, so every comparison is paired by seed. Same spec and inputs give the same bytes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pcast.pipeline.fp4_runs import run_fp4_shard

__all__ = ["run_dynamic_shard"]


def run_dynamic_shard(spec: Mapping, inputs_path: str | os.PathLike, out_csv: str | os.PathLike,
                      timing_csv: str | os.PathLike, *, threads: int = 1, n_shards: int | None = None) -> dict:
    """Run one shard of the dynamic experiment and write its tidy rows and timing (``spec``: the shard's
    :func:`pcast.pipeline.config.shard_spec`); returns the timing row."""
    return run_fp4_shard(spec, inputs_path, out_csv, timing_csv, threads=threads, n_shards=n_shards)
