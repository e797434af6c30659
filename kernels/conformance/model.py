"""The float64 model of the contract that :mod:`pcast.conformance` explains differences with.

:func:`fragile_elements` follows the contract's block walk in float64 (scores from the same
FP8-cast operands the implementations use, the running max with the lazy rule and an init
sink, ``x = S·exp(s - m)`` or the exp2-offset ``x = 2^((s - m)·LOG2E + log2_scale(S))``) and
marks the values ``x`` whose FP8 rounding the implementations' float32 errors could flip.

Error bound, per row, on ``ln x`` (natural-log units):

* the fp32 score error ``err`` of ``s`` and of ``m`` (Higham's ``γ_d Σ|q_i k_i|`` plus the rounding
  of ``·sm_scale``), twice: ``2·err``;
* ``exp_rel_err``: the relative error of the exp / exp2 implementation (see :func:`exp_rel_err_for`),
  plus ``2u`` for the product ``p·S`` and the conversion to log units;
* under ``exp2_offset``, the float32 roundings of ``s·LOG2E``, ``m·LOG2E``, ``- log2 S`` and the
  difference: ``ln 2 · u · (2·LOG2E·A + 3·LOG2E·M + 2|log2 S|)`` (A = max|s|, M = max|m| of the row).

Lazy rescaling (``rescale_threshold`` τ > 0) makes the walk itself discontinuous: whether a block
moves the max depends on ``(bm - m)·LOG2E > τ``, and where that value lies within its float32
error (``2·LOG2E·err`` plus 4u relative) of τ, two correct implementations may walk differently.
Such rows are *walk-fragile*: every visible element of the row is treated as fragile, with bounds
that hold for any walk (every walk keeps ``M_j - τ/LOG2E <= m_j <= M_j``, ``M_j`` the eager max, so
``x`` lies within a factor ``2^τ`` above its eager value).

Microscaled FP4 P (``fmt="nvfp4"`` / ``"mxfp4"``, :func:`_mx_boundaries`): each side's float32 x lies in
``[x·e^-tol, x·e^tol]``, so each group's amax lies in the interval of the group's maxima, and (the scale
rule being monotone in amax) its scale is one of the scales of that interval's float32 ends, two adjacent
values at most (tol is ulps, the scale grids' spacing 1/8 relative or more). An element is fragile when its
``p_q = E2M1(x / s)·s`` is not the same over that x interval and those scales: an E2M1 rounding boundary,
or a group's amax at an E4M3 (nvfp4) or power-of-two (mxfp4) boundary of its scale, the flush threshold
included. With ``scale_mode="per_row"`` x = ``2688·p / r`` (r the block's row max of p): both p and r carry
the error, so tol doubles.
"""

from __future__ import annotations

import math

import torch

from pcast.contract import LOG2E, float32, log2_scale
from pcast.emulator.core import operand_cast, running_max
from pcast.formats import FP8Format, get_p_format as get_format
from pcast.formats.microscaling import E2M1, PER_ROW_TARGET, MXFormat, get_mx_format, group_scale, is_mx
from pcast.formats.quantize import quantize
from pcast.reference import causal_mask, expand_kv

__all__ = ["fragile_elements", "exp_rel_err_for", "cast_operand", "EXP_REL_ERR_CPU", "EX2_APPROX_REL_ERR"]

U = 2.0**-24  # unit roundoff of float32 (an ulp of [1, 2) is 2u)
_MIN_NORMAL32 = 2.0**-126  # smallest normal float32: ftz flushes results below it

# Relative error of float32 exp / exp2 on a CPU: 3 ulps (6u), a margin over what the CPU libraries
# do: measured on 8e6 arguments in [-100, 1] (relative error in units of 2^-23): numpy's SIMD exp
# (what Triton's interpreter runs) 1.7, exp2 0.87; torch's exp 0.52, exp2 0.6.
# tests/triton/test_policy_triton.py checks on every run that they stay within this bound.
EXP_REL_ERR_CPU = 6 * U
# PTX ISA 9.1, section 9.7.3.21 (Floating Point Instructions: ex2): "The maximum ulp error is 2 ulp
# from correctly rounded result across the full range of inputs" for ex2.approx.f32, so within
# 2.5 ulp (5u) of the exact 2^a. Compiled Triton runs tl.exp2 and tl.exp (as ex2.approx of
# fl(y·LOG2E)) on it; exp_rel_err_for adds the argument's rounding for tl.exp.
EX2_APPROX_REL_ERR = 5 * U


def exp_rel_err_for(backend: str, *, scale=1.0, fmt="e4m3fn", scale_mode="multiply", rescale_threshold=0.0):
    """The ``exp_rel_err`` that covers ``backend`` (a name of pcast.contract.BACKENDS_RAN).

    "triton-compiled" under ``multiply``: ex2.approx's 5u plus the rounding of its argument ``y·LOG2E``
    (and LOG2E's own), ``2u·|y|``, with ``|y| <= ln(2·S·2^τ / min_subnormal) + 1`` for every element
    that can sit at a rounding boundary (smaller ones round to 0 whatever the error). Under
    ``exp2_offset`` the argument's roundings are already in the bound. Any other backend: the CPU bound."""
    if backend != "triton-compiled":
        return EXP_REL_ERR_CPU
    if scale_mode == "exp2_offset" or fmt is None:
        return max(EX2_APPROX_REL_ERR, EXP_REL_ERR_CPU)
    if is_mx(fmt):  # any p > 0 in float32 has |y| <= 104 (exp(-104) < 2^-149); the scales reach far below
        return max(EX2_APPROX_REL_ERR + 2 * U * (104 + rescale_threshold * math.log(2) + 1), EXP_REL_ERR_CPU)
    f = get_format(fmt)
    y_max = max(math.log(2 * scale / f.min_subnormal), 0.0) + rescale_threshold * math.log(2) + 1
    return max(EX2_APPROX_REL_ERR + 2 * U * y_max, EXP_REL_ERR_CPU)


def cast_operand(t: torch.Tensor, fmt, scale="tensor") -> torch.Tensor:
    """The contract's operand cast ``quantize(t / s_t, fmt)·s_t`` in float32, ``s_t`` per (batch, head):
    ``amax|t| / max_finite`` ("tensor"; 1 where amax is 0) or the given float; ``t`` when fmt is None.
    The emulator's own cast (:func:`pcast.emulator.core.operand_cast`), taking a format name too."""
    if fmt is None:
        return t
    return operand_cast(t, get_format(fmt), scale if isinstance(scale, str) else float(scale))


def scores64(q, k, *, causal, sm_scale, causal_offset=0):
    """float64 scores (masked: -inf) and the per-element bound on the fp32 score error."""
    q64, k64 = q.double(), expand_kv(k, q.shape[1]).double()  # grouped-query attention: H_kv -> H heads
    Nq, Nk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    s = torch.matmul(q64, k64.transpose(-1, -2)) * sm_scale
    # |fl32(q·k) - q·k| <= gamma_n * sum|q_i k_i| (Higham, Thm 3.1); one more rounding for * sm_scale.
    # n: the dot's length as the Triton kernel runs it, d zero-padded to a power of two (a looser,
    # still rigorous bound for the unpadded emulator and loop)
    n = 1 << (d - 1).bit_length()
    gamma = n * U / (1 - n * U)
    sabs = torch.matmul(q64.abs(), k64.abs().transpose(-1, -2)) * sm_scale
    if causal:
        vis = causal_mask(Nq, Nk, device=q.device, offset=causal_offset)
        s = s.masked_fill(~vis, float("-inf"))
        sabs = sabs.masked_fill(~vis, 0.0)
    err_s = sabs * gamma + s.abs().nan_to_num(0.0, posinf=0.0, neginf=0.0) * U
    return s, err_s


def lazy_walk(bm, reverse, tau, m0, err_row):
    """The lazy running max per block, in float64, and the rows whose walk is fragile.

    bm [B,H,Nq,nblk] block maxima; m0 [B,H,Nq] the initial max (-inf, or an init sink's σ);
    err_row [B,H,Nq] the row's score error bound. A decision ``(bm - m)·LOG2E > τ`` is fragile when
    it lies within ``2·LOG2E·err(1 + 4u) + 4u·|d|`` of τ (τ in float32, as the implementations hold it)."""
    tau32 = float32(tau)
    m = m0.clone()
    ms = torch.empty_like(bm)
    fragile = torch.zeros_like(m0, dtype=torch.bool)
    order = range(bm.shape[-1] - 1, -1, -1) if reverse else range(bm.shape[-1])
    for j in order:
        b = bm[..., j]
        d = (b - m) * LOG2E
        finite = torch.isfinite(m) & torch.isfinite(b)
        margin = 2 * LOG2E * err_row * (1 + 4 * U) + 4 * U * d.abs().nan_to_num(0.0, posinf=0.0, neginf=0.0)
        fragile |= finite & ((d - tau32).abs() <= margin)
        m = torch.where(torch.isneginf(m) | (d > tau32), b, m)
        ms[..., j] = m
    return ms, fragile


def _walk(s, err_s, *, reverse, block_n, tau, sink_init):
    """Block maxima, the max in force per block (m_safe) and per key, the eager max per key, walk-fragile rows."""
    B, H, Nq, Nk = s.shape
    nblk = -(-Nk // block_n)
    sp = torch.nn.functional.pad(s, (0, nblk * block_n - Nk), value=float("-inf"))
    bm = sp.view(B, H, Nq, nblk, block_n).amax(-1)
    eager = running_max(bm, reverse)
    if sink_init is not None:
        eager = torch.maximum(eager, sink_init[..., None])
    if tau > 0:
        m0 = sink_init if sink_init is not None else torch.full_like(bm[..., 0], float("-inf"))
        m, walk_fragile = lazy_walk(bm, reverse, tau, m0, err_s.amax(-1))
    else:
        m, walk_fragile = eager, torch.zeros(B, H, Nq, dtype=torch.bool, device=s.device)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    eager = torch.where(torch.isneginf(eager), torch.zeros_like(eager), eager)
    col = lambda t: t.repeat_interleave(block_n, dim=-1)[..., :Nk]  # noqa: E731
    return m, col(m), col(eager), walk_fragile


def fragile_elements(q, k, *, order="forward", scale=1.0, fmt="e4m3fn", causal=False, block_n=64, sm_scale=None,
                     scale_mode="multiply", rescale_threshold=0.0, sink_logit=None, sink_mode="final", qk_fmt=None,
                     qk_scale="tensor", exp_rel_err=EXP_REL_ERR_CPU, causal_offset=0):
    """Elements whose FP8 rounding the implementations' float32 errors could flip.

    The keywords are those of :func:`pcast.attention` (names or formats); ``exp_rel_err`` bounds the
    relative error of exp / exp2 (:func:`exp_rel_err_for`). Returns a dict of tensors [B,H,Nq,Nk]:
    ``fragile`` (near any rounding boundary), ``fragile_underflow`` (near the underflow threshold),
    ``fragile_saturation`` (near max_finite: the saturation count may flip, the output cannot),
    ``fragile_terms`` (exp2_offset only: x below 2^-126, which the compiled kernel's ex2.approx.ftz
    may flush to 0, so terms and underflow may count it on one side only),
    ``step`` (how far p_q may move at a fragile element: one grid step, more in walk-fragile rows),
    ``x`` (the unrounded value cast, float64); and [B,H,Nq]: ``l`` (the float64 row sum in p units at
    the final max, the sink included), ``lx`` (the row sum in x units that output bounds divide by),
    ``walk_fragile`` (rows whose lazy running-max walk may differ: all their visible elements fragile).
    """
    if is_mx(fmt):
        f: FP8Format | MXFormat | None = get_mx_format(fmt)
    else:
        f = None if fmt is None else get_format(fmt)
    sm = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    q, k = cast_operand(q, qk_fmt, qk_scale), cast_operand(k, qk_fmt, qk_scale)
    s, err_s = scores64(q, k, causal=causal, sm_scale=sm, causal_offset=causal_offset)
    sigma = None if sink_logit is None else sink_logit.detach().cpu().double().expand(q.shape[:2])[..., None].expand(
        q.shape[:3])
    reverse = order == "reverse"
    m, mcol, ecol, walk_fragile = _walk(s, err_s, reverse=reverse, block_n=block_n, tau=rescale_threshold,
                                        sink_init=sigma if sink_mode == "init" else None)
    # s - m: both s and m carry that error; exp and the product p*S add exp_rel_err + 2u.
    log_tol = 2.0 * err_s.amax(-1, keepdim=True) + (exp_rel_err + 2 * U)
    m_final = m[..., 0] if reverse else m[..., -1]
    exp2 = scale_mode == "exp2_offset"
    log2s = log2_scale(scale) if exp2 else 0.0
    if exp2:
        log_tol = log_tol + exp2_arg_tol(s, sigma, log2s)[..., None]
        x = xof(s, mcol, scale=scale, exp2=True, log2s=log2s)
        lx = (x * torch.exp2((mcol - m_final[..., None]) * LOG2E)).sum(-1)
        if sigma is not None:
            lx = lx + xof(sigma, m_final, scale=scale, exp2=True, log2s=log2s)
        l = lx / 2.0**log2s
    else:
        p = torch.exp(s - mcol)
        l = (p * torch.exp(mcol - m_final[..., None])).sum(-1)
        if sigma is not None:
            l = l + torch.exp(sigma - m_final)
        x = p * scale
        lx = l * scale
    if f is None:
        z = torch.zeros_like(x, dtype=torch.bool)
        return {"fragile": z, "fragile_underflow": z, "fragile_saturation": z, "fragile_terms": z,
                "step": torch.zeros_like(x), "x": x, "l": l, "lx": lx, "walk_fragile": torch.zeros_like(walk_fragile)}
    if isinstance(f, MXFormat):
        return _mx_fragile(s, mcol, x, l, lx, f, log_tol, walk_fragile, per_row=scale_mode == "per_row",
                           block_n=block_n)
    out = {**near_boundaries(x, f, log_tol, exp2), "x": x, "l": l, "lx": lx, "walk_fragile": walk_fragile}
    if bool(walk_fragile.any()):
        xv = lambda t, mm: xof(t, mm, scale=scale, exp2=exp2, log2s=log2s)  # noqa: E731
        _widen_walk_fragile(out, s, ecol, sigma if sink_mode == "init" else None, sigma, log_tol, f,
                            rescale_threshold, xv, exp2)
    return out


def near_boundaries(x, f: FP8Format, log_tol, exp2):
    """The elements whose x lies within ``log_tol`` of a rounding boundary, the underflow threshold,
    max_finite, or (exp2_offset) the float32 flush-to-zero range; and the grid step at each x."""
    step = _grid_step(x, f)
    lo = torch.floor(x / step) * step
    mid = lo + step / 2
    near = (torch.log(x / mid).abs() <= log_tol) & (x > 0) & (x < f.max_finite)
    # At the underflow threshold mid == min_subnormal / 2; a flip there changes p_q by min_subnormal.
    near_uf = near & (lo == 0)
    near_sat = (x > 0) & (torch.log(x / f.max_finite).abs() <= log_tol)
    # Compiled, tl.exp2 is ex2.approx.ftz.f32: an x below 2^-126 may be flushed to 0 (no term then).
    flush = (x > 0) & (x < _MIN_NORMAL32 * torch.exp(log_tol)) if exp2 else torch.zeros_like(near)
    return {"fragile": near, "fragile_underflow": near_uf, "fragile_saturation": near_sat, "fragile_terms": flush,
            "step": step}


def xof(t, mm, *, scale, exp2, log2s):
    """The contract's unrounded x of logits t at max mm (float64): S·exp(t - mm), or 2^((t - mm)·LOG2E + log2 S)."""
    return torch.exp2((t - mm) * LOG2E + log2s) if exp2 else torch.exp(t - mm) * scale


def _grid_step(x, f: FP8Format):
    """The FP8 grid step at each value of x (float64)."""
    ax = x.clamp_min(f.min_subnormal * 2.0**-30)
    e = torch.floor(torch.log2(ax)).clamp(min=f.emin)
    return torch.exp2(e - f.man_bits)


def exp2_arg_tol(s, sigma, log2s):
    """Per row, in ln units: the float32 roundings of s·LOG2E, m·LOG2E, (m·LOG2E - log2 S) and the exponent."""
    a = s.abs().nan_to_num(0.0, posinf=0.0, neginf=0.0).masked_fill(torch.isneginf(s), 0.0).amax(-1)
    mabs = a if sigma is None else torch.maximum(a, sigma.abs())
    return math.log(2) * U * (2 * LOG2E * a + 3 * LOG2E * mabs + 2 * abs(log2s))


def _widen_walk_fragile(out, s, ecol, sink_init, sigma, log_tol, f: FP8Format, tau, xv, exp2):
    """In walk-fragile rows, bounds that hold whatever walk an implementation took.

    Every walk has ``M_j - τ/LOG2E <= m_j <= M_j`` (M_j the eager max, the init sink included),
    so ``x`` lies in ``[x_eager, x_eager·2^τ]``, widened by the error bound. Each side's rounding
    error of an element is at most half the grid step at the top of that range, or its excess
    over max_finite; the row sum either side divides by is at least the one at the eager final max."""
    visible = ~torch.isneginf(s)
    rows = out["walk_fragile"][..., None] & visible
    x_eager = xv(s, ecol)
    x_lo = x_eager * torch.exp(-log_tol)
    x_hi = x_eager * 2.0**tau * torch.exp(2 * log_tol)
    thr = f.min_subnormal / 2
    both = torch.maximum(_grid_step(x_hi.clamp(max=f.max_finite), f), 2 * (x_hi - f.max_finite))
    out["fragile"] = out["fragile"] | rows
    out["fragile_underflow"] = out["fragile_underflow"] | (rows & (x_lo <= thr) & (x_hi >= thr))
    out["fragile_saturation"] = out["fragile_saturation"] | (rows & (x_hi >= f.max_finite))
    if exp2:
        out["fragile_terms"] = out["fragile_terms"] | (rows & (x_lo < _MIN_NORMAL32))
    out["step"] = torch.where(rows, both, out["step"])  # |p_q,a - p_q,b| <= both sides' errors
    m_top = s.amax(-1) if sink_init is None else torch.maximum(s.amax(-1), sink_init)
    lx_min = xv(s, m_top[..., None]).sum(-1)
    if sigma is not None:
        lx_min = lx_min + xv(sigma, m_top)
    out["lx"] = torch.where(out["walk_fragile"], torch.minimum(out["lx"], lx_min), out["lx"])


def _mx_fragile(s, mcol, x, l, lx, f: MXFormat, log_tol, walk_fragile, *, per_row, block_n):
    """:func:`fragile_elements` for microscaled P: x (static S) or ``2688·p / r`` (per_row), its boundaries
    (:func:`_mx_boundaries`) and, per_row, the step in p units (over S_r) with the row sum in p units."""
    if bool(walk_fragile.any()):
        raise ValueError("rescale_threshold: a lazy walk that may differ is not modelled with a microscaled fmt")
    nk = s.shape[-1]
    blocks = -(-nk // block_n)
    if per_row:  # x = p·S_r, S_r = 2688 / r: the errors of p and of r, and two float32 roundings
        p = torch.nn.functional.pad(torch.exp(s - mcol), (0, blocks * block_n - nk))
        r = p.view(*p.shape[:-1], blocks, block_n).amax(-1, keepdim=True)
        s_r = torch.where(r > 0, PER_ROW_TARGET / r, torch.ones_like(r)).expand(*r.shape[:-1], block_n)
        s_r = s_r.reshape(p.shape)[..., :nk]
        x = p[..., :nk] * s_r
        log_tol = 2 * log_tol + 2 * U
    out = {**_mx_boundaries(x, f, log_tol, block_n), "x": x, "l": l, "lx": lx, "walk_fragile": walk_fragile}
    if per_row:
        out["step"] = out["step"] / s_r  # p_q·V enters acc over S_r; l is in p units (S = 1)
        out["lx"] = l
    return out


def _f32_bracket(t):
    """float32 values just below and just above float64 ``t`` >= 0 (one ulp out after rounding to nearest)."""
    t32 = t.float()
    return torch.nextafter(t32, torch.zeros_like(t32)), torch.nextafter(t32, torch.full_like(t32, math.inf))


def _mx_boundaries(x, f: MXFormat, log_tol, block_n):
    """Per element of x [..., Nk] (float64, >= 0), with each side's x in ``[x·e^-tol, x·e^tol]``: the range of
    p_q over every scale the group may get and every x; fragile where it is not one value. Also the
    underflow (p_q = 0 on one side only), saturation (``x / s > 6`` on one side only) and flush (the group's
    scale 0 on one side only: ``fragile_flush`` keys, ``fragile_groups`` per row) cases."""
    nk = x.shape[-1]
    blocks = -(-nk // block_n)
    xp = torch.nn.functional.pad(x, (0, blocks * block_n - nk))  # padding keys: x = 0, in the last block's groups
    x_lo, x_hi = xp * torch.exp(-log_tol), xp * torch.exp(log_tol)
    groups = lambda t: t.reshape(*t.shape[:-1], -1, f.group)  # noqa: E731
    cands = [group_scale(_f32_bracket(groups(x_lo).amax(-1))[0], f).double(),
             group_scale(_f32_bracket(groups(x_hi).amax(-1))[1], f).double()]
    pq_min = pq_max = None
    sat_any = sat_all = None
    for sc in cands:
        sg = sc[..., None]
        ok = sg > 0
        safe = torch.where(ok, sg, torch.ones_like(sg))
        y_lo = _f32_bracket(groups(x_lo) / safe * (1 - 2 * U))[0]  # the float32 division: one more rounding
        y_hi = _f32_bracket(groups(x_hi) / safe * (1 + 2 * U))[1]
        lo = torch.where(ok, quantize(y_lo, E2M1).double() * sg, torch.zeros_like(sg))
        hi = torch.where(ok, quantize(y_hi, E2M1).double() * sg, torch.zeros_like(sg))
        s_lo, s_hi = ok & (y_lo > f.max_finite), ok & (y_hi > f.max_finite)
        pq_min = lo if pq_min is None else torch.minimum(pq_min, lo)
        pq_max = hi if pq_max is None else torch.maximum(pq_max, hi)
        sat_any = s_hi if sat_any is None else sat_any | s_hi
        sat_all = s_lo if sat_all is None else sat_all & s_lo
    flush = ((cands[0] == 0) != (cands[1] == 0))[..., None] & (groups(xp) > 0)
    keys = lambda t: t.reshape(*t.shape[:-2], -1)[..., :nk]  # noqa: E731
    fragile = keys(pq_max != pq_min) & (x > 0)
    return {"fragile": fragile, "fragile_underflow": fragile & keys(pq_min == 0), "fragile_terms": torch.zeros_like(fragile),
            "fragile_saturation": keys(sat_any & ~sat_all) & (x > 0), "fragile_flush": keys(flush),
            "fragile_groups": flush.any(-1).sum(-1), "step": keys(pq_max - pq_min)}
