"""Conformance of two implementations of the contract, with every difference explained.

Two correct implementations of the contract can still differ: their fp32 score
``s = q·kᵀ·sm_scale`` comes from different matmuls (different summation order), and
``exp`` differs by an ulp between libraries. When ``p·S`` lies within that error of
an FP8 rounding boundary (the midpoint between two grid values, or half the smallest
subnormal), the two may round it differently. :func:`fragile_elements` (the float64 model
of the contract in :mod:`pcast.conformance.model`, every policy option included) finds those
elements from float64 scores and a rigorous bound on the fp32 score error and on the exp / exp2
implementation's error (``exp_rel_err``), and :func:`explain` accepts a difference only where
such elements account for it:

* per row, ``|Δ underflow|`` and ``|Δ underflow_sink|`` may not exceed the number of
  fragile elements that sit at the underflow threshold (non-sink and sink);
* per row, ``|Δ saturated|`` may not exceed the number of elements within the bound of
  max_finite (only lazy rescaling, or S >= max_finite, puts x there);
* under ``exp2_offset``, ``terms`` and ``underflow`` may also differ by the elements whose x lies
  below 2^-126, which the compiled kernel's ``ex2.approx.ftz.f32`` flushes to zero;
* microscaled P (nvfp4, mxfp4): ``|Δ underflow_scale|`` may not exceed the non-sink keys > 0 of the
  groups whose scale may flush on one side only, and ``|Δ groups_flushed|`` those groups; an element is
  fragile (underflow, saturation, output) where its E2M1 rounding or its group's scale (amax at an E4M3
  or power-of-two boundary) may differ within the error bound;
* per row, ``|Δ out|`` may not exceed ``tol·max|out|`` plus the largest change
  the fragile elements can make: one grid step each, times ``|v|``, over ``l·S``.

Under lazy rescaling (``rescale_threshold`` > 0) the running-max walk can itself differ, where
a decision ``(bm - m)·LOG2E > τ`` lies within its float32 error of τ: such rows are treated as
fragile throughout (every visible element), with bounds that hold for any walk, and
:func:`explain` says how many there were.

Everything else (terms, rows without fragile elements) must match exactly,
up to ``tol`` for outputs.
"""

from __future__ import annotations

import torch

from pcast.api import attention
from pcast.contract import DIAGNOSTICS, causal_offset
from pcast.conformance.splits import fragile_split_elements
from pcast.conformance.model import EX2_APPROX_REL_ERR, EXP_REL_ERR_CPU, cast_operand, exp_rel_err_for, fragile_elements
from pcast.reference import expand_kv

__all__ = ["fragile_elements", "explain", "compare", "exp_rel_err_for", "EXP_REL_ERR_CPU", "EX2_APPROX_REL_ERR"]


def explain(a, b, q, k, v, *, order="forward", scale=1.0, fmt="e4m3fn", causal=False, ksink=0, block_n=64,
            sm_scale=None, tol=1e-5, fragile=None, scale_mode="multiply", rescale_threshold=0.0, sink_logit=None,
            sink_mode="final", qk_fmt=None, qk_scale="tensor", v_fmt=None, v_scale="tensor",
            exp_rel_err=EXP_REL_ERR_CPU, num_splits=1, split_layout="contiguous", p_normalize="online",
            causal_align=None):
    """Compare two :class:`~pcast.AttentionResult` of the same call; explain every difference.

    The keywords are those of the call (:func:`pcast.attention`'s), plus ``tol`` (relative output
    tolerance on rows without fragile elements) and ``exp_rel_err`` (see :func:`exp_rel_err_for`: it
    must cover both sides' exp / exp2). Returns a dict: ``max_abs_diff``, ``max_rel_diff`` (relative to
    max|out|), ``diag_equal`` (all seven diagnostics identical), ``mismatched_rows``, ``fragile_elements``,
    ``walk_fragile_rows`` (rows whose lazy running-max walk may differ), ``explained`` (True when every
    difference is accounted for), ``why`` (text). ``fragile`` may pass :func:`fragile_elements` of the
    same call, computed once for several comparisons. ``num_splits``, ``split_layout``, ``p_normalize`` and
    ``causal_align`` select the split contract's model (:mod:`pcast.conformance.splits`); where both results
    carry ``lse``, it must agree within ``tol`` (relative to 1 + ``|lse|``) plus what fragile elements can move a
    rounded row sum by.
    """
    diffs = {n: (getattr(a, n).cpu() - getattr(b, n).cpu()) for n in DIAGNOSTICS}
    mism = torch.zeros_like(diffs["terms"], dtype=torch.bool)
    for t in diffs.values():
        mism |= t != 0
    oa, ob = a.out.detach().cpu().double(), b.out.detach().cpu().double()
    dout = (oa - ob).abs()
    scale_out = max(float(ob.abs().max()), 1e-30)
    fr = fragile if fragile is not None else _model(
        q.cpu(), k.cpu(), (num_splits, split_layout, p_normalize),
        order=order, scale=scale, fmt=fmt, causal=causal, block_n=block_n, sm_scale=sm_scale, scale_mode=scale_mode,
        rescale_threshold=rescale_threshold, sink_logit=None if sink_logit is None else sink_logit.cpu(),
        sink_mode=sink_mode, qk_fmt=qk_fmt, qk_scale=qk_scale, exp_rel_err=exp_rel_err,
        causal_offset=causal_offset(causal_align, q.shape[2], k.shape[2]) if causal else 0)
    frag = fr["fragile"]
    ok, why = _check_diagnostics(diffs, fr, ksink, k.shape[-2])
    v_eff = cast_operand(v.detach().cpu(), v_fmt, v_scale)  # the V' every implementation multiplies by
    bad = dout.amax(-1) > _output_bound(fr, v_eff, oa, tol=tol, scale_out=scale_out)
    if bool(bad.any()):
        ok = False
        why.append(f"outputs differ beyond the bound in {int(bad.sum())} rows")
    ok, clean = _check_lse(a, b, fr, tol, why) and ok, ~frag.any(-1)
    max_rel = float(dout.max()) / scale_out
    max_rel_clean = float(dout.amax(-1)[clean].max()) / scale_out if bool(clean.any()) else 0.0
    if max_rel_clean > tol:
        ok = False
        why.append(f"rows without fragile elements differ by {max_rel_clean:.3g} > {tol:g} relative")
    walk = int(fr.get("walk_fragile", torch.zeros(0, dtype=torch.bool)).sum())
    text = "; ".join(why) if why else "identical up to tolerance" if not bool(mism.any()) else \
        "every difference sits on a rounding boundary within the fp32 score error"
    if walk:
        text += (f" ({walk} rows have a lazy-rescale decision within the fp32 score error of tau: their running max"
                 " may move at different blocks, so every element of those rows is treated as fragile)")
    return {
        "max_abs_diff": float(dout.max()),
        "max_rel_diff": max_rel,
        "diag_equal": not bool(mism.any()),
        "mismatched_rows": int(mism.sum()),
        "fragile_elements": int(frag.sum()),
        "walk_fragile_rows": walk,
        "explained": ok,
        "why": text,
    }


def _model(q, k, splits, **kw):
    """The fragile elements of the call: the split contract's model (several splits or partition P), else the
    single pass's."""
    num_splits, split_layout, p_normalize = splits
    if num_splits > 1 or p_normalize != "online":
        return fragile_split_elements(q, k, num_splits=num_splits, split_layout=split_layout, p_normalize=p_normalize,
                                      **kw)
    return fragile_elements(q, k, **kw)


def _check_lse(a, b, fr, tol, why) -> bool:
    """Where both results carry ``lse``: per row, ``|Δlse| <= tol·(1 + ``|lse|``) + 1e-6·(1 + ``|lse|``)`` (float32's
    own rounding of m + ln l) plus the fragile elements' share of the row sum (a rounded row sum moves)."""
    la, lb = getattr(a, "lse", None), getattr(b, "lse", None)
    if la is None or lb is None:
        return True
    la, lb = la.detach().cpu().double(), lb.detach().cpu().double()
    flip = (fr["step"] * fr["fragile"]).sum(-1) / fr["lx"].clamp_min(1e-300)
    allowed = (tol + 1e-6) * (1 + lb.abs()) + flip
    bad = (la - lb).abs() > allowed
    if bool(bad.any()):
        why.append(f"lse differs beyond the bound in {int(bad.sum())} rows (max {float((la - lb).abs().max()):.3g})")
        return False
    return True


def _check_diagnostics(diffs, fr, ksink, nk):
    """Per row: terms must match; underflow and saturated counts may differ only by fragile elements."""
    ks = min(ksink, nk)
    sink_cols = torch.zeros(nk, dtype=torch.bool)
    sink_cols[:ks] = True
    fu = fr["fragile_underflow"]
    fu_ns = (fu & ~sink_cols).sum(-1)
    fu_s = (fu & sink_cols).sum(-1)
    fsat = fr.get("fragile_saturation", torch.zeros_like(fu)).sum(-1)
    ft = fr.get("fragile_terms", torch.zeros_like(fu))  # x a flush to zero may drop (exp2_offset, compiled)
    ft_ns, ft_s = (ft & ~sink_cols).sum(-1), (ft & sink_cols).sum(-1)
    why = []
    ok = True
    for n, allowed in (("terms", ft_ns), ("terms_sink", ft_s)):
        if bool((diffs[n].abs() > allowed).any()):
            ok = False
            why.append(f"{n} differs in {int((diffs[n] != 0).sum())} rows (no rounding can explain it)")
    if bool((diffs["saturated"].abs() > fsat).any()):
        ok = False
        why.append(f"saturated differs in {int((diffs['saturated'].abs() > fsat).sum())} rows by more than the "
                   "elements within the error bound of max_finite")
    ff = fr.get("fragile_flush", torch.zeros_like(fu))  # keys of groups whose scale may flush on one side only
    if bool((diffs["underflow_scale"].abs() > (ff & ~sink_cols).sum(-1)).any()):
        ok = False
        why.append("underflow_scale differs by more than the keys of groups at the scale's flush threshold")
    if bool((diffs["groups_flushed"].abs() > fr.get("fragile_groups", torch.zeros_like(fsat))).any()):
        ok = False
        why.append("groups_flushed differs by more than the groups at the scale's flush threshold")
    if bool((diffs["underflow"].abs() > fu_ns + ft_ns).any()) or bool(
            (diffs["underflow_sink"].abs() > fu_s + ft_s).any()):
        ok = False
        why.append("an underflow count differs by more than the fragile elements at the threshold")
    return ok, why


def _output_bound(fr, v, oa, *, tol, scale_out):
    """Per row: how far two outputs may differ, given the fragile elements ``fr`` of the call.

    ``tol·max|out|`` plus, over fragile elements, ``step·|v| / lx`` (lx = l·S, the row sum in the
    units of x), and the same again times ``|out|`` for the row sum when p_q enters it (rowsum="rounded").
    """
    frag = fr["fragile"]
    vabs = expand_kv(v.cpu(), fr["fragile"].shape[1]).double().abs().amax(-1)  # [B,H,Nk] (GQA: H_kv -> H)
    flip = (fr["step"] * frag).mul(vabs[..., None, :]).sum(-1)
    flip_l = (fr["step"] * frag).sum(-1)
    denom = fr["lx"].clamp_min(1e-300)
    return tol * scale_out + (flip + flip_l * oa.abs().amax(-1)) / denom


_POLICY_DEFAULTS = dict(scale_mode="multiply", rescale_threshold=0.0, sink_logit=None, sink_mode="final", qk_fmt=None,
                        qk_scale="tensor", v_fmt=None, v_scale="tensor", num_splits=1, split_layout="contiguous",
                        p_normalize="online", causal_align=None)


def compare(q, k, v, *, order="forward", scale=1.0, fmt="e4m3fn", causal=False, ksink=0, block_m=64, block_n=64,
            sm_scale=None, rowsum="unrounded", tol=1e-5, **policy):
    """Run the Triton kernel (compiled on a GPU, interpreted on CPU) and the emulator on the same
    inputs and :func:`explain` the differences. Adds ``kernel_backend`` to the returned dict.

    ``policy``: the P-policy keywords of :func:`pcast.attention` (``scale_mode``,
    ``rescale_threshold``, ``sink_logit``, ``sink_mode``, ``qk_fmt``, ``qk_scale``, ``v_fmt``,
    ``v_scale``) and the decode keywords (``num_splits``, ``split_layout``, ``p_normalize``, ``causal_align``).
    ``exp_rel_err`` is picked by the backend that ran (:func:`exp_rel_err_for`)."""
    unknown = sorted(set(policy) - set(_POLICY_DEFAULTS))
    if unknown:
        raise ValueError(f"compare() got unknown keywords {unknown}; allowed: {', '.join(_POLICY_DEFAULTS)}")
    opts = {**_POLICY_DEFAULTS, **policy}
    kw = dict(order=order, scale=scale, fmt=fmt, causal=causal, ksink=ksink, block_m=block_m, block_n=block_n,
              sm_scale=sm_scale, rowsum=rowsum, **opts)
    a = attention(q, k, v, backend="triton", **kw)
    b = attention(q, k, v, backend="emulator", **kw)
    err = max(exp_rel_err_for(r.backend, scale=scale, fmt=fmt, scale_mode=opts["scale_mode"],
                              rescale_threshold=opts["rescale_threshold"]) for r in (a, b))
    rep = explain(a, b, q, k, v, order=order, scale=scale, fmt=fmt, causal=causal, ksink=ksink, block_n=block_n,
                  sm_scale=sm_scale, tol=tol, exp_rel_err=err, **opts)
    rep["kernel_backend"] = a.backend
    return rep
