"""``fp8_round``: the bit-exact software FP8 rounding every Triton program here shares.

Triton's interpreter converts float32 to ``tl.float8e4nv`` wrongly (subnormals, carries, overflow),
so wherever a program may run interpreted the cast is this integer-arithmetic rounding: nearest-even,
satfinite, NaN kept, the same bits as :func:`pcast.formats.rounding.quantize_fp8`.
"""

import triton
import triton.language as tl

__all__ = ["fp8_round"]


@triton.jit
def fp8_round(x, MAN_BITS: tl.constexpr, EMIN: tl.constexpr, MAX_FINITE: tl.constexpr):
    """Round float32 ``x`` to the FP8 grid: nearest-even, satfinite, NaN kept.

    MAN_BITS: stored mantissa bits of the format (3 for E4M3, 2 for E5M2; 7 for bf16, 10 for fp16).
    EMIN: unbiased exponent of the smallest normal (-6 for E4M3FN).
    MAX_FINITE: largest finite value (448.0 for E4M3FN); larger magnitudes saturate.
    """
    xbits = x.to(tl.int32, bitcast=True)
    a = tl.minimum(tl.abs(x), MAX_FINITE)
    bits = a.to(tl.int32, bitcast=True)
    e = (bits >> 23) - 127  # unbiased fp32 exponent (-127 for zero / fp32 subnormals)
    if EMIN - MAN_BITS + 127 > 0:  # FP8, fp16: the grid's step is a normal float32
        t = tl.maximum(e, EMIN)  # exponent of the target binade (subnormals share EMIN)
        shift = tl.minimum(23 - MAN_BITS + (t - e), 25)  # low significand bits to drop
        mant = (bits & 0x7FFFFF) | 0x800000  # 24-bit significand with the implicit bit
        q = (mant + ((1 << (shift - 1)) - 1) + ((mant >> shift) & 1)) >> shift  # round half to even
        step = ((t - MAN_BITS + 127) << 23).to(tl.float32, bitcast=True)  # 2^(t - MAN_BITS)
        mag = q.to(tl.float32) * step
    else:  # bf16: fp32 subnormal inputs have no implicit bit; the subnormal step 2^(t - MAN_BITS) is one too
        sub = e == -127
        e = tl.where(sub, -126, e)
        t = tl.maximum(e, EMIN)
        shift = tl.minimum(23 - MAN_BITS + (t - e), 25)
        mant = (bits & 0x7FFFFF) | tl.where(sub, 0, 0x800000)
        q = (mant + ((1 << (shift - 1)) - 1) + ((mant >> shift) & 1)) >> shift
        lift = tl.where(t - MAN_BITS < -100, 64, 0)  # keep 2^(t - MAN_BITS + lift) a normal float32
        step = ((t - MAN_BITS + 127 + lift) << 23).to(tl.float32, bitcast=True)
        mag = (q.to(tl.float32) * step) * tl.where(lift > 0, 5.421010862427522e-20, 1.0)  # 2^-lift: exact
    out = (mag.to(tl.int32, bitcast=True) | (xbits & -2147483648)).to(tl.float32, bitcast=True)  # copysign
    return tl.where(x != x, x, out)
