"""Conformance of two implementations of the contract, with every difference explained.

Two correct implementations of the contract can still differ: their fp32 score
``s = q·kᵀ·sm_scale`` comes from different matmuls (different summation order), and
``exp`` differs by an ulp between libraries. When ``p·S`` lies within that error of
an FP8 rounding boundary (the midpoint between two grid values, or half the smallest
subnormal), the two may round it differently. :func:`fragile_elements` finds those
elements from float64 scores and a rigorous bound on the fp32 score error, and
:func:`explain` accepts a difference only where such elements account for it:

* per row, ``|Δ underflow|`` and ``|Δ underflow_sink|`` may not exceed the number of
  fragile elements that sit at the underflow threshold (non-sink and sink);
* per row, ``|Δ out|`` may not exceed ``tol·max|out|`` plus the largest change
  the fragile elements can make: one grid step each, times ``|v|``, over ``l·S``.

Everything else (terms, saturated, rows without fragile elements) must match exactly,
up to ``tol`` for outputs.
"""

from __future__ import annotations

import math

import torch

from .contract import DIAGNOSTICS
from .emulator import running_max
from .formats import FP8Format, get_format
from .reference import causal_mask

__all__ = ["fragile_elements", "explain", "compare"]

_U = 2.0**-24  # unit roundoff of float32


def _contract_probs64(q, k, *, reverse, causal, block_n, sm_scale):
    """float64 scores through the contract's block walk, and a bound on the error of ln p in fp32.

    Returns (p [B,H,Nq,Nk], m per block [B,H,Nq,nblk], m per key [B,H,Nq,Nk], log_tol [B,H,Nq,1]).
    """
    q64, k64 = q.double(), k.double()
    B, H, Nq, d = q.shape
    Nk = k.shape[-2]
    s = torch.matmul(q64, k64.transpose(-1, -2)) * sm_scale
    # |fl32(q·k) - q·k| <= gamma_d * sum|q_i k_i| (Higham, Thm 3.1); one more rounding for * sm_scale.
    gamma = d * _U / (1 - d * _U)
    sabs = torch.matmul(q64.abs(), k64.abs().transpose(-1, -2)) * sm_scale
    if causal:
        vis = causal_mask(Nq, Nk, device=q.device)
        s = s.masked_fill(~vis, float("-inf"))
        sabs = sabs.masked_fill(~vis, 0.0)
    err_s = sabs * gamma + s.abs().nan_to_num(0.0, posinf=0.0, neginf=0.0) * _U
    # s - m: both s and m carry that error; exp and the product p*S add a few ulps.
    log_tol = 2.0 * err_s.amax(-1, keepdim=True) + 8 * _U
    nblk = -(-Nk // block_n)
    pad = nblk * block_n - Nk
    sp = torch.nn.functional.pad(s, (0, pad), value=float("-inf"))
    bm = sp.view(B, H, Nq, nblk, block_n).amax(-1)
    m = running_max(bm, reverse)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    mcol = m.repeat_interleave(block_n, dim=-1)[..., :Nk]
    p = torch.exp(s - mcol)
    return p, m, mcol, log_tol


def fragile_elements(q, k, *, order="forward", scale=1.0, fmt="e4m3fn", causal=False, block_n=64, sm_scale=None):
    """Elements whose FP8 rounding fp32 score error could flip.

    Returns a dict of float64/bool tensors [B,H,Nq,Nk]: ``fragile`` (near any rounding
    boundary), ``fragile_underflow`` (near the underflow threshold), ``step`` (the grid
    step a flip changes ``p_q`` by), ``x`` (p·S in float64) and ``l`` [B,H,Nq] (the
    float64 row sum in the final max's units).
    """
    f: FP8Format | None = None if fmt is None else get_format(fmt)
    d = q.shape[-1]
    sm = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    p, m, mcol, log_tol = _contract_probs64(q, k, reverse=order == "reverse", causal=causal, block_n=block_n,
                                            sm_scale=sm)
    m_final = m[..., 0] if order == "reverse" else m[..., -1]
    l = (p * torch.exp(mcol - m_final[..., None])).sum(-1)
    x = p * scale
    if f is None:
        z = torch.zeros_like(x, dtype=torch.bool)
        return {"fragile": z, "fragile_underflow": z, "step": torch.zeros_like(x), "x": x, "l": l}
    ax = x.clamp_min(f.min_subnormal * 2.0**-30)
    e = torch.floor(torch.log2(ax)).clamp(min=f.emin)
    step = torch.exp2(e - f.man_bits)
    lo = torch.floor(x / step) * step
    mid = lo + step / 2
    near = (torch.log(x / mid).abs() <= log_tol) & (x > 0) & (x < f.max_finite)
    # At the underflow threshold mid == min_subnormal / 2; a flip there changes p_q by min_subnormal.
    near_uf = near & (lo == 0)
    return {"fragile": near, "fragile_underflow": near_uf, "step": step, "x": x, "l": l}


def explain(a, b, q, k, v, *, order="forward", scale=1.0, fmt="e4m3fn", causal=False, ksink=0, block_n=64,
            sm_scale=None, tol=1e-5, fragile=None):
    """Compare two :class:`~kernels.api.AttentionResult` of the same call; explain every difference.

    Returns a dict: ``max_abs_diff``, ``max_rel_diff`` (relative to max|out|), ``diag_equal`` (all five diagnostics identical), ``mismatched_rows``,
    ``fragile_elements``, ``explained`` (True when every difference is accounted for), ``why`` (text).
    ``fragile`` may pass :func:`fragile_elements` of the same call, computed once for several comparisons.
    """
    diffs = {n: (getattr(a, n).cpu() - getattr(b, n).cpu()) for n in DIAGNOSTICS}
    mism = torch.zeros_like(diffs["terms"], dtype=torch.bool)
    for t in diffs.values():
        mism |= t != 0
    oa, ob = a.out.detach().cpu().double(), b.out.detach().cpu().double()
    dout = (oa - ob).abs()
    scale_out = max(float(ob.abs().max()), 1e-30)
    fr = fragile if fragile is not None else fragile_elements(
        q.cpu(), k.cpu(), order=order, scale=scale, fmt=fmt, causal=causal, block_n=block_n, sm_scale=sm_scale)
    frag = fr["fragile"]
    nk = k.shape[-2]
    ks = min(ksink, nk)
    sink_cols = torch.zeros(nk, dtype=torch.bool)
    sink_cols[:ks] = True
    fu = fr["fragile_underflow"]
    fu_ns = (fu & ~sink_cols).sum(-1)
    fu_s = (fu & sink_cols).sum(-1)
    frag_rows = frag.any(-1)
    why = []
    ok = True
    for n in ("terms", "terms_sink", "saturated"):
        if bool((diffs[n] != 0).any()):
            ok = False
            why.append(f"{n} differs in {int((diffs[n] != 0).sum())} rows (no rounding can explain it)")
    if bool((diffs["underflow"].abs() > fu_ns).any()) or bool((diffs["underflow_sink"].abs() > fu_s).any()):
        ok = False
        why.append("an underflow count differs by more than the fragile elements at the threshold")
    bad = dout.amax(-1) > _output_bound(fr, v, oa, scale=scale, tol=tol, scale_out=scale_out)
    if bool(bad.any()):
        ok = False
        why.append(f"outputs differ beyond the bound in {int(bad.sum())} rows")
    clean = ~frag_rows
    max_rel = float(dout.max()) / scale_out
    max_rel_clean = float(dout.amax(-1)[clean].max()) / scale_out if bool(clean.any()) else 0.0
    if max_rel_clean > tol:
        ok = False
        why.append(f"rows without fragile elements differ by {max_rel_clean:.3g} > {tol:g} relative")
    return {
        "max_abs_diff": float(dout.max()),
        "max_rel_diff": max_rel,
        "diag_equal": not bool(mism.any()),
        "mismatched_rows": int(mism.sum()),
        "fragile_elements": int(frag.sum()),
        "explained": ok,
        "why": "; ".join(why) if why else "identical up to tolerance" if not bool(mism.any()) else
        "every difference sits on a rounding boundary within the fp32 score error",
    }


def _output_bound(fr, v, oa, *, scale, tol, scale_out):
    """Per row: how far two outputs may differ, given the fragile elements ``fr`` of the call.

    ``tol·max|out|`` plus, over fragile elements, ``step·|v| / (l·S)``, and the same again
    times ``|out|`` for the row sum when p_q enters it (rowsum="rounded").
    """
    frag = fr["fragile"]
    vabs = v.cpu().double().abs().amax(-1)  # [B,H,Nk]
    flip = (fr["step"] * frag).mul(vabs[..., None, :]).sum(-1)
    flip_l = (fr["step"] * frag).sum(-1)
    denom = (fr["l"] * scale).clamp_min(1e-300)
    return tol * scale_out + (flip + flip_l * oa.abs().amax(-1)) / denom


def compare(q, k, v, *, order="forward", scale=1.0, fmt="e4m3fn", causal=False, ksink=0, block_m=64, block_n=64,
            sm_scale=None, rowsum="unrounded", tol=1e-5):
    """Run the Triton kernel (compiled on a GPU, interpreted on CPU) and the emulator on the same
    inputs and :func:`explain` the differences. Adds ``kernel_backend`` to the returned dict."""
    from .api import attention

    kw = dict(order=order, scale=scale, fmt=fmt, causal=causal, ksink=ksink, block_m=block_m, block_n=block_n,
              sm_scale=sm_scale, rowsum=rowsum)
    a = attention(q, k, v, backend="triton", **kw)
    b = attention(q, k, v, backend="emulator", **kw)
    rep = explain(a, b, q, k, v, order=order, scale=scale, fmt=fmt, causal=causal, ksink=ksink, block_n=block_n,
                  sm_scale=sm_scale, tol=tol)
    rep["kernel_backend"] = a.backend
    return rep
