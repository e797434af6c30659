"""A slow, direct implementation of the kernel contract, for tests only.

It walks the KV blocks one at a time for all query rows, exactly as the contract in
``kernels.attention``'s docstring reads (each step marked ``# step N: name``, as in the
Triton kernel and the emulator), and rounds with the integer quantizer
``kernels.quantize`` (not the emulator's fast path). It shares no code with the
emulator or the Triton kernel beyond that quantizer, which is itself tested against
torch's float8 cast.
"""

import math

import torch

from kernels import quantize
from kernels.contract import DIAGNOSTICS
from kernels.formats import get_format


def loop_attention(q, k, v, *, order="forward", scale=1.0, fmt="e4m3fn", causal=False, ksink=0, block_n=64,
                   sm_scale=None, rowsum="unrounded"):
    """q [B,H,Nq,d], k and v [B,H,Nk,d] float32 -> (out [B,H,Nq,d] float32, dict of int64 [B,H,Nq])."""
    B, H, Nq, d = q.shape
    Nk = k.shape[-2]
    sm = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    m = torch.full((B, H, Nq), float("-inf"))
    l = torch.zeros(B, H, Nq)
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
        m_new = torch.maximum(m, s.amax(-1))
        m_use = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - m_use[..., None])
        alpha = torch.exp(m - m_use)
        # step 3: cast
        x = p * scale
        pq = x if fmt is None else quantize(x, fmt)
        # step 4: row sum
        lb = p.sum(-1) if rowsum == "unrounded" else pq.sum(-1) / scale
        l = l * alpha + lb
        # step 5: accumulate
        acc = acc * alpha[..., None] + torch.matmul(pq, v[:, :, cols])
        m = m_new
        # diagnostics
        sink = cols < ksink
        under = (p > 0) & (pq == 0)
        diag["underflow"] += (under & ~sink).sum(-1)
        diag["underflow_sink"] += (under & sink).sum(-1)
        diag["terms"] += ((p > 0) & ~sink).sum(-1)
        diag["terms_sink"] += ((p > 0) & sink).sum(-1)
        if fmt is not None:
            diag["saturated"] += (x > get_format(fmt).max_finite).sum(-1)
    # step 6: normalise
    return acc / (l * scale)[..., None], diag
