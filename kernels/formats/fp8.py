"""FP8 number formats, each described by its parameters.

A format is a sign bit, ``exp_bits`` exponent bits with ``bias``, and
``man_bits`` stored mantissa bits. Everything else (smallest normal, smallest
subnormal, the largest finite value) follows from those numbers and from how
the format spends its top codes on NaN/inf:

* ``e4m3fn``   OCP E4M3: no inf, only S.1111.111 is NaN, so the top binade keeps
  seven finite codes and max = 1.75 * 2^8 = 448.
* ``e5m2``     IEEE-like E5M2: the all-ones exponent holds inf/NaN, max = 57344.
* ``e4m3fnuz`` / ``e5m2fnuz``: no inf, no negative zero; the single NaN is the
  ``1.0000.000`` pattern, so the top binade is fully finite and the bias is one
  larger than the IEEE-like choice.

The tables here are the single source of truth for format parameters. Tests
check them against ``torch.finfo`` of torch's float8 dtypes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["FP8Format", "FORMATS", "HALF_FORMATS", "get_format", "get_p_format", "format_names"]


@dataclass(frozen=True)
class FP8Format:
    """Parameters of one FP8 format.

    Attributes:
        name: short name used throughout the project (``"e4m3fn"``, ...).
        exp_bits: number of exponent bits.
        man_bits: number of stored mantissa bits.
        bias: exponent bias.
        top_binade_finite_codes: how many mantissa codes of the largest
            exponent field value are finite (the rest encode NaN/inf, or the
            exponent field value itself is reserved when this is 0).
        ieee_special_exponent: True when the all-ones exponent is reserved for
            inf/NaN (IEEE style), so the largest finite exponent is one lower.
    """

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    top_binade_finite_codes: int
    ieee_special_exponent: bool

    @property
    def emin(self) -> int:
        """Unbiased exponent of the smallest normal number (1 - bias)."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Unbiased exponent of the largest finite binade."""
        top = (1 << self.exp_bits) - 1
        if self.ieee_special_exponent:
            top -= 1
        return top - self.bias

    @property
    def max_finite(self) -> float:
        """Largest finite magnitude."""
        largest_mantissa = self.top_binade_finite_codes - 1
        return (1.0 + largest_mantissa / (1 << self.man_bits)) * 2.0**self.emax

    @property
    def min_normal(self) -> float:
        return 2.0**self.emin

    @property
    def min_subnormal(self) -> float:
        """Smallest positive value: one unit in the last place of the subnormal range."""
        return 2.0 ** (self.emin - self.man_bits)

    @property
    def underflow_threshold(self) -> float:
        """Half the smallest subnormal: values at or below it round to zero (ties to even)."""
        return self.min_subnormal / 2.0

    @property
    def log_threshold(self) -> float:
        """ln(1 / underflow_threshold): how many nats below 1 a value may fall before it rounds to 0."""
        return -math.log(self.underflow_threshold)

    def grid_step(self, x: float) -> float:
        """Spacing of the grid at magnitude ``x`` (the step just above ``|x|`` within its binade)."""
        ax = abs(x)
        if ax < self.min_normal:
            return self.min_subnormal
        e = min(math.floor(math.log2(ax)), self.emax)
        return 2.0 ** (e - self.man_bits)


FORMATS: dict[str, FP8Format] = {
    "e4m3fn": FP8Format("e4m3fn", exp_bits=4, man_bits=3, bias=7, top_binade_finite_codes=7, ieee_special_exponent=False),
    "e5m2": FP8Format("e5m2", exp_bits=5, man_bits=2, bias=15, top_binade_finite_codes=4, ieee_special_exponent=True),
    "e4m3fnuz": FP8Format("e4m3fnuz", exp_bits=4, man_bits=3, bias=8, top_binade_finite_codes=8, ieee_special_exponent=False),
    "e5m2fnuz": FP8Format("e5m2fnuz", exp_bits=5, man_bits=2, bias=16, top_binade_finite_codes=4, ieee_special_exponent=False),
}


# 16-bit formats P may also be cast to (not Q, K or V): the same parameters, their own subnormals.
HALF_FORMATS: dict[str, FP8Format] = {
    "bf16": FP8Format("bf16", exp_bits=8, man_bits=7, bias=127, top_binade_finite_codes=128, ieee_special_exponent=True),
    "fp16": FP8Format("fp16", exp_bits=5, man_bits=10, bias=15, top_binade_finite_codes=1024,
                      ieee_special_exponent=True),
}


def get_p_format(fmt: str | FP8Format, *, argname: str = "fmt") -> FP8Format:
    """An FP8 format or a 16-bit one (:data:`HALF_FORMATS`) by name, with a clear error naming the argument."""
    if isinstance(fmt, str) and fmt in HALF_FORMATS:
        return HALF_FORMATS[fmt]
    if isinstance(fmt, FP8Format):
        return fmt
    if isinstance(fmt, str) and fmt in FORMATS:
        return FORMATS[fmt]
    raise ValueError(f"{argname}={fmt!r} is not a known format; allowed: {', '.join((*FORMATS, *HALF_FORMATS))}")


def format_names() -> tuple[str, ...]:
    return tuple(FORMATS)


def get_format(fmt: str | FP8Format, *, argname: str = "fmt") -> FP8Format:
    """Look up a format by name, with a clear error naming the argument."""
    if isinstance(fmt, FP8Format):
        return fmt
    try:
        return FORMATS[fmt]
    except (KeyError, TypeError):
        raise ValueError(f"{argname}={fmt!r} is not a known FP8 format; allowed: {', '.join(FORMATS)}") from None
