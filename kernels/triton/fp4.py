"""Microscaled FP4 P in the Triton kernel (docs/interfaces.md, "P in FP4 with microscaling").

``@triton.jit`` helpers that :mod:`pcast.triton.kernel` calls at its step-3 and step-5 markers (the
markers stay in ``_attn_fwd_inner``). With ``MX == 0`` (an FP8 format, or no cast) ``cast_p`` emits
exactly the operations of the FP8 path, so FP8 calls stay bit-identical.

* ``cast_p``: step 3, ``x = p·S`` (or ``p·S_r`` per row, or the exp2-offset x) and its rounding:
  FP8 by ``fp8_round``, or groups of ``GROUP`` keys inside the block with an NVFP4 / MXFP4 scale each;
  plus the microscaled formats' diagnostics (saturated, underflow_scale, groups_flushed).
* ``group_scale``: a group's scale from its amax (E4M3 of ``float32(amax / 6)``, or E8M0 from bits).
* ``per_row_div``: step 5's division of the block's ``p_q·V`` by ``S_r`` (``scale_mode="per_row"``).

Every division is ``tl.div_rn`` (IEEE, round to nearest): compiled, a float32 ``/`` is ``div.full.f32``.
The E2M1 and E4M3 roundings are the kernel's own bit-exact ``fp8_round`` (:mod:`pcast.triton.rounding`).
"""

from __future__ import annotations

import triton
import triton.language as tl

from pcast.formats.microscaling import E2M1, PER_ROW_TARGET
from pcast.triton.rounding import fp8_round
from pcast.formats import FORMATS

__all__ = ["cast_p", "group_scale", "per_row_div", "MX_CODE"]

# The kernel's MX constexpr: 0 = P is FP8 (or not cast), else the microscaled format's code.
MX_CODE = {"nvfp4": 1, "mxfp4": 2}

_E4M3 = FORMATS["e4m3fn"]
# E4M3 (NVFP4's scale) and E2M1 (the elements), as compile-time constants of fp8_round
_S_MAN = tl.constexpr(_E4M3.man_bits)  # 3
_S_EMIN = tl.constexpr(_E4M3.emin)  # -6
_S_MAX = tl.constexpr(_E4M3.max_finite)  # 448.0
_E_MAN = tl.constexpr(E2M1.man_bits)  # 1
_E_EMIN = tl.constexpr(E2M1.emin)  # 0
_E_MAX = tl.constexpr(E2M1.max_finite)  # 6.0
_TARGET = tl.constexpr(PER_ROW_TARGET)  # 2688.0 = 448·6: where S_r maps a block's row max of p


@triton.jit
def group_scale(amax,
                MX: tl.constexpr,  # 1: nvfp4 (E4M3 scale), 2: mxfp4 (E8M0 scale)
                ):
    """The float32 scale of each group from its amax (>= 0): ``fp8_round(float32(amax / 6), E4M3)`` (0 when
    it flushes), or ``2^X``, ``X = clamp(floor(log2 amax) - 2, -127, 127)``, built from bits (2^-127: bit 22)."""
    if MX == 1:
        s = fp8_round(tl.div_rn(amax, tl.full(amax.shape, 6.0, tl.float32)), _S_MAN, _S_EMIN, _S_MAX)
    else:
        e = (amax.to(tl.int32, bitcast=True) >> 23) - 127  # floor(log2 amax); -127 for 0 and fp32 subnormals
        x = tl.minimum(tl.maximum(e - 2, -127), 127)
        s = tl.where(x >= -126, (x + 127) << 23, 1 << 22).to(tl.float32, bitcast=True)
    return s


@triton.jit
def _cast_mx(x, p, offs_n, KSINK, n_saturated, n_underflow_scale, n_groups_flushed,
             MX: tl.constexpr,  # 1: nvfp4, 2: mxfp4
             GROUP: tl.constexpr,  # keys per group (16 or 32); divides the block's keys
             ):
    """Round x = p·S >= 0 [BLOCK_M, BLOCK_N] in groups of GROUP keys: ``p_q = fp8_round(x / s, E2M1)·s``
    where ``s > 0``, 0 where the scale flushed. Adds each row's keys with ``x / s > 6`` (s > 0), its non-sink
    keys with p > 0 in flushed groups and its flushed groups (amax > 0, s == 0) to the counts."""
    BM: tl.constexpr = x.shape[0]
    BN: tl.constexpr = x.shape[1]
    xg = tl.reshape(x, [BM, BN // GROUP, GROUP])
    amax = tl.max(xg, 2)
    s2 = group_scale(amax, MX)  # [BLOCK_M, groups]
    s = s2[:, :, None]
    y = tl.div_rn(xg, tl.where(s > 0.0, s, 1.0))
    pq = tl.where(s > 0.0, fp8_round(y, _E_MAN, _E_EMIN, _E_MAX) * s, 0.0)
    n_saturated += tl.sum(tl.sum(((s > 0.0) & (y > _E_MAX)).to(tl.int32), 2), 1)
    flushed = (amax > 0.0) & (s2 == 0.0)
    n_groups_flushed += tl.sum(flushed.to(tl.int32), 1)
    lost = tl.reshape((p > 0.0) & (offs_n >= KSINK)[None, :], [BM, BN // GROUP, GROUP])  # non-sink keys, p > 0
    n_underflow_scale += tl.sum(tl.sum((lost & flushed[:, :, None]).to(tl.int32), 2), 1)
    return tl.reshape(pq, [BM, BN]), n_saturated, n_underflow_scale, n_groups_flushed


@triton.jit
def cast_p(p, p_scale, offs_n, KSINK, n_saturated, n_underflow_scale, n_groups_flushed,
           QUANT: tl.constexpr,  # round x to the FP8 format below (MX == 0 only)
           MAN_BITS: tl.constexpr, EMIN: tl.constexpr, MAX_FINITE: tl.constexpr,  # that FP8 format
           EXP2_OFFSET: tl.constexpr,  # p is already x (exp2_offset; never with MX)
           MX: tl.constexpr,  # 0: FP8 or no cast; 1: nvfp4; 2: mxfp4 (pcast.formats.microscaling)
           GROUP: tl.constexpr,  # MX: keys per group
           PER_ROW: tl.constexpr,  # scale_mode="per_row" (nvfp4): x = p·S_r, S_r = float32(2688 / rowmax(p))
           ):
    """Step 3: ``(x, p_q, d, n_saturated, n_underflow_scale, n_groups_flushed)``, d what step 4 divides the
    rounded row sum by: S (``p_scale``), or S_r [BLOCK_M] per row (1 where the block's row max of p is 0)."""
    if PER_ROW:
        r = tl.max(p, 1)
        d = tl.where(r > 0.0, tl.div_rn(tl.full(r.shape, _TARGET, tl.float32), tl.where(r > 0.0, r, 1.0)), 1.0)
        x = p * d[:, None]
    else:
        d = p_scale
        x = p if EXP2_OFFSET else p * p_scale
    if MX:
        pq, n_saturated, n_underflow_scale, n_groups_flushed = _cast_mx(
            x, p, offs_n, KSINK, n_saturated, n_underflow_scale, n_groups_flushed, MX, GROUP)
    else:
        pq = fp8_round(x, MAN_BITS, EMIN, MAX_FINITE) if QUANT else x
    return x, pq, d, n_saturated, n_underflow_scale, n_groups_flushed


@triton.jit
def per_row_div(pv, d,
                PER_ROW: tl.constexpr,  # divide each row of the block's p_q·V by its S_r (else pv unchanged)
                ):
    """Step 5's block term: ``p_q·V / S_r`` per row (``scale_mode="per_row"``), else ``p_q·V``."""
    if PER_ROW:
        pv = tl.div_rn(pv, tl.broadcast_to(d[:, None], pv.shape))
    return pv
