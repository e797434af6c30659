"""One entry point for rounding onto any of the formats: :func:`pcast.quantize`."""

from __future__ import annotations

import torch

from pcast.formats.fp8 import FORMATS, HALF_FORMATS, FP8Format
from pcast.formats.microscaling import MX_FORMATS, MXFormat, quantize_mx
from pcast.formats.rounding import quantize_fp8

__all__ = ["quantize"]


def quantize(x: torch.Tensor, fmt: str | FP8Format | MXFormat = "e4m3fn") -> torch.Tensor:
    """Round float32 ``x`` to the grid of ``fmt`` (RNE, satfinite, NaN kept).

    Args:
        x: float32 tensor of any shape, on any device.
        fmt: a format name from :data:`pcast.formats.FORMATS` or an
            :class:`~pcast.formats.FP8Format`; ``"bf16"`` or ``"fp16"`` (:data:`pcast.formats.HALF_FORMATS`); or a microscaled FP4 format
            (``"nvfp4"``, ``"mxfp4"``, :mod:`pcast.formats.microscaling`), quantized in groups
            along the last axis, whose length must be a multiple of the group.

    Returns:
        float32 tensor of the same shape whose values are on the grid.
    """
    if isinstance(fmt, MXFormat) or (isinstance(fmt, str) and fmt in MX_FORMATS):
        return quantize_mx(x, fmt)[0]  # groups along the last axis, first-level scale 1
    if not isinstance(fmt, FP8Format) and not (isinstance(fmt, str) and fmt in (*FORMATS, *HALF_FORMATS)):
        raise ValueError(f"fmt={fmt!r} is not a known format; allowed: {', '.join((*FORMATS, *HALF_FORMATS, *MX_FORMATS))}")
    return quantize_fp8(x, fmt)
