"""The stored inputs: the Δ-free base tensors of every seed, shape and sigma of one shard.

:func:`pcast.models.sinks.make_base` draws each (q, k, v); :func:`write_inputs` stores them in one
safetensors file per (experiment, shard), tensor names ``seed=S/n=N/d=D/sigma=X/{q,k,v}``,
float32 ``[batch, heads, n, d]``, with the inputs spec as metadata. Δ, ksink and
``sink_v_scale`` are applied at run time (:func:`pcast.models.sinks.apply_sink`), so changing them
never rewrites inputs. :func:`load_inputs` checks the metadata against the shard it serves.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping

from pcast.pipeline.config import spec_json
from pcast.host.files import atomic_write_safetensors

__all__ = ["write_inputs", "load_inputs", "base_tensors"]

log = logging.getLogger("pcast.pipeline")


def _base_key(seed: int, n: int, d: int, sigma: float) -> str:
    return f"seed={seed}/n={n}/d={d}/sigma={sigma!r}"


def write_inputs(spec: Mapping, path: str | os.PathLike) -> dict:
    """Draw the Δ-free base (q, k, v) of every (seed, n, d, sigma) of a shard and store them.

    ``spec`` is the shard's :func:`pcast.pipeline.config.inputs_spec`. Returns a small summary.
    """
    # lazy: torch-free at import
    import torch  # noqa: F401  (make_base needs it; imported here to keep config code torch-free)
    from pcast.models.sinks import make_base  # lazy: torch-free at import

    tensors = {}
    for seed in spec["seeds"]:
        for n, d in spec["nd"]:
            for sigma in spec["sigma"]:
                q, k, v = make_base(seed, batch=spec["batch"], heads=spec["heads"], n=n, d=d, sigma=sigma)
                key = _base_key(seed, n, d, sigma)
                tensors[f"{key}/q"], tensors[f"{key}/k"], tensors[f"{key}/v"] = q, k, v
    atomic_write_safetensors(path, tensors, {"spec": spec_json(spec), "format": "pcast-fp8 base v1"})
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    log.info("wrote %d tensors (%.1f MB) to %s", len(tensors), nbytes / 1e6, path)
    return {"tensors": len(tensors), "bytes": nbytes}


def load_inputs(path: str | os.PathLike, spec: Mapping) -> dict:
    """Load a shard's base tensors and check that they were made for this shard's seeds and shapes."""
    from safetensors import safe_open  # lazy: torch-free at import
    from safetensors.torch import load_file  # lazy: torch-free at import

    with safe_open(os.fspath(path), framework="pt") as fh:
        meta = json.loads((fh.metadata() or {}).get("spec", "{}"))
    want = {"seeds": list(spec["seeds"]), "batch": spec["batch"], "heads": spec["heads"]}
    got = {k: meta.get(k) for k in want}
    if got != want:
        raise RuntimeError(f"{path} was made for {got}, this shard needs {want}; delete it and rerun")
    return load_file(os.fspath(path))


def base_tensors(tensors: Mapping, seed: int, n: int, d: int, sigma: float):
    """The stored (q, k, v) base of one seed, shape and sigma, from :func:`load_inputs`'s dict."""
    key = _base_key(seed, n, d, sigma)
    try:
        return tensors[f"{key}/q"], tensors[f"{key}/k"], tensors[f"{key}/v"]
    except KeyError:
        raise RuntimeError(f"stored inputs lack base {key}; delete the inputs file and rerun") from None
