"""A slow, direct implementation of the kernel contract, for tests only.

It walks the KV blocks one at a time for all query rows, exactly as the contract in
``pcast.attention``'s docstring and docs/interfaces.md ("P policies") read (each step marked
``# step N: name``, as in the Triton kernel and the emulator), and rounds with the integer
quantizer ``pcast.quantize`` (not the emulator's fast path). It shares no code with the
emulator or the Triton kernel beyond that quantizer, which is itself tested against
torch's float8 cast, and the constants of ``pcast.contract``.

Microscaled FP4 P (``fmt="nvfp4"`` / ``"mxfp4"``, docs/interfaces.md "P in FP4 with microscaling") is
written here group by group from the spec (:func:`_cast_groups`): E4M3 scales and E2M1 elements by
``pcast.quantize``, E8M0 scales from ``frexp``; not ``pcast.formats.microscaling.quantize_mx`` (the
emulator's route).

The FP8 tensor core's P·V (``pv_arith``, ``pv_promote``; docs/interfaces.md "The tensor core's P·V
arithmetic") is written here from that text (:func:`_fdpa`): exponents by ``frexp``, the truncated terms
summed as int64; not ``pcast.emulator.tensorcore``.

``exp_arg="fma"`` (docs/interfaces.md, "Semantics") rounds exp2's argument once, from the exact rational
value of ``s·LOG2E − (m·LOG2E − log2 S)`` (:func:`_fma`); not ``pcast.emulator.ieee.fma32``.
"""

import math
from fractions import Fraction

import numpy as np
import torch

from pcast import quantize
from pcast.contract import DIAGNOSTICS, LOG2E, float32, log2_scale
from pcast.formats import get_p_format as get_format
from pcast.formats.microscaling import E2M1, MX_FORMATS, PER_ROW_TARGET


def cast_operand(t, fmt, scale="tensor"):
    """t' = quantize(t / s_t, fmt) * s_t, one float32 s_t per (batch, head), head by head:
    s_t = amax|t| / max_finite ("tensor"; 1 where amax is 0) or the given float."""
    tq, s = operand_parts(t, fmt, scale)
    return tq * s


def _e8m0_up(amax, max_finite):
    """The least power of two >= amax / max_finite (Python floats: the quotient in float64), its exponent in
    [-127, 127]; 1.0 where amax is 0."""
    if amax == 0.0:
        return 1.0
    e = math.ceil(math.log2(amax / max_finite))
    while 2.0 ** (e - 1) >= amax / max_finite:  # log2's rounding, corrected both ways
        e -= 1
    while 2.0 ** e < amax / max_finite:
        e += 1
    return 2.0 ** min(127, max(-127, e))


def _mx_seq_parts(t, f):
    """(quantize(t / D, fmt), D [B, H, N, d]): one E8M0 D per 32 keys per channel, block by block."""
    out, scales = torch.empty_like(t), torch.empty_like(t)
    B, H, n, d = t.shape
    for b in range(B):
        for h in range(H):
            for j0 in range(0, n, 32):
                for c in range(d):
                    col = t[b, h, j0:j0 + 32, c]
                    dd = torch.tensor(_e8m0_up(float(col.abs().max()), f.max_finite), dtype=torch.float32)
                    out[b, h, j0:j0 + 32, c] = quantize(col / dd, f)
                    scales[b, h, j0:j0 + 32, c] = dd
    return out, scales


def operand_parts(t, fmt, scale="tensor"):
    """(quantize(t / s_t, fmt), s_t [B, H, 1, 1]) of :func:`cast_operand`; ``"tensor_global"``: s_t from the amax
    of all of t; ``"mx_seq32"``: s_t [B, H, N, d], an E8M0 scale (rounded up) per 32 keys per channel."""
    f = get_format(fmt)
    if scale == "mx_seq32":
        return _mx_seq_parts(t, f)
    out = torch.empty_like(t)
    scales = torch.empty(*t.shape[:2], 1, 1)
    for b in range(t.shape[0]):
        for h in range(t.shape[1]):
            th = t[b, h]
            whole = t if scale == "tensor_global" else th
            if scale not in ("tensor", "tensor_global"):
                s_t = torch.tensor(scale, dtype=torch.float32)
            elif float(whole.abs().max()) == 0.0:
                s_t = torch.tensor(1.0)
            else:
                s_t = whole.abs().max() / torch.tensor(f.max_finite, dtype=torch.float32)
            out[b, h] = quantize(th / s_t, f)
            scales[b, h] = s_t
    return out, scales


def _deal(nblk, num_splits, layout):
    """The blocks of each split, ascending (contiguous ranges of ceil(nblk / num_splits), or j mod num_splits)."""
    if layout == "contiguous":
        c = (nblk + num_splits - 1) // num_splits
        return [list(range(s * c, min(nblk, (s + 1) * c))) for s in range(num_splits)]
    return [[j for j in range(nblk) if j % num_splits == s] for s in range(num_splits)]


def _block_scores(q, k, cols, rows, sm, causal, offset):
    """fp32 scores of one block's keys ``cols``, masked keys -inf (key j visible to row i iff j <= i + offset)."""
    s = torch.matmul(q, k[:, :, cols].transpose(-1, -2)) * sm
    if causal:
        s = torch.where(cols[None, :] <= rows + offset, s, torch.tensor(float("-inf")))
    return s


def _walk(q, k, v, blocks, st, o):
    """Steps 1-5 over one split's blocks (in visiting order) from state ``st`` = (m, l, acc); ``o``: the
    call's settings. Partition normalisation first takes the split's exact max and sum (o["part"])."""
    m, l, acc = st
    c = torch.zeros_like(acc)  # the tensor core's accumulator (pv_arith): the MMA's C
    Nq, Nk = q.shape[2], k.shape[2]
    rows = torch.arange(Nq)[:, None]
    exp2, scale, fmt, mx, diag = o["exp2"], o["scale"], o["fmt"], o["mx"], o["diag"]
    part = None
    if o["partition"]:  # the split's exact max m_s and sum l_s, float32, before any cast
        ss = torch.cat([_block_scores(q, k, _cols(j, o), rows, o["sm"], o["causal"], o["offset"]) for j in blocks], -1)
        m = torch.maximum(m, ss.amax(-1)) if o["seeded"] else ss.amax(-1)
        m_use = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        part = torch.exp(ss - m_use[..., None]).sum(-1) + (torch.exp(o["sigma"] - m_use) if o["seeded"] else 0.0)
        l = part
    for i, j in enumerate(blocks):
        cols = _cols(j, o)
        # step 1: scores
        s = _block_scores(q, k, cols, rows, o["sm"], o["causal"], o["offset"])
        # step 2: running max
        bm = s.amax(-1)
        m_new = m if part is not None else torch.where(torch.isneginf(m) | ((bm - m) * LOG2E > o["tau"]), bm, m)
        m_use = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        if exp2:
            off = (m_use * LOG2E - o["log2s"])[..., None]  # x; p*S is never formed
            u = torch.exp2(_fma(s, -off) if o["fma"] else s * LOG2E - off)
            alpha = torch.exp2(m * LOG2E - m_use * LOG2E)
        else:
            u = torch.exp(s - m_use[..., None])  # p
            alpha = torch.ones_like(m) if part is not None else torch.exp(m - m_use)
        # step 3: cast
        div = scale  # what the block's rounded row sum and (a dynamic scale) its p_q·V are divided by
        if o["per_row"]:  # S_r = float32(target / r), r the block's row (or row tile's) max of p; 1 where r = 0
            r = _region_max(u.amax(-1), o["tile"])
            div = torch.where(r > 0, torch.tensor(o["target"], dtype=torch.float32) / r, torch.tensor(1.0))
            x = u * div[..., None]
        elif part is not None:  # partition: x = (p / l_s)·S
            x = u / torch.where(part > 0, part, torch.ones_like(part))[..., None] * scale
        else:
            x = u if exp2 else u * scale
        if mx is not None:
            pq = _cast_groups(x, u, mx, cols < o["ksink"], diag)
        else:
            pq = x if fmt is None else quantize(x, fmt)
        # step 4: row sum
        if part is None:
            lb = u.sum(-1) if o["rowsum"] == "unrounded" else (pq.sum(-1) if exp2 else pq.sum(-1) / div)
            l = l * alpha + lb
        # step 5: accumulate
        if o["tc"] is not None:  # the tensor core: c = c·alpha, the block's chunks into c, promoted every n blocks
            c, acc = c * alpha[..., None], acc * alpha[..., None]
            c = _mma_block(pq, v, cols, c, o)
            if o["promote"] and ((i + 1) % o["promote"] == 0 or i == len(blocks) - 1):
                acc, c = acc + c, torch.zeros_like(c)
        else:
            pv = torch.matmul(pq, v[:, :, cols])
            acc = acc * alpha[..., None] + (pv / div[..., None] if o["per_row"] else pv)
        m = m_new
        _count(diag, u, pq, x, cols < o["ksink"], None if mx is not None else fmt)
    if o["tc"] is not None:  # V's scale after the products (n = 0: c is the accumulator)
        acc = (acc if o["promote"] else c) * o["s_v"]
    return m, l, acc


#: Per pv_arith: products per fused sum L, alignment bits F, result fraction bits.
_TENSOR_CORES = {"mma-sm89": (16, 13, 13), "wgmma-sm90": (32, 13, 13), "tcgen05-sm100": (32, 25, 23)}
_SUBNORMAL_EXP = {"e4m3fn": -6, "e5m2": -14}
_E_ZERO = -133


def _mma_block(pq, v, cols, c, o):
    """One block's P·V into the MMA accumulator c: its keys padded with zeros to ``block_n``, then one fused
    sum (:func:`_fdpa`) per chunk of L keys, ascending."""
    L = _TENSOR_CORES[o["tc"]][0]
    n = len(cols)
    a = torch.nn.functional.pad(pq, (0, o["block_n"] - n))
    b = torch.nn.functional.pad(v[:, :, cols], (0, 0, 0, o["block_n"] - n))
    for k0 in range(0, o["block_n"], L):
        c = _fdpa(a[..., k0:k0 + L], b[:, :, k0:k0 + L], c, o)
    return c


def _exponent(x, emin):
    """int64 e of each x = s·2^e with 1 <= |s| < 2, at least emin (subnormals; callers replace zeros' e)."""
    return (torch.frexp(x.double())[1].long() - 1).clamp(min=emin)


def _times_pow2(x, e):
    """float64 x·2^e, e int64 (a power of two from float64's pow: exact in the range used here)."""
    return x * torch.full(e.shape, 2.0, dtype=torch.float64).pow(e.double())


def _fdpa(a, b, c, o):
    """c + Σ_k a_k·b_k per output element, as docs/interfaces.md writes fdpa: a [B,H,Nq,L], b [B,H,L,d] FP8
    values, c [B,H,Nq,d] float32."""
    _, F, bits = _TENSOR_CORES[o["tc"]]
    prod = a.double()[..., :, None] * b.double()[:, :, None]  # [B,H,Nq,L,d], exact
    e_p = _exponent(a, _SUBNORMAL_EXP[o["p_fmt"]])[..., :, None] + _exponent(b, _SUBNORMAL_EXP[o["v_fmt"]])[:, :, None]
    e_p = torch.where(prod == 0, torch.tensor(_E_ZERO), e_p)
    e_c = torch.where(c == 0, torch.tensor(_E_ZERO), _exponent(c, -126))
    e_max = torch.maximum(e_p.amax(-2), e_c)  # [B,H,Nq,d]
    terms = torch.trunc(_times_pow2(prod, (F - e_max)[..., None, :])).long().sum(-2)
    total = terms + torch.trunc(_times_pow2(c.double(), F - e_max)).long()  # exact integers
    x = _times_pow2(total.double(), e_max - F)
    step_e = _exponent(x, -126) - bits
    out = _times_pow2(torch.trunc(_times_pow2(x, -step_e)), step_e).float()
    return out + 0.0  # -0 becomes +0


def _region_max(r, tile):
    """Each row's max over its tile of ``tile`` rows (rows 0..tile-1, tile..2·tile-1, ...); ``tile`` 0: r."""
    if not tile:
        return r
    out = r.clone()
    for i in range(0, r.shape[-1], tile):
        out[..., i:i + tile] = r[..., i:i + tile].amax(-1, keepdim=True)
    return out


def _fma(s, c):
    """float32 ``s·LOG2E + c`` rounded once, element by element from the exact rational value
    (``exp_arg="fma"``): the nearest float32, ties to the even significand."""
    ex = (Fraction(float(LOG2E)) * Fraction(a) + Fraction(b) if math.isfinite(a) else a for a, b in
          zip(s.flatten().tolist(), c.expand_as(s).flatten().tolist()))
    return torch.tensor([_nearest32(e) for e in ex], dtype=torch.float32).view(s.shape)


def _nearest32(e):
    """The float32 nearest the rational (or infinite) ``e``, ties to the even significand."""
    if not isinstance(e, Fraction):
        return e
    f = np.float32(float(e))
    near = [f, np.nextafter(f, np.float32(np.inf)), np.nextafter(f, np.float32(-np.inf))]
    return float(min(near, key=lambda y: (abs(Fraction(float(y)) - e), int(y.view(np.int32)) & 1)))


def _cols(j, o):
    return torch.arange(j * o["block_n"], min(o["nk"], (j + 1) * o["block_n"]))


def loop_attention(q, k, v, *, order="forward", scale=1.0, fmt="e4m3fn", causal=False, ksink=0, block_n=64,
                   sm_scale=None, rowsum="unrounded", scale_mode="multiply", rescale_threshold=0.0, sink_logit=None,
                   sink_mode="final", qk_fmt=None, qk_scale="tensor", v_fmt=None, v_scale="tensor", num_splits=1,
                   split_layout="contiguous", p_normalize="online", causal_align=None, pv_arith="fp32", block_m=64,
                   pv_promote=0, exp_arg="rounded"):
    """q [B,H,Nq,d], k and v [B,H_kv,Nk,d] float32 (H_kv dividing H) -> (out [B,H,Nq,d] float32, dict of
    int64 [B,H,Nq] diagnostics and float32 ``lse``).

    The keywords are those of ``pcast.attention`` (names and strings, not resolved objects);
    ``sink_logit`` is None or float32 [H] or [B, H]. Splits (``num_splits``, ``split_layout``), partition
    normalisation and the merge follow docs/interfaces.md ("Decode-time attention"). Dynamic scales
    (``scale_mode`` ``"per_row"`` or its alias ``"row_block_max"``, ``"tile_max"``, ``"tile_max_padded"``,
    docs/interfaces.md "Dynamic P scales"): ``tile_max_padded`` appends rows of q = 0 up to whole tiles of
    ``block_m`` rows, runs them as rows of their own, and drops them from the result.
    """
    scale_mode = {"row_block_max": "per_row"}.get(scale_mode, scale_mode)
    nq0 = q.shape[2]
    if scale_mode == "tile_max_padded" and nq0 % block_m:
        q = torch.cat([q, torch.zeros(*q.shape[:2], block_m - nq0 % block_m, q.shape[3])], 2)
    B, H, Nq, d = q.shape
    Nk = k.shape[-2]
    exp2 = scale_mode == "exp2_offset"
    log2s = log2_scale(scale)
    if qk_fmt is not None:
        q, k = cast_operand(q, qk_fmt, qk_scale), cast_operand(k, qk_fmt, qk_scale)
    s_v = None
    if v_fmt is not None and pv_arith != "fp32" and v_scale == "mx_seq32":
        raise ValueError("v_scale='mx_seq32' takes pv_arith='fp32' (the MMA's s_v is one per (batch, head))")
    if v_fmt is not None and pv_arith != "fp32":  # the MMA takes V's FP8 values; s_v multiplies after step 5
        v, s_v = operand_parts(v, v_fmt, v_scale)
    elif v_fmt is not None:
        v = cast_operand(v, v_fmt, v_scale)
    # grouped-query attention, indexed here (the kernel and the emulator expand with repeat_interleave,
    # after or before the casts: the same numbers, since a cast's scale is per (batch, key/value head))
    kv_of = torch.arange(H) // (H // k.shape[1])  # query head h reads key/value head h // (H / H_kv)
    k, v = k[:, kv_of], v[:, kv_of]
    s_v = None if s_v is None else s_v[:, kv_of]
    sigma = None if sink_logit is None else sink_logit.float().expand(B, H)[..., None].expand(B, H, Nq)
    o = dict(exp2=exp2, log2s=log2s, scale=scale, fmt=fmt, rowsum=rowsum, ksink=ksink, block_n=block_n, nk=Nk,
             sm=1.0 / math.sqrt(d) if sm_scale is None else sm_scale, causal=causal, sigma=sigma,
             offset=Nk - nq0 if causal_align == "bottom_right" else 0,
             per_row=scale_mode in ("per_row", "tile_max", "tile_max_padded"),
             tile=block_m if scale_mode in ("tile_max", "tile_max_padded") else 0,
             target=(PER_ROW_TARGET if fmt in MX_FORMATS else get_format(fmt).max_finite) if fmt is not None else 0,
             mx=MX_FORMATS.get(fmt) if isinstance(fmt, str) else None, tau=torch.tensor(float32(rescale_threshold)),
             partition=p_normalize == "partition", tc=None if pv_arith == "fp32" else pv_arith, promote=pv_promote,
             s_v=s_v, p_fmt=fmt, v_fmt=v_fmt, fma=exp_arg == "fma",
             diag={n: torch.zeros(B, H, Nq, dtype=torch.int64) for n in DIAGNOSTICS})
    nblk = (Nk + block_n - 1) // block_n
    states = []
    for si, blocks in enumerate(_deal(nblk, num_splits, split_layout)):
        o["seeded"] = sigma is not None and sink_mode == "init" and si == 0
        m = sigma.clone() if o["seeded"] else torch.full((B, H, Nq), float("-inf"))
        l = torch.zeros(B, H, Nq)
        if o["seeded"]:  # the sink seeds the max, and l holds the sink's own unrounded value
            l = torch.exp2(sigma * LOG2E - (sigma * LOG2E - log2s)) if exp2 else torch.ones(B, H, Nq)
        if blocks:
            states.append(_walk(q, k, v, blocks[::-1] if order == "reverse" else blocks, (m, l, torch.zeros(B, H, Nq, d)), o))
    # step 6: normalise
    final = sigma if sigma is not None and sink_mode == "final" else None
    if num_splits == 1 and p_normalize == "online":
        (m, l, acc), = states
        mf = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        if final is not None:
            l = l + (torch.exp2(final * LOG2E - (mf * LOG2E - log2s)) if exp2 else torch.exp(final - mf))
        out = acc / l[..., None] if exp2 else acc / (l * scale)[..., None]
        diag = {**o["diag"], "lse": _lse(mf, l, exp2, log2s)}
        return out[:, :, :nq0], {n: t[:, :, :nq0] for n, t in diag.items()}  # (tile_max_padded: its q = 0 rows dropped)
    return _merge(states, final, o)


def _lse(m, l, exp2, log2s):
    return m + torch.log(l) - log2s * math.log(2.0) if exp2 else m + torch.log(l)


def _merge(states, final, o):
    """The merge of the splits' (m, l, acc): lse_s, O_s, then FlashAttention-3's combine in float32."""
    lses, outs = [], []
    for m, l, acc in states:
        mf = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        if o["partition"]:
            lses.append(mf + torch.log(l))
            outs.append(acc / o["scale"])
        else:
            lses.append(_lse(mf, l, o["exp2"], o["log2s"]))
            outs.append(acc / l[..., None] if o["exp2"] else acc / (l * o["scale"])[..., None])
    big = torch.stack(lses).amax(0)
    den, num = torch.zeros_like(big), torch.zeros_like(outs[0])
    for lse_s, o_s in zip(lses, outs):
        w = torch.exp(lse_s - big)
        den = den + w
        num = num + w[..., None] * torch.where(torch.isneginf(lse_s)[..., None], torch.zeros_like(o_s), o_s)
    if final is not None:
        den = den + torch.exp(final - big)
    return num / den[..., None], {**o["diag"], "lse": big + torch.log(den)}


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
