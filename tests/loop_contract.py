"""A slow, direct implementation of the kernel contract, for tests only.

It walks the KV blocks one at a time for all query rows, exactly as the contract in
``kernels.attention``'s docstring and docs/interfaces.md ("P policies") read (each step marked
``# step N: name``, as in the Triton kernel and the emulator), and rounds with the integer
quantizer ``kernels.quantize`` (not the emulator's fast path). It shares no code with the
emulator or the Triton kernel beyond that quantizer, which is itself tested against
torch's float8 cast, and the constants of ``kernels.contract``.
"""

import math

import torch

from kernels import quantize
from kernels.contract import DIAGNOSTICS, LOG2E, float32, log2_scale
from kernels.formats import get_format


def cast_operand(t, fmt, scale="tensor"):
    """t' = quantize(t / s_t, fmt) * s_t, one float32 s_t per (batch, head), head by head:
    s_t = amax|t| / max_finite ("tensor"; 1 where amax is 0) or the given float."""
    f = get_format(fmt)
    out = torch.empty_like(t)
    for b in range(t.shape[0]):
        for h in range(t.shape[1]):
            th = t[b, h]
            if scale != "tensor":
                s_t = torch.tensor(scale, dtype=torch.float32)
            elif float(th.abs().max()) == 0.0:
                s_t = torch.tensor(1.0)
            else:
                s_t = th.abs().max() / torch.tensor(f.max_finite, dtype=torch.float32)
            out[b, h] = quantize(th / s_t, f) * s_t
    return out


def loop_attention(q, k, v, *, order="forward", scale=1.0, fmt="e4m3fn", causal=False, ksink=0, block_n=64,
                   sm_scale=None, rowsum="unrounded", scale_mode="multiply", rescale_threshold=0.0, sink_logit=None,
                   sink_mode="final", qk_fmt=None, qk_scale="tensor", v_fmt=None, v_scale="tensor"):
    """q [B,H,Nq,d], k and v [B,H_kv,Nk,d] float32 (H_kv dividing H) -> (out [B,H,Nq,d] float32, dict of
    int64 [B,H,Nq]).

    The keywords are those of ``kernels.attention`` (names and strings, not resolved objects);
    ``sink_logit`` is None or float32 [H] or [B, H].
    """
    B, H, Nq, d = q.shape
    Nk = k.shape[-2]
    sm = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    exp2 = scale_mode == "exp2_offset"
    log2s = log2_scale(scale)
    tau = torch.tensor(float32(rescale_threshold))
    if qk_fmt is not None:
        q, k = cast_operand(q, qk_fmt, qk_scale), cast_operand(k, qk_fmt, qk_scale)
    if v_fmt is not None:
        v = cast_operand(v, v_fmt, v_scale)
    # grouped-query attention, indexed here (the kernel and the emulator expand with repeat_interleave,
    # after or before the casts: the same numbers, since a cast's scale is per (batch, key/value head))
    kv_of = torch.arange(H) // (H // k.shape[1])  # query head h reads key/value head h // (H / H_kv)
    k, v = k[:, kv_of], v[:, kv_of]
    sigma = None if sink_logit is None else sink_logit.float().expand(B, H)[..., None].expand(B, H, Nq)
    m = torch.full((B, H, Nq), float("-inf"))
    l = torch.zeros(B, H, Nq)
    if sigma is not None and sink_mode == "init":
        m = sigma.clone()  # the sink seeds the max, and l holds the sink's own unrounded value
        l = torch.exp2(sigma * LOG2E - (sigma * LOG2E - log2s)) if exp2 else torch.ones(B, H, Nq)
    acc = torch.zeros(B, H, Nq, d)
    diag = {n: torch.zeros(B, H, Nq, dtype=torch.int64) for n in DIAGNOSTICS}
    nblk = (Nk + block_n - 1) // block_n
    blocks = range(nblk - 1, -1, -1) if order == "reverse" else range(nblk)
    rows = torch.arange(Nq)[:, None]
    for j in blocks:
        cols = torch.arange(j * block_n, min(Nk, (j + 1) * block_n))
        # step 1: scores
        s = torch.matmul(q, k[:, :, cols].transpose(-1, -2)) * sm
        if causal:
            s = torch.where(cols[None, :] <= rows, s, torch.tensor(float("-inf")))
        # step 2: running max
        bm = s.amax(-1)
        m_new = torch.where(torch.isneginf(m) | ((bm - m) * LOG2E > tau), bm, m)
        m_use = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        if exp2:
            u = torch.exp2(s * LOG2E - (m_use * LOG2E - log2s)[..., None])  # x; p*S is never formed
            alpha = torch.exp2(m * LOG2E - m_use * LOG2E)
        else:
            u = torch.exp(s - m_use[..., None])  # p
            alpha = torch.exp(m - m_use)
        # step 3: cast
        x = u if exp2 else u * scale
        pq = x if fmt is None else quantize(x, fmt)
        # step 4: row sum
        if rowsum == "unrounded":
            lb = u.sum(-1)
        else:
            lb = pq.sum(-1) if exp2 else pq.sum(-1) / scale
        l = l * alpha + lb
        # step 5: accumulate
        acc = acc * alpha[..., None] + torch.matmul(pq, v[:, :, cols])
        m = m_new
        _count(diag, u, pq, x, cols < ksink, fmt)
    # step 6: normalise
    if sigma is not None and sink_mode == "final":
        mf = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        l = l + (torch.exp2(sigma * LOG2E - (mf * LOG2E - log2s)) if exp2 else torch.exp(sigma - mf))
    return (acc / l[..., None] if exp2 else acc / (l * scale)[..., None]), diag


def _count(diag, u, pq, x, sink, fmt):
    """Diagnostics of one block: u the unrounded value (p or x), pq its cast, x the value cast."""
    under = (u > 0) & (pq == 0)
    diag["underflow"] += (under & ~sink).sum(-1)
    diag["underflow_sink"] += (under & sink).sum(-1)
    diag["terms"] += ((u > 0) & ~sink).sum(-1)
    diag["terms_sink"] += ((u > 0) & sink).sum(-1)
    if fmt is not None:
        diag["saturated"] += (x > get_format(fmt).max_finite).sum(-1)
