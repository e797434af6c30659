"""A correct FP8 downcast for any kernel Triton's interpreter runs: :func:`fp8_cast_fixed`.

Triton's interpreter converts float32 to its FP8 types with a truncating bit shuffle: subnormals flush
(3/2048 -> 0), a rounding carry into the exponent is lost (0.00293 -> 0.00195), and overflow wraps instead
of saturating (500 -> 256 in ``float8e4nv``). A GPU converts with ``cvt.rn.satfinite``: round to nearest,
ties to even, magnitudes above the largest finite value (infinities included) to that value, NaN kept.

Inside :func:`fp8_cast_fixed` every round-to-nearest-even downcast from float32, float16 or bfloat16 to
``float8e5``, ``float8e5b16``, ``float8e4nv`` or ``float8e4b8`` is computed by :func:`fp8_bits`: integer
arithmetic on the source's float32 bits, independent of torch's casts (the tests compare the two). Every
other conversion is left to Triton: upcasts, round-toward-zero downcasts, float64 sources, and
``float8e4b15``, which Triton converts through its backend's ``convert_custom_types`` (torch has no such
type, and no deployed kernel the project runs uses it).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass

import numpy as np

__all__ = ["Fp8Format", "FIXED_FORMATS", "fp8_bits", "fp8_cast_fixed"]


@dataclass(frozen=True)
class Fp8Format:
    """One FP8 encoding: mantissa bits, exponent bias, largest finite value and the NaN code.

    ``ieee``: the top exponent holds infinities and NaNs (E5M2); else finite-only ("fn": the all-ones code
    is NaN) or "fnuz" (one NaN, 0x80, and no negative zero)."""

    name: str
    man_bits: int
    bias: int
    max_finite: float
    nan_code: int
    unsigned_zero: bool

    @property
    def emin(self) -> int:
        """Unbiased exponent of the smallest normal."""
        return 1 - self.bias


# Triton's name -> format. torch's names: float8_e5m2, float8_e5m2fnuz, float8_e4m3fn, float8_e4m3fnuz.
FIXED_FORMATS = {
    "fp8e5": Fp8Format("fp8e5", 2, 15, 57344.0, 0x7F, False),
    "fp8e5b16": Fp8Format("fp8e5b16", 2, 16, 57344.0, 0x80, True),
    "fp8e4nv": Fp8Format("fp8e4nv", 3, 7, 448.0, 0x7F, False),
    "fp8e4b8": Fp8Format("fp8e4b8", 3, 8, 240.0, 0x80, True),
}


def fp8_bits(x: np.ndarray, fmt: Fp8Format) -> np.ndarray:
    """The FP8 codes (uint8) of float32 ``x``: nearest-even, satfinite, NaN kept (sign kept where the format
    has one NaN per sign)."""
    xf = np.ascontiguousarray(x, dtype=np.float32)
    bits = xf.view(np.uint32).astype(np.int64)
    sign = (bits >> 31) & 1
    nan = np.isnan(xf)
    a = np.minimum(np.abs(np.where(nan, np.float32(0), xf)), np.float32(fmt.max_finite))  # satfinite: inf too
    ab = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.int64)
    e = (ab >> 23) - 127  # unbiased exponent; -127 for zero and float32 subnormals (far below any FP8 step)
    t = np.maximum(e, fmt.emin)  # the target binade (subnormals share emin)
    shift = np.minimum(23 - fmt.man_bits + (t - e), 40)  # low significand bits to drop
    mant = np.where(e == -127, ab & 0x7FFFFF, (ab & 0x7FFFFF) | 0x800000)
    half = (np.int64(1) << (shift - 1)) - 1
    q = (mant + half + ((mant >> shift) & 1)) >> shift  # round half to even: q * 2^(t - man_bits)
    # q may carry to 2^(man_bits + 1): the next binade (or, from the subnormal range, the first normal).
    carry = q >> (fmt.man_bits + 1)
    q = np.where(carry > 0, q >> 1, q)
    t = t + carry
    normal = q >= (1 << fmt.man_bits)
    code = np.where(normal, ((t + fmt.bias) << fmt.man_bits) | (q & ((1 << fmt.man_bits) - 1)), q)
    zero = code == 0
    out = code | (sign << 7)
    if fmt.unsigned_zero:
        out = np.where(zero, 0, out)
        out = np.where(nan, fmt.nan_code, out)
    else:
        out = np.where(nan, fmt.nan_code | (sign << 7), out)
    return out.astype(np.uint8)


_LOCK = threading.Lock()


@contextlib.contextmanager
def fp8_cast_fixed():
    """Inside, Triton's interpreter rounds downcasts to FP8 as a GPU's ``cvt.rn.satfinite`` does.

    Scoped: the interpreter's conversion is put back on the way out. Re-entrant in one thread; a second
    thread entering waits for the first to leave. Usable around any interpreted Triton kernel (with
    ``TRITON_INTERPRET=1`` or :func:`pcast.triton.interpret.interpreting`).
    """
    from triton.runtime import interpreter as ti  # lazy: triton is not part of the slim install

    if getattr(ti._convert_float, "_pcast_fixed", False):
        yield
        return
    with _LOCK:
        original = ti._convert_float
        ti._convert_float = _fixed(original)
        try:
            yield
        finally:
            ti._convert_float = original


def _fixed(original):
    import triton.language as tl  # lazy: triton is not part of the slim install
    from triton.runtime import interpreter as ti  # lazy: triton is not part of the slim install

    sources = {tl.float32.name: np.float32, tl.float16.name: np.float16, tl.bfloat16.name: None}

    def convert(data, input_dtype, output_dtype, rounding_mode):
        fmt = FIXED_FORMATS.get(getattr(output_dtype, "name", ""))
        src = getattr(input_dtype, "name", "")
        if fmt is None or src not in sources or rounding_mode not in (None, ti._ir.ROUNDING_MODE.RTNE):
            return original(data, input_dtype, output_dtype, rounding_mode)
        arr = np.asarray(data)
        if src == tl.bfloat16.name:  # stored as uint16: the high half of a float32
            x = (arr.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            x = arr.view(sources[src]).astype(np.float32)
        return fp8_bits(x.reshape(-1), fmt).reshape(arr.shape)

    convert._pcast_fixed = True
    return convert
