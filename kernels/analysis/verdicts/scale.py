"""C3: S = 256 is bit-exact, on the dp envelope, with the widest coverage; and measures best."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from kernels import theory
from kernels.formats import get_format
from kernels.analysis.text import short
from kernels.analysis.verdicts.common import result

__all__ = ["claim_c3"]


def _theory_checks(S: float, S2: float, fmt: str) -> tuple[dict, dict, list[str]]:
    """The theory part of C3: the checks, their numbers and detail lines."""
    f = get_format(fmt)
    dense = np.arange(1.0, f.max_finite + 1e-9, 0.125)
    dps = theory.dp(dense, fmt)
    pow2 = [2.0 ** j for j in range(0, 20) if 2.0 ** j <= f.max_finite]
    cov_pow2 = {p: theory.coverage(p, fmt) for p in pow2}
    checks = {
        "bit_exact": theory.bit_exact(S),
        "on_envelope": bool(abs(theory.dp(S, fmt) - dps.min()) <= 1e-15
                            and abs(theory.dp(S, fmt) - 2.0 ** -(f.man_bits + 1)) <= 1e-15),
        "max_coverage_pow2": bool(theory.coverage(S, fmt) >= max(cov_pow2.values()) - 1e-12),
        "compare_more_coverage": bool(theory.coverage(S2, fmt) > theory.coverage(S, fmt)),
        "compare_not_bit_exact": not theory.bit_exact(S2),
    }
    nums = {"dp_S": theory.dp(S, fmt), "dp_min": float(dps.min()), "coverage_S": theory.coverage(S, fmt),
            "coverage_compare": theory.coverage(S2, fmt), **{f"theory_{k}": v for k, v in checks.items()}}
    details = [f"bit-exact: {S:g} {'yes' if checks['bit_exact'] else 'NO'}, {S2:g} "
               f"{'no' if checks['compare_not_bit_exact'] else 'YES'}",
               f"dp({S:g}) = {short(nums['dp_S'])}, min of dp over S∈[1, {f.max_finite:g}] = {short(nums['dp_min'])} "
               f"(2^-{f.man_bits + 1} = {short(2.0 ** -(f.man_bits + 1))})",
               f"coverage({S:g}) = {short(nums['coverage_S'])} octaves (max over powers of two ≤ {f.max_finite:g}: "
               f"{short(max(cov_pow2.values()))}); coverage({S2:g}) = {short(nums['coverage_compare'])}"]
    return checks, nums, details


def _measured(scales: pd.DataFrame, S: float, S2: float, tol: float, max_finite: float,
              nums: dict) -> tuple[bool, list[str]]:
    """The measured part of C3: median MSE at S against the best non-saturating power of two."""
    keys = [c for c in ("delta", "order", "sink_v_scale", "n", "ksink") if c in scales.columns]
    worst, worst_at, cmp = 0.0, None, []
    measured_ok = True
    for key, g in scales.groupby(keys, sort=True):
        cand = g[g["bit_exact"] & ~g["saturates"]]
        at_s = g[g["scale"] == S]
        if cand.empty or at_s.empty:
            continue
        ratio = float(at_s["mse_median"].iloc[0] / cand["mse_median"].min())
        if ratio > worst:
            worst, worst_at = ratio, dict(zip(keys, key))
        if ratio > 1 + tol:
            measured_ok = False
        at2 = g[g["scale"] == S2]
        if len(at2):
            cmp.append(float(at2["mse_median"].iloc[0] / at_s["mse_median"].iloc[0]))
    nums["worst_mse_ratio_S_over_best_pow2"] = worst
    details = [f"measured: median MSE at S={S:g} is at most {worst:.3f}× the best non-saturating "
               f"power of two" + (f" (worst at {worst_at})" if worst_at else "")
               + f"; criterion ≤ {1 + tol:g}×: {'yes' if measured_ok else 'NO'}"]
    if cmp:
        nums["mse_ratio_compare_over_S_min"] = min(cmp)
        nums["mse_ratio_compare_over_S_max"] = max(cmp)
        details.append(f"MSE({S2:g}) / MSE({S:g}) ranges {short(min(cmp))}–{short(max(cmp))} "
                       "over Δ, order, sink_v_scale")
    sat = scales[scales["saturates"]]
    for s_sat, g in sat.groupby("scale"):
        details.append(f"S={s_sat:g} saturates P=1 (> {max_finite:g}): {int(g['saturated'].sum())} saturated "
                       f"values; median MSE up to {short(g['mse_median'].max())}")
    return measured_ok, details


def claim_c3(scales: pd.DataFrame, cfg: Mapping, fmt: str = "e4m3fn") -> dict:
    """Theory of S (bit-exactness, dp envelope, coverage) plus the measured MSE at S = 256.

    Theory part (kernels.theory): S bit-exact; dp(S) equal to the minimum of dp over a dense
    grid of S in [1, max_finite] (the lower envelope) and to 2^-(man_bits+1); coverage(S) the
    largest among powers of two <= max_finite; the compare scale (448) has more coverage and is
    not bit-exact. Measured part: at every (Δ, order, sink_v_scale) of the scales experiment the
    median MSE at S is within ``mse_tolerance`` (relative) of the smallest median MSE among the
    measured powers of two that do not saturate. PASS: both; PARTIAL: theory only; FAIL: theory
    contradicted.
    """
    S, S2 = float(cfg["scale"]), float(cfg["compare_scale"])
    tol = float(cfg["mse_tolerance"])
    f = get_format(fmt)
    crit = (f"theory: bit_exact({S:g}), dp({S:g}) = min over S∈[1, {f.max_finite:g}] of dp = "
            f"2^-{f.man_bits + 1}, coverage({S:g}) = max over non-saturating powers of two, "
            f"coverage({S2:g}) > coverage({S:g}) and {S2:g} not bit-exact; measured: median MSE at "
            f"S={S:g} ≤ (1 + {tol}) × min over non-saturating powers of two, at every Δ, order, sink_v_scale")
    checks, nums, details = _theory_checks(S, S2, fmt)
    measured_ok = None
    if len(scales):
        measured_ok, more = _measured(scales, S, S2, tol, f.max_finite, nums)
        details += more
    nums["measured_ok"] = measured_ok
    if not all(checks.values()):
        verdict = "FAIL"
    elif measured_ok is None:
        verdict = "PARTIAL"
        details.append("no scales measurements to check the MSE part")
    else:
        verdict = "PASS" if measured_ok else "PARTIAL"
    return result("C3", verdict, crit, nums, details)
