"""Vectorized torch emulator of the FP8 P-cast attention contract.

This is the fast path large CPU sweeps run on. It follows the per-row contract of
:func:`kernels.attention` step for step, but instead of walking KV blocks one at a
time it computes every block's running maximum at once (a cumulative max over the
per-block row maxima, in the visiting order), so the whole computation is a handful
of large tensor operations.

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

import torch

from .formats import FP8Format
from .quantize import quantize_native
from .reference import causal_mask

__all__ = ["emulate_attention"]

# Work on about this many score elements at a time: large enough that torch's
# per-op overhead is small, small enough to stay in cache and bound memory.
_CHUNK_ELEMS = 1 << 18


def _running_max(block_max: torch.Tensor, reverse: bool) -> torch.Tensor:
    """Running max seen by each block in visiting order. block_max: [..., nblk]."""
    if reverse:
        return torch.flip(torch.cummax(torch.flip(block_max, [-1]), dim=-1).values, [-1])
    return torch.cummax(block_max, dim=-1).values


def emulate_attention(q, k, v, *, reverse: bool, scale: float, fmt: FP8Format | None, causal: bool,
                      ksink: int, block_n: int, sm_scale: float, rowsum_rounded: bool):
    """Emulate the kernel contract. Arguments are already validated by :func:`kernels.attention`.

    Shapes: q [B, H, Nq, d], k and v [B, H, Nk, d], all float32 on one device.
    Returns ``(out [B,H,Nq,d] float32, diag dict of int64 [B,H,Nq])``.
    """
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
    Np = nblk * block_n
    visible = None
    if causal or pad:
        visible = torch.zeros(Nq, Np, dtype=torch.bool, device=q.device)
        visible[:, :Nk] = causal_mask(Nq, Nk, device=q.device) if causal else True
    kT = kf.transpose(-1, -2)
    ks = min(ksink, Nk)
    check_saturation = fmt is not None and scale > fmt.max_finite  # p <= 1, so p*S <= S

    out = torch.empty(G, Nq, d, dtype=torch.float32, device=q.device)
    names = ("underflow", "underflow_sink", "saturated", "terms", "terms_sink")
    diag = {n: torch.zeros(G, Nq, dtype=torch.int64, device=q.device) for n in names}

    rows = max(1, _CHUNK_ELEMS // Np)
    for g in range(G):
        for r0 in range(0, Nq, rows):
            r1 = min(Nq, r0 + rows)
            s = torch.matmul(qf[g, r0:r1], kT[g])
            s.mul_(sm_scale)
            if visible is not None:
                s.masked_fill_(~visible[r0:r1], float("-inf"))
            sb = s.view(r1 - r0, nblk, block_n)
            m = _running_max(sb.amax(dim=-1), reverse)  # max seen when each block is processed
            m_final = m[:, 0] if reverse else m[:, -1]
            m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
            p = sb.sub_(m_safe[..., None]).exp_().view(r1 - r0, Np)  # in place: s is no longer needed
            x = p * scale
            pq = x if fmt is None else quantize_native(x, fmt)
            if rowsum_rounded:
                lblk = pq.view(r1 - r0, nblk, block_n).sum(-1) / scale
            else:
                lblk = p.view(r1 - r0, nblk, block_n).sum(-1)
            # Diagnostics. p_q > 0 implies p > 0, so underflows are (p > 0) - (p_q > 0).
            pos_ns = torch.count_nonzero(p[:, ks:], dim=-1)
            pos_s = torch.count_nonzero(p[:, :ks], dim=-1)
            diag["terms"][g, r0:r1] = pos_ns
            diag["terms_sink"][g, r0:r1] = pos_s
            diag["underflow"][g, r0:r1] = pos_ns - torch.count_nonzero(pq[:, ks:], dim=-1)
            diag["underflow_sink"][g, r0:r1] = pos_s - torch.count_nonzero(pq[:, :ks], dim=-1)
            if check_saturation:
                diag["saturated"][g, r0:r1] = (x > fmt.max_finite).sum(-1)
            # Combine blocks: weight block j by exp(m_j - m_final) (the product of the
            # kernel's per-block alphas), then one matmul for all of P_q V.
            m_final_safe = torch.where(torch.isneginf(m_final), torch.zeros_like(m_final), m_final)
            w = torch.exp(m - m_final_safe[:, None])  # [rows, nblk]; exp(-inf) = 0 for unseen blocks
            w = torch.where(torch.isneginf(m), torch.zeros_like(w), w)
            l = (lblk * w).sum(-1)
            pq.view(r1 - r0, nblk, block_n).mul_(w[..., None])
            acc = torch.matmul(pq, vf[g])
            out[g, r0:r1] = acc / (l * scale)[:, None]
    out = out.view(B, H, Nq, d)
    return out, {n: t.view(B, H, Nq) for n, t in diag.items()}
