"""vLLM's ``unified_attention`` (``kernel_unified_attention``): the 2D path and the 3D split path.

Layout (the adapter's choices, :data:`pcast.deployed.registry.ADAPTERS`): Q cast to e4m3fn as [B·Nq, H, d]; K
and V cast to e4m3fn into a paged cache of 16-token blocks with an identity block table;
``kv_quant_mode=FP8_PER_TENSOR`` with q, k and v descales 1, so that V stays FP8 and the kernel's P·V runs
``tl.dot((P * p_scale).to(V.dtype), V) / p_scale``; float32 output. 2D: one sequence of Nq queries per batch
entry. 3D: each query row its own decode request (query length 1) over the same N keys, in 16 segments.
"""

from __future__ import annotations

import math

import torch

__all__ = ["unified", "split"]

PAGE = 16
SEGMENTS = 16
FP8 = torch.float8_e4m3fn


def _paged(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """[B, H_kv, N, d] -> FP8 [B·pages, PAGE, H_kv, d] (zero padded), pages per sequence."""
    b, hk, n, d = t.shape
    pages = math.ceil(n / PAGE)
    buf = torch.zeros(b, pages * PAGE, hk, d, dtype=torch.float32)
    buf[:, :n] = t.float().transpose(1, 2)
    return buf.to(FP8).reshape(b * pages, PAGE, hk, d), pages


def _run(q, k, v, sink_logit, mod, *, decode: bool):
    b, h, nq, d = q.shape
    n = k.shape[2]
    kc, pages = _paged(k)
    vc, _ = _paged(v)
    if decode:  # every query row a sequence of query length 1
        qf = q.float().permute(0, 2, 1, 3).reshape(b * nq, h, d)
        seqs, qlen = b * nq, 1
        table = torch.arange(b * pages, dtype=torch.int32).reshape(b, 1, pages).expand(b, nq, pages)
        table = table.reshape(seqs, pages).contiguous()
    else:
        qf = q.float().permute(0, 2, 1, 3).reshape(b * nq, h, d)
        seqs, qlen = b, nq
        table = torch.arange(b * pages, dtype=torch.int32).reshape(b, pages)
    qf = qf.to(FP8).contiguous()
    out = torch.zeros(qf.shape, dtype=torch.float32)
    cu = torch.arange(0, seqs + 1, dtype=torch.int32) * qlen
    used = torch.full((seqs,), n, dtype=torch.int32)
    one = torch.ones(1, dtype=torch.float32)
    sinks = None if sink_logit is None else sink_logit.float().reshape(-1, h)[0].contiguous()
    extra = {}
    if decode:
        hp = 1 << (d - 1).bit_length()
        extra = dict(seq_threshold_3D=seqs, num_par_softmax_segments=SEGMENTS,
                     softmax_segm_output=torch.empty(seqs, h, SEGMENTS, hp, dtype=torch.float32),
                     softmax_segm_max=torch.empty(seqs, h, SEGMENTS, dtype=torch.float32),
                     softmax_segm_expsum=torch.empty(seqs, h, SEGMENTS, dtype=torch.float32))
    kvq = importlib_kv_quant(mod)
    mod.unified_attention(qf, kc, vc, out, cu, qlen, used, n, 1.0 / math.sqrt(d), False, (-1, -1), table, 0.0,
                          one, one, one, sinks=sinks, kv_quant_mode=kvq.FP8_PER_TENSOR, **extra)
    return out.reshape(b, nq, h, d).permute(0, 2, 1, 3).contiguous()


def importlib_kv_quant(mod):
    """The release's ``KVQuantMode`` (the enum the launcher compares with)."""
    return mod.KVQuantMode


def unified(q, k, v, sink_logit, mod):
    """The 2D path (``IS_3D=False``): one program per block of query rows and KV head, all N keys in order."""
    return _run(q, k, v, sink_logit, mod, decode=False)


def split(q, k, v, sink_logit, mod):
    """The 3D path (``IS_3D=True`` and ``reduce_segments``): 16 contiguous segments per decode request."""
    return _run(q, k, v, sink_logit, mod, decode=True)
