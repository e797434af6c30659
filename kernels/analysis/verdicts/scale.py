"""C3: S = 256 is bit-exact, on the dp envelope, with the widest coverage among powers of two (theory);
its measured MSE next to every other scale (scoped)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from pcast import theory
from pcast.formats import get_format
from pcast.analysis.text import short
from pcast.analysis.verdicts.common import (AS_STATED, Subcase, across_readings, choice, combine, result,
                                            subcase_verdict)

__all__ = ["claim_c3"]


def _theory_checks(S: float, S2: float, fmt: str, top: float) -> tuple[dict, dict, list[str]]:
    """The theory part of C3 over the scales S ∈ [1, ``top``] (claims.C3.max_scale): the checks, their numbers
    and detail lines."""
    f = get_format(fmt)
    dense = np.arange(1.0, top + 1e-9, 0.125)
    dps = theory.dp(dense, fmt)
    pow2 = [2.0 ** j for j in range(0, 20) if 2.0 ** j <= top]
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
               f"dp({S:g}) = {short(nums['dp_S'])}, min of dp over S∈[1, {top:g}] = {short(nums['dp_min'])} "
               f"(2^-{f.man_bits + 1} = {short(2.0 ** -(f.man_bits + 1))})",
               f"coverage({S:g}) = {short(nums['coverage_S'])} octaves (max over powers of two ≤ {top:g}: "
               f"{short(max(cov_pow2.values()))}); coverage({S2:g}) = {short(nums['coverage_compare'])}"]
    return checks, nums, details


def _setting_line(g: pd.DataFrame, S: float, key: dict) -> tuple[bool, bool, str]:
    """(best among powers of two, best among all non-saturating scales, words) for one setting: a scale
    beats S when its improvement CI (paired bootstrap over seeds) lies wholly above S's."""
    cand = g[~g["saturates"]]
    at_s = cand[cand["scale"] == S].iloc[0]
    better = cand[cand["improvement_lo"] > at_s["improvement_hi"]]
    pow2_better = better[better["bit_exact"]]
    best = cand.loc[cand["mse_median"].idxmin()]
    tag = ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in key.items())
    words = (f"{tag}: lowest median MSE at S={best['scale']:g} (MSE/MSE({S:g}) = "
             f"{short(best['mse_median'] / at_s['mse_median'], 3)}); "
             + (f"beaten beyond the CIs by S∈{{{', '.join(f'{x:g}' for x in better['scale'])}}}" if len(better)
                else f"no scale beats {S:g} beyond the CIs"))
    return pow2_better.empty, better.empty, words


def _measured(scales: pd.DataFrame, S: float, S2: float, max_finite: float) -> tuple[list[Subcase], list[str], dict]:
    """The measured comparison (scoped, beyond the sentence): per (Δ, order, sink_v_scale), is S's MSE
    the lowest among the powers of two, and among every non-saturating scale (448, the non-powers)?"""
    keys = [c for c in ("sink_v_scale", "order", "delta") if c in scales.columns]
    pow2_ok, all_ok, details, ratios = [], [], [], []
    for key, g in scales.groupby(keys, sort=True):
        if g[g["scale"] == S].empty:
            continue
        p_ok, a_ok, words = _setting_line(g, S, dict(zip(keys, key)))
        pow2_ok.append(p_ok)
        all_ok.append(a_ok)
        details.append(words)
        at2 = g[g["scale"] == S2]
        if len(at2):
            ratios.append(float(at2["mse_median"].iloc[0] / g.loc[g["scale"] == S, "mse_median"].iloc[0]))
    n = len(all_ok)
    subs = [Subcase(f"measured: S={S:g} has the lowest MSE among non-saturating powers of two",
                    subcase_verdict(pow2_ok), f"in {sum(pow2_ok)} of {n} settings (Δ, order, sink_v_scale)"),
            Subcase(f"measured: S={S:g} has the lowest MSE among every non-saturating scale ({S2:g} and the "
                    "non-powers of two included)", subcase_verdict(all_ok), f"in {sum(all_ok)} of {n} settings")]
    nums = {"settings": n, "best_among_pow2": sum(pow2_ok), "best_among_all": sum(all_ok)}
    if ratios:
        nums.update(mse_ratio_compare_over_S_min=min(ratios), mse_ratio_compare_over_S_max=max(ratios))
        details.append(f"MSE({S2:g}) / MSE({S:g}) ranges {short(min(ratios))}–{short(max(ratios))} over the settings")
    for s_sat, g in scales[scales["saturates"]].groupby("scale"):
        details.append(f"S={s_sat:g} saturates P=1 (> {max_finite:g}): {int(g['saturated'].sum())} saturated values; "
                       f"median MSE up to {short(g['mse_median'].max())}")
    return subs, details, nums


def claim_c3(scales: pd.DataFrame, cfg: Mapping, fmt: str = "e4m3fn") -> dict:
    """The sentence's three properties of S and the compare scale's coverage: a theoretical verdict
    (pcast.theory on the format's number line), plus the measured MSE comparison beneath it.

    Stated (theoretical) sub-cases: S bit-exact; dp(S) the minimum of dp over a dense grid of S in
    [1, max_scale] and equal to 2^-(man_bits+1); coverage(S) the largest among powers of two <=
    max_scale (true by construction when S is the only power of two above max_scale / 2); the
    compare scale covers more and is not bit-exact. Scoped, measured (beyond the sentence): per (Δ,
    order, sink_v_scale) whether another scale's MSE improvement CI lies wholly above S's.
    """
    S, S2, top = float(cfg["scale"]), float(cfg["compare_scale"]), float(cfg["max_scale"])
    f = get_format(fmt)
    crit = (f"theoretical, over the scales S∈[1, {top:g}] (claims.C3.max_scale): bit_exact({S:g}), dp({S:g}) = min of dp "
            f"= 2^-{f.man_bits + 1}, coverage({S:g}) = max over powers of two ≤ {top:g}, coverage({S2:g}) > "
            f"coverage({S:g}) and {S2:g} not bit-exact; measured (scoped): no scale's MSE improvement CI wholly above "
            f"S={S:g}'s")
    checks, nums, details = _theory_checks(S, S2, fmt, top)
    names = {"bit_exact": f"theoretical: {S:g} scales bit-exactly", "on_envelope": f"theoretical: dp({S:g}) on the "
             "lower envelope", "max_coverage_pow2": f"theoretical: coverage({S:g}) the largest among powers of two",
             "compare_more_coverage": f"theoretical: {S2:g} covers more", "compare_not_bit_exact":
             f"theoretical: {S2:g} is not bit-exact"}
    stated = [Subcase(names[k], "PASS" if v else "FAIL", "exact arithmetic on the format") for k, v in checks.items()]
    pow2_above = [2.0 ** j for j in range(0, 20) if top / 2 < 2.0 ** j <= top]
    details.append(f"by construction: the powers of two in ({top / 2:g}, {top:g}] are "
                   f"{', '.join(f'{p:g}' for p in pow2_above)}, so the largest coverage among them needs no measurement")
    scoped = list(stated)
    if len(scales):
        subs, more, m = _measured(scales, S, S2, f.max_finite)
        scoped += subs
        details += more
        nums.update(m)
    tols = ["theoretical checks: exact (the format's number line, no tolerance)",
            "measured: a scale beats S only when its paired-bootstrap improvement CI (statistics.confidence_level) "
            "lies wholly above S's"]
    kinds = ["settings: the sentence's properties of S (bit-exact, on the dp envelope, widest coverage among powers "
             "of two) and of the compare scale (more coverage, not bit-exact); all are properties of the number line",
             "readings: none (the sentence names its scales): one reading, the claim as stated; the measured MSE "
             "comparison is beyond the sentence and listed beneath, never in the verdict"]
    readings = [Subcase(AS_STATED, combine(stated),
                        f"{sum(x.verdict == 'PASS' for x in stated)} of {len(stated)} properties hold exactly")]
    alt = cfg.get("alternatives") or {}

    def at(scale2: float, top2: float) -> str:
        return combine("PASS" if v else "FAIL" for v in _theory_checks(S, scale2, fmt, top2)[0].values())

    robust = [choice("the range of S the sentence ranges over, S∈[1, max_scale]", "claims.C3.max_scale", top,
                     f"a physical reason: P's largest value is 1, and S·1 must stay finite in {fmt} (largest finite "
                     f"{f.max_finite:g}): above it S·P saturates where P reaches 1 (beyond it coverage({2 * S:g}) = "
                     f"{short(theory.coverage(2 * S, fmt), 4)} > {short(theory.coverage(S, fmt), 4)}, dp({4 * S:g}) = "
                     f"{short(float(theory.dp(4 * S, fmt)))})",
                     lambda a: at(S2, float(a)), cfg, alt.get("max_scale", [])),
              choice("the compare scale", "claims.C3.compare_scale", S2,
                     "the paper's words (\"a non-bit-exact scale such as 448\")", lambda a: at(float(a), top), cfg,
                     alt.get("compare_scale", []))]
    return result("C3", across_readings(readings), crit, nums, details, scoped=scoped, tolerances=tols,
                  readings=readings, robustness=robust, kinds=kinds)
