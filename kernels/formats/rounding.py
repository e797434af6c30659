"""Bit-exact rounding of float32 values onto an FP8 grid, in torch.

``quantize_fp8(x, fmt)`` returns float32 values that lie on the format's grid:

* round to nearest, ties to even, on the format's own grid (normal binades and
  the subnormal range alike);
* finite values beyond the largest finite value saturate to +-max, as the
  hardware's ``satfinite`` conversion does; +-inf saturates the same way;
* NaN stays NaN.

The rounding is done with float32 -> int32 bit manipulation, never with a
float8 cast, so it behaves identically on every backend. The same algorithm,
written in Triton ops, lives in :mod:`pcast.triton.kernel` (``fp8_round``).

Algorithm, for ``a = |x|`` (a normal float32 with unbiased exponent ``e`` and
24-bit significand ``mant`` including the implicit bit):

1. saturate: ``a = min(a, max_finite)`` (max is on the grid, so this equals
   round-then-saturate);
2. the target exponent is ``t = max(e, emin)``; the grid step is ``2^(t - m)``;
3. drop ``shift = 23 - m + (t - e)`` low bits of ``mant`` with round-half-even
   (``shift`` is clamped to 25, where every value rounds to 0);
4. the result is ``q * 2^(t - m)`` where ``q`` is the rounded integer
   significand (a carry into the next binade is just ``q = 2^(m+1)``).
"""

from __future__ import annotations

import torch

from pcast.formats import FORMATS, HALF_FORMATS, FP8Format, get_format, get_p_format

__all__ = ["quantize_fp8", "quantize_native", "quantize_fast"]

_EXP_MASK = 0xFF
_MAN_MASK = 0x7FFFFF
_IMPLICIT = 0x800000


def quantize_fp8(x: torch.Tensor, fmt: str | FP8Format = "e4m3fn") -> torch.Tensor:
    """Round float32 ``x`` to the FP8 grid of ``fmt`` (RNE, satfinite, NaN kept).

    Args:
        x: float32 tensor of any shape, on any device.
        fmt: a format name from :data:`pcast.formats.FORMATS` or an
            :class:`~pcast.formats.FP8Format` (microscaled FP4: :func:`pcast.quantize`).

    Returns:
        float32 tensor of the same shape whose values are on the grid.
    """
    if not isinstance(fmt, FP8Format) and not (isinstance(fmt, str) and fmt in (*FORMATS, *HALF_FORMATS)):
        raise ValueError(f"fmt={fmt!r} is not a known format; allowed: {', '.join((*FORMATS, *HALF_FORMATS))}")
    f = get_p_format(fmt)
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.float32:
        raise ValueError(f"x must be float32, got {x.dtype}")
    m = f.man_bits
    a = torch.clamp(x.abs(), max=f.max_finite)  # NaN propagates through clamp
    bits = a.view(torch.int32)
    e = (bits >> 23) - 127  # unbiased exponent; -127 for zero and fp32 subnormals
    sub32 = e == -127  # fp32 zero and subnormals: exponent -126, no implicit bit (bf16 keeps them)
    e = torch.where(sub32, torch.full_like(e, -126), e)
    t = torch.clamp(e, min=f.emin)
    shift = torch.clamp(23 - m + (t - e), max=25)
    mant = (bits & _MAN_MASK) | torch.where(sub32, torch.zeros_like(bits), torch.full_like(bits, _IMPLICIT))
    half_minus_one = (1 << (shift - 1)) - 1
    q = (mant + half_minus_one + ((mant >> shift) & 1)) >> shift
    # fp32 zero and subnormals lie far below half of any FP8 format's smallest subnormal (shift == 25
    # rounds them to 0); bf16 shares float32's exponent range and rounds them onto its own subnormals.
    if f.emin - m + 127 > 0:
        step = ((t - m + 127) << 23).view(torch.float32)
        out = q.to(torch.float32) * step
    else:  # bf16: the subnormal step 2^(emin - m) is itself a float32 subnormal; float64 holds it exactly
        out = (q.to(torch.float64) * torch.exp2((t - m).to(torch.float64))).to(torch.float32)
    out = torch.where(torch.isnan(x), x, out)
    return torch.copysign(out, x)


_NATIVE_DTYPES = {
    "e4m3fn": torch.float8_e4m3fn,
    "e5m2": torch.float8_e5m2,
    "e4m3fnuz": torch.float8_e4m3fnuz,
    "e5m2fnuz": torch.float8_e5m2fnuz,
}


def quantize_native(x: torch.Tensor, fmt: str | FP8Format = "e4m3fn") -> torch.Tensor:
    """Same contract as :func:`quantize_fp8`, using torch's float8 cast after saturating.

    torch's casts round to nearest even but do not saturate consistently
    (e5m2 and the fnuz types overflow to inf/NaN), so values are clamped to
    +-max first; clamping to a grid value commutes with RNE. A third, independent
    route to the same values (via torch's own float8 types); the tests prove it equal to
    :func:`quantize_fp8` for every format. The emulator uses :func:`quantize_fast`, which is
    cheaper on CPU than a float8 round trip.
    """
    f = get_format(fmt)
    a = torch.clamp(x, min=-f.max_finite, max=f.max_finite)
    out = a.to(_NATIVE_DTYPES[f.name]).to(torch.float32)
    if f.name.endswith("fnuz"):
        # fnuz has no negative zero: keep the sign of x on zero results like the
        # other formats do, so that results compare bitwise across formats.
        out = torch.copysign(out, x)
    return out


_HALF_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def quantize_fast(x: torch.Tensor, fmt: str | FP8Format = "e4m3fn", *, saturate: bool = True,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """Same values as :func:`quantize_fp8`, by IEEE float32 addition: the emulator's hot path.

    For ``|x|`` in binade ``2^e`` (or the subnormal range, ``e = emin``) the grid step
    is ``2^(e - m)``. Adding ``C = 1.5 * 2^(e - m + 23)``, whose float32 ulp is exactly
    that step, makes the FPU round ``x`` to the grid with ties to even; subtracting
    ``C`` again is exact. Five cheap elementwise passes instead of a float8 round trip.

    Differences from :func:`quantize_fp8`: a negative value that rounds to zero gives +0.0
    (numerically equal); NaN stays NaN. ``saturate=False`` skips the clamp when the
    caller knows ``|x| <= max_finite``. ``out`` may alias ``x`` to round in place.
    """
    f = get_p_format(fmt)
    if f.name in _HALF_DTYPES:  # torch's own 16-bit casts round to nearest even, subnormals included
        y = torch.clamp(x, min=-f.max_finite, max=f.max_finite) if saturate else x
        y = y.to(_HALF_DTYPES[f.name]).to(torch.float32)
        return y if out is None else out.copy_(y)
    if saturate:
        x = torch.clamp(x, min=-f.max_finite, max=f.max_finite)
    magic = (x.view(torch.int32) & 0x7F800000).view(torch.float32)
    magic.mul_(1.5 * 2.0 ** (23 - f.man_bits)).clamp_min_(1.5 * f.min_normal * 2.0 ** (23 - f.man_bits))
    if out is None:
        return (x + magic).sub_(magic)
    return torch.add(x, magic, out=out).sub_(magic)
