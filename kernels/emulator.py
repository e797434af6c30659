"""Vectorized torch emulator of the FP8 P-cast attention contract.

This is the fast path large CPU sweeps run on. It follows the per-row contract of
:func:`kernels.attention` step for step (each step is marked ``# step N: name`` in
:func:`_rows`, as in the Triton kernel and the test oracle), but instead of walking KV
blocks one at a time it computes every block's running maximum at once (a cumulative
max over the per-block row maxima, in the visiting order), so the whole computation is
a handful of large tensor operations.

Exactness: everything that decides the diagnostics (the block partition, the
running max each key sees, ``p = exp(s - m)``, ``p·S`` and its FP8 rounding) is the
same computation as in the kernel. Only the fp32 accumulation order differs: the
kernel rescales ``acc`` and ``l`` by ``alpha`` once per block, while the emulator
weights each block by ``exp(m_block - m_final)`` directly. That changes outputs by a
few fp32 ulps, never a diagnostic. Scores ``s`` come from a different fp32 matmul
than the kernel's, so a ``p`` within a few ulps of an FP8 rounding boundary can round
the other way; :mod:`kernels.conformance` checks that explanation for every mismatch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .contract import DIAGNOSTICS
from .formats import FP8Format
from .rounding import quantize_fast
from .reference import causal_mask

__all__ = ["emulate_attention", "running_max"]

# Work on about this many score elements at a time: large enough that torch's
# per-op overhead is small, small enough to stay in cache and bound memory.
_CHUNK_ELEMS = 1 << 18


def running_max(block_max: torch.Tensor, reverse: bool) -> torch.Tensor:
    """Running max seen by each block in visiting order. block_max: [..., nblk]."""
    if reverse:
        return torch.flip(torch.cummax(torch.flip(block_max, [-1]), dim=-1).values, [-1])
    return torch.cummax(block_max, dim=-1).values


@dataclass
class _Call:
    """One call's inputs laid out in KV blocks, and the settings every chunk of rows shares."""

    qs: torch.Tensor  # [G, Nq, d] queries, already times sm_scale when that is exact (sm_pow2)
    kT: torch.Tensor  # [G, d, Np] keys, zero-padded to whole blocks, transposed
    vf: torch.Tensor  # [G, Np, d] values, zero-padded to whole blocks
    visible: torch.Tensor | None  # [Nq, Np] visible keys (causal mask, padding), None: all visible
    nblk: int  # KV blocks
    block_n: int  # keys per KV block
    ks: int  # sink keys: positions < ks
    sm_scale: float
    sm_pow2: bool  # sm_scale is a power of two, so it was folded into qs exactly
    reverse: bool
    scale: float  # S
    fmt: FP8Format | None
    rowsum_rounded: bool
    check_saturation: bool  # S exceeds the format's max finite value, so p·S may saturate


def _layout(q, k, v, *, reverse, scale, fmt, causal, ksink, block_n, sm_scale, rowsum_rounded) -> _Call:
    """Flatten batch and heads, pad the keys to whole blocks and build the visibility mask."""
    B, H, Nq, d = q.shape
    Nk = k.shape[-2]
    G = B * H
    qf = q.reshape(G, Nq, d)
    kf = k.reshape(G, Nk, d)
    vf = v.reshape(G, Nk, d)
    nblk = -(-Nk // block_n)
    pad = nblk * block_n - Nk
    if pad:
        kf = torch.nn.functional.pad(kf, (0, 0, 0, pad))
        vf = torch.nn.functional.pad(vf, (0, 0, 0, pad))
    visible = None
    if causal or pad:
        visible = torch.zeros(Nq, nblk * block_n, dtype=torch.bool, device=q.device)
        visible[:, :Nk] = causal_mask(Nq, Nk, device=q.device) if causal else True
    # Multiplying q by a power-of-two sm_scale is exact, so (q*sm)·k has the same bits
    # as (q·k)*sm and saves a pass over the scores.
    sm_pow2 = math.frexp(sm_scale)[0] == 0.5
    return _Call(qs=qf * sm_scale if sm_pow2 else qf, kT=kf.transpose(-1, -2), vf=vf, visible=visible,
                 nblk=nblk, block_n=block_n, ks=min(ksink, Nk), sm_scale=sm_scale, sm_pow2=sm_pow2,
                 reverse=reverse, scale=scale, fmt=fmt, rowsum_rounded=rowsum_rounded,
                 # p <= 1 (each block's max is folded into m before its p is taken), so p*S <= S.
                 check_saturation=fmt is not None and scale > fmt.max_finite)


def _rows(c: _Call, g: int, r0: int, r1: int, out: torch.Tensor, diag: dict) -> None:
    """Steps 1-6 of the contract for query rows r0:r1 of head g; writes out[g, r0:r1] and the diagnostics."""
    nr = r1 - r0
    Np = c.nblk * c.block_n
    # step 1: scores
    s = torch.matmul(c.qs[g, r0:r1], c.kT[g])
    if not c.sm_pow2:
        s.mul_(c.sm_scale)
    if c.visible is not None:
        s.masked_fill_(~c.visible[r0:r1], float("-inf"))
    # step 2: running max
    sb = s.view(nr, c.nblk, c.block_n)
    m = running_max(sb.amax(dim=-1), c.reverse)  # the max in force when each block is processed
    m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    p = sb.sub_(m_safe[..., None]).exp_().view(nr, Np)  # in place: s is not needed again
    # The cast below overwrites p in place, so take what still needs the unrounded p now:
    # its block sums (for the unrounded row sum) and its positive counts (for the diagnostics).
    if not c.rowsum_rounded:
        lblk = p.view(nr, c.nblk, c.block_n).sum(-1)
    # diagnostics: p >= 0, so sign(p) is 1 exactly where p > 0: a fast exact count.
    sgn = torch.sign(p)
    pos_s = sgn[:, :c.ks].sum(-1)
    pos_ns = sgn[:, c.ks:].sum(-1)
    # step 3: cast
    x = p.mul_(c.scale)  # x = p*S, in place
    if c.check_saturation:
        diag["saturated"][g, r0:r1] = (x > c.fmt.max_finite).sum(-1)  # diagnostics
    pq = x if c.fmt is None else quantize_fast(x, c.fmt, saturate=c.check_saturation, out=x)
    # diagnostics: p_q > 0 implies p > 0, so underflows are #(p > 0) - #(p_q > 0).
    torch.sign(pq, out=sgn)
    diag["terms"][g, r0:r1] = pos_ns.to(torch.int64)
    diag["terms_sink"][g, r0:r1] = pos_s.to(torch.int64)
    diag["underflow"][g, r0:r1] = (pos_ns - sgn[:, c.ks:].sum(-1)).to(torch.int64)
    diag["underflow_sink"][g, r0:r1] = (pos_s - sgn[:, :c.ks].sum(-1)).to(torch.int64)
    # step 4: row sum
    # Instead of rescaling by alpha once per block, weight block j by exp(m_j - m_final),
    # the product of the kernel's per-block alphas.
    if c.rowsum_rounded:
        lblk = pq.view(nr, c.nblk, c.block_n).sum(-1) / c.scale
    m_final = m_safe[:, 0] if c.reverse else m_safe[:, -1]
    w = torch.exp(m - m_final[:, None])  # [rows, nblk]; 0 for blocks seen before any key
    l = (lblk * w).sum(-1)
    # step 5: accumulate
    pq.view(nr, c.nblk, c.block_n).mul_(w[..., None])  # the same weights, then one matmul for all of P_q V
    acc = torch.matmul(pq, c.vf[g])
    # step 6: normalise
    out[g, r0:r1] = acc / (l * c.scale)[:, None]


def emulate_attention(q, k, v, *, reverse: bool, scale: float, fmt: FP8Format | None, causal: bool,
                      ksink: int, block_n: int, sm_scale: float, rowsum_rounded: bool):
    """Emulate the kernel contract. Arguments are already validated by :func:`kernels.attention`.

    Shapes: q [B, H, Nq, d], k and v [B, H, Nk, d], all float32 on one device.
    Returns ``(out [B,H,Nq,d] float32, diag dict of int64 [B,H,Nq])``.
    """
    B, H, Nq, d = q.shape
    c = _layout(q, k, v, reverse=reverse, scale=scale, fmt=fmt, causal=causal, ksink=ksink, block_n=block_n,
                sm_scale=sm_scale, rowsum_rounded=rowsum_rounded)
    G = B * H
    out = torch.empty(G, Nq, d, dtype=torch.float32, device=q.device)
    diag = {n: torch.zeros(G, Nq, dtype=torch.int64, device=q.device) for n in DIAGNOSTICS}
    rows = max(1, _CHUNK_ELEMS // (c.nblk * c.block_n))
    for g in range(G):
        for r0 in range(0, Nq, rows):
            _rows(c, g, r0, min(Nq, r0 + rows), out, diag)
    out = out.view(B, H, Nq, d)
    return out, {n: t.view(B, H, Nq) for n, t in diag.items()}
