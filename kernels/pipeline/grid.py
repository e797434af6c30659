"""Reading the grids of config.yaml: a value or a list of values, and the Δ grid."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["delta_values", "listed"]


def delta_values(spec: Any) -> list[float]:
    """Δ grid: a list of numbers as given, or ``{start, stop, step}`` expanded inclusively.

    Range values are ``start + i*step`` rounded to 10 decimals (so 0.1 steps print as 0.1, 0.2, ...);
    ``stop`` is included when it lies on the grid (to within 1e-9 steps).
    """
    if isinstance(spec, Mapping):
        start, stop, step = float(spec["start"]), float(spec["stop"]), float(spec["step"])
        count = int(math.floor((stop - start) / step + 1e-9)) + 1
        return [round(start + i * step, 10) + 0.0 for i in range(max(count, 0))]
    return [float(x) for x in spec]


def listed(value) -> list:
    """A config value that may be one value or a list of them (``sigma: 1.0`` or ``sigma: [1.0, 2.0]``), as a list."""
    return list(value) if isinstance(value, (list, tuple)) else [value]
