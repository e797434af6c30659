"""The float64 model of the split contract (docs/interfaces.md, "Decode-time attention") for
:func:`pcast.conformance.explain`: several splits, each with its own running max (or, partition-normalised,
its exact max and sum), merged by their log-sum-exp.

Per key, x is ``S·exp(s - m_s)`` at the max in force in its split (online; lazy rescaling per split, an init
sink seeding split 0), its exp2-offset form, or ``S·exp(s - m_s)/l_s`` (partition). The error bound on
``ln x`` is :mod:`pcast.conformance.model`'s, plus, for partition, the float32 sum l_s (its summation order
is not part of the contract: ``n·u`` relative for n keys, and exp's error) and the division (u). An element
flips the output by at most its grid step times ``|v|`` times its split's merge share: ``e^(m_s - G)``
(online) or ``L_s·e^(m_s - G)`` (partition) over ``S·Z``, with G the largest split max and Z the row sum of
every split at G (the final sink included); ``step`` carries that share and ``lx`` is ``S·Z``.
"""

from __future__ import annotations

import math

import torch

from pcast.conformance.model import (U, exp2_arg_tol, lazy_walk, near_boundaries, scores64, xof,
                                       cast_operand)
from pcast.contract import log2_scale
from pcast.emulator.parts import running_max
from pcast.emulator.splits import split_blocks
from pcast.formats import get_p_format

__all__ = ["fragile_split_elements"]


def _split_max(bm, J, i, *, reverse, tau, partition, seed, err_row):
    """The max in force per block of split i (blocks J) [..., len(J)] and its walk-fragile rows."""
    b = bm[..., J]
    fragile = torch.zeros(bm.shape[:-1], dtype=torch.bool)
    if partition:
        m = b.amax(-1) if seed is None else torch.maximum(b.amax(-1), seed)
        return m[..., None].expand(b.shape), fragile
    if tau > 0:
        m0 = seed if seed is not None else torch.full_like(b[..., 0], float("-inf"))
        return lazy_walk(b, reverse, tau, m0, err_row)
    m = running_max(b, reverse)
    return (m if seed is None else torch.maximum(m, seed[..., None])), fragile


def _maxima(s, err_s, sigma, parts, *, block_n, order, tau, partition, sink_mode):
    """The max in force per block (m_safe, [..., nblk]) under each split's rule, and the walk-fragile rows."""
    B, H, Nq, Nk = s.shape
    nblk = -(-Nk // block_n)
    sp = torch.nn.functional.pad(s, (0, nblk * block_n - Nk), value=float("-inf")).view(B, H, Nq, nblk, block_n)
    bm = sp.amax(-1)
    m = torch.empty_like(bm)
    walk = torch.zeros(B, H, Nq, dtype=torch.bool)
    for i, J in parts:
        seed = sigma if sigma is not None and sink_mode == "init" and i == 0 else None
        m[..., J], wf = _split_max(bm, J, i, reverse=order == "reverse", tau=tau, partition=partition, seed=seed,
                                   err_row=err_s.amax(-1))
        walk |= wf
    return torch.where(torch.isneginf(m), torch.zeros_like(m), m), walk


def _shares(p, m, mcol, sigma, parts, *, block_n, order, partition, sink_mode):
    """Per split its row sum L_s in p units at its final max; per block its merge share (``e^(m_j - G)``, or
    ``L_s·e^(m_s - G)`` for partition); Z, the row sum of every split at G, the final sink included."""
    Nk = p.shape[-1]
    fin, big_l = [], []
    for i, J in parts:
        mf = m[..., J[0]] if order == "reverse" or partition else m[..., J[-1]]
        cols = torch.cat([torch.arange(j * block_n, min(Nk, (j + 1) * block_n)) for j in J])
        lj = (p[..., cols] * torch.exp(mcol[..., cols] - mf[..., None])).sum(-1)
        if sigma is not None and sink_mode == "init" and i == 0:
            lj = lj + torch.exp(sigma - mf)
        fin.append(mf)
        big_l.append(lj)
    g = torch.stack(fin).amax(0)
    z = sum(lj * torch.exp(mf - g) for mf, lj in zip(fin, big_l))
    if sigma is not None and sink_mode == "final":
        z = z + torch.exp(sigma - g)
    share = torch.empty_like(m)
    for (i, J), mf, lj in zip(parts, fin, big_l):
        share[..., J] = (lj * torch.exp(mf - g))[..., None] if partition else torch.exp(m[..., J] - g[..., None])
    return big_l, share, z


def fragile_split_elements(q, k, *, num_splits, split_layout, p_normalize, order="forward", scale=1.0,
                           fmt="e4m3fn", causal=False, causal_offset=0, block_n=64, sm_scale=None,
                           scale_mode="multiply", rescale_threshold=0.0, sink_logit=None, sink_mode="final",
                           qk_fmt=None, qk_scale="tensor", exp_rel_err=6 * U):
    """:func:`pcast.conformance.fragile_elements` for the split contract (same keys; ``step`` already
    weighted by each split's merge share, ``lx`` = S·Z). Walk-fragile rows (lazy rescaling) are treated
    as wholly fragile, with the grid step at the top of the range ``x·2^τ``."""
    f = None if fmt is None else get_p_format(fmt)
    sm = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    q, k = cast_operand(q, qk_fmt, qk_scale), cast_operand(k, qk_fmt, qk_scale)
    s, err_s = scores64(q, k, causal=causal, sm_scale=sm, causal_offset=causal_offset)
    B, H, Nq, Nk = s.shape
    sigma = None if sink_logit is None else sink_logit.detach().cpu().double().expand(B, H)[..., None].expand(
        B, H, Nq)
    partition, exp2 = p_normalize == "partition", scale_mode == "exp2_offset"
    parts = [(i, J) for i, J in enumerate(split_blocks(-(-Nk // block_n), num_splits, split_layout)) if J]
    opts = dict(block_n=block_n, order=order, partition=partition, sink_mode=sink_mode)
    m, walk = _maxima(s, err_s, sigma, parts, tau=rescale_threshold, **opts)
    col = lambda t: t.repeat_interleave(block_n, dim=-1)[..., :Nk]  # noqa: E731
    mcol = col(m)
    p = torch.exp(s - mcol)  # p at the max in force, per key
    big_l, share, z = _shares(p, m, mcol, sigma, parts, **opts)
    log_tol = 2.0 * err_s.amax(-1, keepdim=True) + (exp_rel_err + 2 * U)
    log2s = log2_scale(scale) if exp2 else 0.0
    if partition:  # l_s: a float32 sum of Nk terms at most (any order), each with exp's error; one division
        lblk = torch.empty_like(m)
        for (_, J), lj in zip(parts, big_l):
            lblk[..., J] = lj[..., None]
        x = p / col(lblk) * scale
        log_tol = log_tol + (Nk * 2 * U + exp_rel_err + 2 * U)
    elif exp2:
        log_tol = log_tol + exp2_arg_tol(s, sigma, log2s)[..., None]
        x = xof(s, mcol, scale=scale, exp2=True, log2s=log2s)
    else:
        x = p * scale
    lx = (2.0**log2s if exp2 else scale) * z
    if f is None:
        zb = torch.zeros_like(x, dtype=torch.bool)
        return {"fragile": zb, "fragile_underflow": zb, "fragile_saturation": zb, "fragile_terms": zb,
                "step": torch.zeros_like(x), "x": x, "l": z, "lx": lx, "walk_fragile": walk}
    out = {**near_boundaries(x, f, log_tol, exp2), "x": x, "l": z, "lx": lx, "walk_fragile": walk}
    if bool(walk.any()):  # any walk keeps x within [x_eager, x_eager·2^τ]: every visible element of the row
        rows = walk[..., None] & ~torch.isneginf(s)
        for key in ("fragile", "fragile_underflow", "fragile_saturation"):
            out[key] = out[key] | rows
        out["step"] = torch.where(rows, (x * 2.0**(rescale_threshold + 1)).clamp(max=f.max_finite), out["step"])
    out["step"] = out["step"] * col(share)
    return out
