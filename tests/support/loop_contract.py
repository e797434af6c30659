"""A slow, direct implementation of the kernel contract, for tests only.

It walks the KV blocks one at a time for all query rows, exactly as the contract in
``kernels.attention``'s docstring and docs/interfaces.md ("P policies") read (each step marked
``# step N: name``, as in the Triton kernel and the emulator), and rounds with the integer
quantizer ``kernels.quantize`` (not the emulator's fast path). It shares no code with the
emulator or the Triton kernel beyond that quantizer, which is itself tested against
torch's float8 cast, and the constants of ``kernels.contract``.

Microscaled FP4 P (``fmt="nvfp4"`` / ``"mxfp4"``, docs/interfaces.md "P in FP4 with microscaling") is
written here group by group from the spec (:func:`_cast_groups`): E4M3 scales and E2M1 elements by
``kernels.quantize``, E8M0 scales from ``frexp``; not ``kernels.formats.microscaling.quantize_mx`` (the
emulator's route).
"""

import math

import torch

from kernels import quantize
from kernels.contract import DIAGNOSTICS, LOG2E, float32, log2_scale
from kernels.formats import get_format
from kernels.formats.microscaling import E2M1, MX_FORMATS, PER_ROW_TARGET


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
    mx = MX_FORMATS.get(fmt) if isinstance(fmt, str) else None  # microscaled P (groups of keys, a scale each)
    per_row = scale_mode == "per_row"
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
        div = scale  # what the block's rounded row sum and (per_row) its p_q·V are divided by
        if per_row:  # S_r = float32(2688 / r), r the block's row max of p; 1 where r = 0
            r = u.amax(-1)
            div = torch.where(r > 0, torch.tensor(PER_ROW_TARGET) / r, torch.tensor(1.0))
            x = u * div[..., None]
        else:
            x = u if exp2 else u * scale
        if mx is not None:
            pq = _cast_groups(x, u, mx, cols < ksink, diag)
        else:
            pq = x if fmt is None else quantize(x, fmt)
        # step 4: row sum
        if rowsum == "unrounded":
            lb = u.sum(-1)
        else:
            lb = pq.sum(-1) if exp2 else pq.sum(-1) / div
        l = l * alpha + lb
        # step 5: accumulate
        pv = torch.matmul(pq, v[:, :, cols])
        acc = acc * alpha[..., None] + (pv / div[..., None] if per_row else pv)
        m = m_new
        _count(diag, u, pq, x, cols < ksink, None if mx is not None else fmt)
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


def _group_scale(amax, mx):
    """A group's scale from its amax >= 0: E4M3 of float32(amax / 6) (nvfp4), or 2^X with
    X = clamp(floor(log2 amax) - 2, -127, 127) (mxfp4; amax = 0: X = -127)."""
    if mx.scale == "e4m3fn":
        return quantize(amax / torch.tensor(6.0), "e4m3fn")
    mant, e = torch.frexp(amax.double())  # amax = mant·2^e, mant in [0.5, 1): floor(log2 amax) = e - 1
    x = torch.where(amax > 0, e - 1 - 2, torch.tensor(-127)).clamp(-127, 127)
    return torch.ldexp(torch.ones_like(amax, dtype=torch.float64), x).float()  # 2^-127: a float32 subnormal


def _cast_groups(x, u, mx, sink, diag):
    """Step 3 for a microscaled format: x [B,H,Nq,n] of one block (n its keys, the last group maybe short:
    the padding keys past N count 0), one group of ``mx.group`` keys at a time from the block's first key.
    Adds the saturated keys, the non-sink keys with u > 0 in flushed groups and the flushed groups."""
    pq = torch.zeros_like(x)
    for g0 in range(0, x.shape[-1], mx.group):
        xg = x[..., g0:g0 + mx.group]
        amax = xg.amax(-1)
        s = _group_scale(amax, mx)[..., None]
        ok = s > 0
        y = xg / torch.where(ok, s, torch.ones_like(s))
        pq[..., g0:g0 + mx.group] = torch.where(ok, quantize(y, E2M1) * s, torch.zeros_like(y))
        flushed = (amax > 0) & ~ok[..., 0]
        diag["saturated"] += (ok & (y > E2M1.max_finite)).sum(-1)
        diag["groups_flushed"] += flushed.to(torch.int64)
        lost = (u[..., g0:g0 + mx.group] > 0) & ~sink[g0:g0 + mx.group] & flushed[..., None]
        diag["underflow_scale"] += lost.sum(-1)
    return pq
