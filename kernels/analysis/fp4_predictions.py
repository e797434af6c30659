"""The fp4 experiment's theory, per configuration row: :mod:`pcast.theory.fp4` applied to a P cast.

The stats, T7 and the FP4 verdict read the theory through these functions only, with the row's own
settings (``ksink``, ``sigma``, ``n``, ``block_n``, the format's group, the order):

* :func:`threshold` -- ``flush_threshold(S1)`` for NVFP4 with a static S₁,
  ``per_row_flush_threshold()`` for the per-row first level; NaN otherwise;
* :func:`group_flush` -- ``group_flush_fraction(Δ, S1, ...)`` for static NVFP4; 0 for MXFP4 (an E8M0
  scale never flushes); NaN otherwise (per-row, FP8);
* :func:`element_underflow` -- ``element_underflow_fraction(Δ, S1, ..., fmt)`` for static NVFP4 and
  MXFP4; NaN otherwise;
* :func:`critical_delta` -- ``critical_delta_flush(S1, ...)`` for static NVFP4 (the forward order's
  group-flush Δc); NaN otherwise;
* :func:`optimal_scale` -- ``optimal_first_level_scale("nvfp4")``.

"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from pcast.theory import fp4 as fp4_theory

__all__ = ["GROUP", "kind", "threshold", "group_flush", "element_underflow", "critical_delta",
           "optimal_scale"]

GROUP = {"nvfp4": 16, "mxfp4": 32}  # keys per scale group (pcast.formats.microscaling.MX_FORMATS)


def _fn(name: str):
    """``pcast.theory.fp4.<name>`` (imported here, not at module load: the statistics import this module)."""
    return getattr(fp4_theory, name)


def kind(row: Mapping) -> str:
    """``static`` (NVFP4, static S₁), ``per_row`` (NVFP4 per-row), ``mx`` (MXFP4) or ``fp8``."""
    fmt = str(row["fmt"])
    if fmt == "nvfp4":
        return "per_row" if str(row["scale_mode"]) == "per_row" else "static"
    return "mx" if fmt == "mxfp4" else "fp8"


def _shape(row: Mapping) -> dict:
    return {"k": int(row["ksink"]), "sigma": float(row["sigma"]), "n": int(row["n"]), "block_n": int(row["block_n"]),
            "group": GROUP.get(str(row["fmt"]), 16)}


def threshold(row: Mapping) -> float:
    """The group-flush threshold of the row's cast (module docstring); NaN without one."""
    k = kind(row)
    f = _fn("flush_threshold" if k == "static" else "per_row_flush_threshold")
    if k not in ("static", "per_row"):
        return math.nan
    return float(f(float(row["scale"])) if k == "static" else f())


def group_flush(row: Mapping, deltas) -> np.ndarray:
    """Predicted fraction of flushed groups at each Δ (module docstring)."""
    deltas = np.asarray(deltas, dtype=float)
    f, k = _fn("group_flush_fraction"), kind(row)
    if k == "mx":
        return np.zeros_like(deltas)
    if k != "static" or not len(deltas):
        return np.full_like(deltas, math.nan)
    return np.asarray(f(deltas, float(row["scale"]), order=str(row["order"]), **_shape(row)), dtype=float)


def element_underflow(row: Mapping, deltas) -> np.ndarray:
    """Predicted fraction of non-sink keys lost on the element grid (their scale > 0) at each Δ."""
    deltas = np.asarray(deltas, dtype=float)
    f, k = _fn("element_underflow_fraction"), kind(row)
    if k not in ("static", "mx") or not len(deltas):
        return np.full_like(deltas, math.nan)
    return np.asarray(f(deltas, float(row["scale"]), order=str(row["order"]), fmt=str(row["fmt"]), **_shape(row)),
                      dtype=float)


def critical_delta(row: Mapping) -> float:
    """The closed-form group-flush Δc (forward order) of a static NVFP4 cast; NaN otherwise."""
    f = _fn("critical_delta_flush")
    if kind(row) != "static":
        return math.nan
    return float(f(float(row["scale"]), **_shape(row)))


def optimal_scale() -> float:
    """The derived optimal static S₁ of NVFP4 P; NaN without the theory."""
    f = _fn("optimal_first_level_scale")
    return float(f(fmt="nvfp4"))
