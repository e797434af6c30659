"""Microscaled FP4 formats for P: NVFP4 and MXFP4, bit-exact, in torch.

Both quantize groups of ``group`` consecutive values along the last axis (in attention: keys of one
KV block) to E2M1 elements times one scale per group (docs/interfaces.md, "P in FP4 with
microscaling"):

* ``nvfp4``: groups of 16, an E4M3 scale ``s = quantize(float32(amax / 6), e4m3fn)`` (0 when it
  flushes: then the whole group is 0), elements ``quantize(float32(x / s), E2M1)``;
* ``mxfp4`` (OCP MX v1.0): groups of 32, an E8M0 scale ``2^X`` with
  ``X = clamp(floor(log2 amax) - 2, -127, 127)``, elements ``quantize(x / 2^X, E2M1)``.

Every rounding is :func:`pcast.formats.rounding.quantize_fp8` (RNE, satfinite) on the format tables of
:mod:`pcast.formats`; :func:`quantize_mx_fast` is the emulator's cheaper route to the same bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pcast.formats import FORMATS, FP8Format
from pcast.formats.rounding import quantize_fast, quantize_fp8 as _quantize_fp8

__all__ = ["E2M1", "MXFormat", "MX_FORMATS", "PER_ROW_TARGET", "get_mx_format", "is_mx", "group_scale",
           "quantize_mx", "quantize_mx_fast"]

#: FP4 E2M1 (OCP): 2 exponent bits, 1 mantissa bit, bias 1, every code finite: {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
E2M1 = FP8Format("e2m1", exp_bits=2, man_bits=1, bias=1, top_binade_finite_codes=2, ieee_special_exponent=False)
_E4M3 = FORMATS["e4m3fn"]
_E2M1_EMAX = E2M1.emax  # 2: the E8M0 rule's offset, floor(log2 6)
_E8M0_MIN, _E8M0_MAX = -127, 127


@dataclass(frozen=True)
class MXFormat:
    """One microscaled format of P: E2M1 elements in groups of ``group`` with a ``scale`` per group."""

    name: str
    group: int  # values per group (along the key axis)
    scale: str  # "e4m3fn" (NVFP4: amax/6 rounded to E4M3) or "e8m0" (MXFP4: a power of two)
    element: FP8Format = E2M1

    @property
    def max_finite(self) -> float:
        """The largest element value (6): what a group's amax maps to."""
        return self.element.max_finite

    @property
    def scale_flush(self) -> float:
        """Scales at or below this round to 0 (half E4M3's smallest subnormal, 2^-10); 0 for E8M0."""
        return _E4M3.underflow_threshold if self.scale == "e4m3fn" else 0.0


MX_FORMATS: dict[str, MXFormat] = {
    "nvfp4": MXFormat("nvfp4", group=16, scale="e4m3fn"),
    "mxfp4": MXFormat("mxfp4", group=32, scale="e8m0"),
}

#: ``scale_mode="per_row"`` maps each block's row max of p to E4M3's largest scale times E2M1's max.
PER_ROW_TARGET = _E4M3.max_finite * E2M1.max_finite  # 2688


def is_mx(fmt) -> bool:
    """True when ``fmt`` names (or is) a microscaled format."""
    return isinstance(fmt, MXFormat) or (isinstance(fmt, str) and fmt in MX_FORMATS)


def get_mx_format(fmt, *, argname: str = "fmt") -> MXFormat:
    if isinstance(fmt, MXFormat):
        return fmt
    try:
        return MX_FORMATS[fmt]
    except (KeyError, TypeError):
        raise ValueError(f"{argname}={fmt!r} is not a microscaled format; allowed: {', '.join(MX_FORMATS)}") from None


def group_scale(amax: torch.Tensor, fmt) -> torch.Tensor:
    """The scale of each group from its float32 ``amax`` (>= 0): E4M3 of ``amax/6`` or E8M0 ``2^X``."""
    f = get_mx_format(fmt)
    if f.scale == "e4m3fn":
        return _quantize_fp8(amax / torch.full_like(amax, f.max_finite), _E4M3)
    bits = amax.view(torch.int32)
    e = (bits >> 23) - 127  # floor(log2 amax) for normal amax; fp32 subnormals and 0 give -127
    x = torch.clamp(e - _E2M1_EMAX, _E8M0_MIN, _E8M0_MAX)
    # 2^X by its bits: a normal float32 for X >= -126, the subnormal 2^-127 (bit 22) below
    return torch.where(x >= -126, (x + 127) << 23, torch.full_like(x, 1 << 22)).view(torch.float32)


def _groups(x: torch.Tensor, f: MXFormat) -> torch.Tensor:
    n = x.shape[-1]
    if n % f.group:
        raise ValueError(f"x's last axis ({n}) is not allowed for {f.name}; allowed: a multiple of {f.group}")
    return x.reshape(*x.shape[:-1], n // f.group, f.group)


def quantize_mx(x: torch.Tensor, fmt) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantize float32 ``x`` [..., n] (n a multiple of the group) along its last axis.

    Returns ``(p_q, scales, flushed)``: ``p_q`` float32 like x (element times scale), ``scales``
    float32 [..., n/group] and ``flushed`` bool [..., n/group] (amax > 0 and the scale rounded to 0)."""
    f = get_mx_format(fmt)
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        raise ValueError(f"x must be a float32 torch.Tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    xg = _groups(x, f)
    amax = xg.abs().amax(-1)
    s = group_scale(amax, f)
    flushed = (amax > 0) & (s == 0)
    safe = torch.where(s > 0, s, torch.ones_like(s))[..., None]
    elem = _quantize_fp8(xg / safe, f.element)
    pq = torch.where((s > 0)[..., None], elem * safe, torch.zeros_like(elem))
    return pq.reshape(x.shape), s, flushed


def quantize_mx_fast(x: torch.Tensor, fmt, sat: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`quantize_mx`'s ``(p_q, flushed)`` for x >= 0 [..., n], by the emulator's float32 addition
    rounding (:func:`pcast.formats.rounding.quantize_fast`), in place over x. ``sat`` (int64 [...]): adds each
    row's count of keys whose ``float32(x / s) > 6`` (clipped)."""
    f = get_mx_format(fmt)
    xg = _groups(x, f)
    amax = xg.amax(-1)
    s = group_scale(amax, f)
    flushed = (amax > 0) & (s == 0)
    safe = torch.where(s > 0, s, torch.ones_like(s))
    xg.div_(safe[..., None])
    if sat is not None:
        sat += torch.sign(xg - f.max_finite).clamp_min_(0).sum((-2, -1)).to(torch.int64)
    quantize_fast(xg, f.element, saturate=True, out=xg)
    xg.mul_(torch.where(s > 0, s, torch.zeros_like(s))[..., None])
    return x, flushed
