"""Tolerances from the data: a confidence level shared over a family of points, and a bootstrap CI
turned into the half-width a prediction must lie within (verdicts, tables and figures share them)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import functools

from scipy import integrate
from scipy import stats as sps

__all__ = ["family_z", "ci_tolerance", "crossing_tolerances", "max_moments", "closed_form_offset"]


def family_z(level: float, m: int) -> float:
    """The two-sided normal quantile of ``level`` shared over ``m`` points (Bonferroni)."""
    return float(sps.norm.ppf(1 - (1 - level) / (2 * max(int(m), 1))))


def ci_tolerance(est: float, lo: float, hi: float, pred: float, *, level: float, m: int) -> float:
    """Half-width a prediction must lie within: the side of the bootstrap CI (at ``level``) facing
    ``pred``, widened from one point to a family of ``m`` (factor family_z(level, m) / z(level))."""
    side = (hi - est) if pred >= est else (est - lo)
    if not math.isfinite(side):
        return math.nan
    return float(side * family_z(level, m) / family_z(level, 1))


@functools.lru_cache(maxsize=None)
def max_moments(k: int) -> tuple[float, float, float]:
    """(mean, variance, third central moment) of the maximum of ``k`` iid N(0, 1), by quadrature."""
    def dens(x):
        return k * sps.norm.pdf(x) * sps.norm.cdf(x) ** (k - 1)

    mean = integrate.quad(lambda x: x * dens(x), -12.0, 12.0, limit=200)[0]
    var = integrate.quad(lambda x: (x - mean) ** 2 * dens(x), -12.0, 12.0, limit=200)[0]
    mu3 = integrate.quad(lambda x: (x - mean) ** 3 * dens(x), -12.0, 12.0, limit=200)[0]
    return float(mean), float(var), float(mu3)


def closed_form_offset(k: int) -> float:
    """How far the closed form Δc = 6.93 + ln S − δk may sit from the crossing it approximates, in σ.

    The fraction is E[Φ(x + M − δk)] with M the sinks' max; expanding in M − δk, the second-order
    term vanishes at the crossing (Φ''(0) = 0) and the third shifts it by μ3(M)/6.
    """
    return abs(max_moments(int(k))[2]) / 6.0


def crossing_tolerances(thresholds: pd.DataFrame, level: float) -> np.ndarray:
    """Per row of a threshold summary: the half-width of the measured Δc's bootstrap CI facing the
    prediction (``dc_meas``, ``dc_lo``, ``dc_hi``, ``dc_pred``), widened over the measured rows, plus
    the closed form's own offset at the crossing (:func:`~pcast.analysis.tolerance.closed_form_offset` of the row's ksink, in
    units of its σ)."""
    m = max(int(thresholds["dc_meas"].notna().sum()), 1)
    return np.array([ci_tolerance(r["dc_meas"], r["dc_lo"], r["dc_hi"], r["dc_pred"], level=level, m=m)
                     + closed_form_offset(int(r["ksink"])) * float(r.get("sigma", 1.0))
                     for _, r in thresholds.iterrows()], dtype=float)
