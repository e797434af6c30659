"""SGLang's Triton decode attention (``decode_attention_fwd``: ``_fwd_grouped_kernel_stage1`` and
``_fwd_kernel_stage2``).

Only the kernel's files are loaded, straight from the cache (the package's ``__init__`` chain needs a dozen
packages the kernels do not use): ``decode_attention.py`` with its ``score_mod.py`` and ``srt/environ.py``
(standard library only), and in place of ``sglang.srt.utils`` the four platform answers the file asks for, as
on a CUDA machine (not HIP, not gfx95x/gfx1250). Module names are private, so nothing named ``sglang`` is left
in ``sys.modules``.

Layout (the adapter's choices): one decode request per query row over a token-major K/V buffer [B·N, H_kv, d]
cast to e4m3fn, k and v scales 1; ``num_kv_splits = max_kv_splits = 8``; ``sinks=sink_logit``. When H = H_kv
the query heads are doubled (each K/V head serves two copies), so that the grouped kernel, the one that casts
P, runs; the MHA kernel sums ``p[:, None] * v`` without a cast.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import types
from pathlib import Path

import torch

__all__ = ["decode", "load_module"]

SPLITS = 8
FP8 = torch.float8_e4m3fn
_PREFIX = "_pcast_deployed_sglang"


def _from_file(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_module(root: Path, module: str):
    """The kernel module ``module`` loaded from the unpacked wheel under ``root``."""
    utils = types.ModuleType(f"{_PREFIX}.srt.utils")
    utils.get_device_core_count = lambda device_index=0: 132
    utils.is_hip = lambda: False
    utils.is_gfx95_supported = lambda: False
    utils.is_gfx1250_supported = lambda: False
    pkg = root / "sglang"
    names = {"sglang.kernels.ops.attention.score_mod": pkg / "kernels/ops/attention/score_mod.py",
             "sglang.srt.environ": pkg / "srt/environ.py"}
    saved = {n: sys.modules.get(n) for n in (*names, "sglang.srt.utils")}
    try:
        for n, path in names.items():
            sys.modules[n] = _from_file(f"{_PREFIX}.{n}", path)
        sys.modules["sglang.srt.utils"] = utils
        return _from_file(f"{_PREFIX}.{module}", pkg.parent / (module.replace(".", "/") + ".py"))
    finally:
        for n, old in saved.items():
            if old is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = old


def decode(q, k, v, sink_logit, mod):
    b, h, nq, d = q.shape
    hk, n = k.shape[1], k.shape[2]
    twice = h == hk
    if twice:
        q = q.repeat_interleave(2, dim=1)
        sink_logit = None if sink_logit is None else sink_logit.reshape(-1, h).repeat_interleave(2, dim=1)
    hq = q.shape[1]
    kb = k.float().permute(0, 2, 1, 3).reshape(b * n, hk, d).to(FP8).contiguous()
    vb = v.float().permute(0, 2, 1, 3).reshape(b * n, hk, d).to(FP8).contiguous()
    reqs = b * nq
    qf = q.float().permute(0, 2, 1, 3).reshape(reqs, hq, d).to(q.dtype if q.dtype != torch.float32 else
                                                               torch.float32).contiguous()
    indptr = torch.arange(0, reqs + 1, dtype=torch.int32) * n
    indices = (torch.arange(b, dtype=torch.int32)[:, None, None] * n
               + torch.arange(n, dtype=torch.int32)[None, None, :]).expand(b, nq, n).reshape(-1).contiguous()
    o = torch.zeros(reqs, hq, d, dtype=torch.float32)
    logits = torch.empty(reqs, hq, SPLITS, d, dtype=torch.float32)
    lse = torch.empty(reqs, hq, SPLITS, dtype=torch.float32)
    splits = torch.full((reqs,), SPLITS, dtype=torch.int32)
    sinks = None if sink_logit is None else sink_logit.float().reshape(-1, hq)[0].contiguous()
    mod.decode_attention_fwd(qf, kb, vb, o, indptr, indices, logits, lse, splits, SPLITS, 1.0 / math.sqrt(d),
                             1.0, 1.0, sinks=sinks)
    out = o.reshape(b, nq, hq, d).permute(0, 2, 1, 3)
    return (out[:, ::2] if twice else out).contiguous()
