"""Numbers as short text and as JSON, Δ-grid runs, CSV booleans: shared by verdicts, tables, plots."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

__all__ = ["short", "json_number", "intervals", "format_runs", "truthy"]


def short(x, digits: int = 4) -> str:
    """Short fixed text for a number (``nan`` stays ``nan``, ``None`` is a dash)."""
    if x is None:
        return "—"
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x != 0 and (abs(x) >= 1e4 or abs(x) < 1e-3):
        return f"{x:.{max(digits - 1, 1)}e}"
    return f"{x:.{digits}g}"


def json_number(x):
    """JSON-safe number: NaN/inf become None / strings, numpy scalars plain Python."""
    if isinstance(x, (np.bool_, bool)):
        return bool(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        if math.isnan(x):
            return None
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return float(f"{x:.10g}")
    return x


def intervals(xs: Sequence[float], grid: Sequence[float]) -> list[tuple[float, float]]:
    """Group the grid points ``xs`` (a subset of ``grid``) into runs of consecutive grid points."""
    grid = sorted(set(float(g) for g in grid))
    pos = {g: i for i, g in enumerate(grid)}
    idx = sorted(pos[float(x)] for x in set(xs))
    runs: list[tuple[float, float]] = []
    for i in idx:
        if runs and pos[runs[-1][1]] == i - 1:
            runs[-1] = (runs[-1][0], grid[i])
        else:
            runs.append((grid[i], grid[i]))
    return runs


def format_runs(runs) -> str:
    """``Δ=a`` or ``Δ∈[a, b]`` per run of :func:`intervals`; ``none`` when there is none."""
    if not runs:
        return "none"
    return ", ".join(f"Δ={short(a, 3)}" if a == b else f"Δ∈[{short(a, 3)}, {short(b, 3)}]"
                     for a, b in runs)


def truthy(values: pd.Series) -> pd.Series:
    """Booleans from a CSV column written as True/False (or 1/0)."""
    return values.astype(str).str.lower().isin(["true", "1"])
