"""C5 (the fixes improve MSE 3–10×) and C6 (both fixes reach the same floor), from the T1 family."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from kernels.analysis.text import format_runs, intervals, short
from kernels.analysis.verdicts.common import combine, result

__all__ = ["claim_c5", "claim_c6"]


def _band_regime(peak: float, lo: float, hi: float, far: float) -> tuple[str, str]:
    """(regime, verdict) of a peak improvement against the band [lo, hi] and ``far_above``."""
    if peak < lo:
        return "below", "FAIL"
    if peak <= hi:
        return "in band", "PASS"
    if peak <= far:
        return "above", "PARTIAL"
    return "far above", "FAIL"


def claim_c5(paired: pd.DataFrame, cfg: Mapping) -> dict:
    """Improvement ratio MSE(baseline) / MSE(fix) against the claimed band, per sink_v_scale.

    Per (sink_v_scale, fix) the peak of the median paired ratio over Δ is classified: ``below``
    (peak < lo): FAIL; ``in band`` (lo <= peak <= hi): PASS; ``above`` (hi < peak <= far_above):
    PARTIAL (the band is crossed, the claim understates the gain); ``far above`` (peak >
    far_above): FAIL (the 3–10× figure does not describe this regime). The Δ range where the
    ratio lies inside the band is reported. Overall: PASS if every cell passes, FAIL if none
    passes even partly, else PARTIAL.
    """
    base, fixes = cfg["baseline"], list(cfg["fixes"])
    lo, hi = (float(v) for v in cfg["band"])
    far = float(cfg["far_above"])
    crit = (f"peak over Δ of the median paired ratio MSE({base}) / MSE(fix) within [{lo:g}, {hi:g}] "
            f"per sink_v_scale and fix; > {far:g} ('far above') or < {lo:g} is not a PASS")
    p = paired[(paired["a"] == base) & paired["b"].isin(fixes)]
    if p.empty:
        return result("C5", "INCONCLUSIVE", crit, {}, ["no paired tests of the baseline against a fix"])
    grid = sorted(p["delta"].unique())
    cells, details, nums = [], [], {}
    group = [c for c in ("sink_v_scale",) if c in p.columns]
    for key, g in p.groupby(group + ["b"], sort=True):
        svs = key[0] if group else None
        fix = key[-1]
        g = g.sort_values("delta")
        r = g["median_ratio"].to_numpy(float)
        i = int(np.nanargmax(r))
        peak, at = r[i], float(g["delta"].iloc[i])
        inband = g.loc[(g["median_ratio"] >= lo) & (g["median_ratio"] <= hi), "delta"]
        runs = intervals(inband, grid)
        regime, v = _band_regime(peak, lo, hi, far)
        cells.append(v)
        tag = f"sink_v_scale={svs:g}, {fix}" if svs is not None else fix
        nums[f"peak[{tag}]"] = peak
        nums[f"peak_delta[{tag}]"] = at
        lo_ci, hi_ci = g["ci_low"].iloc[i], g["ci_high"].iloc[i]
        details.append(f"{tag}: peak {short(peak, 3)}× [{short(lo_ci, 3)}, {short(hi_ci, 3)}] at Δ={short(at, 3)} → "
                       f"{regime} ({v}); ratio in [{lo:g}, {hi:g}] at {format_runs(runs)}")
    return result("C5", combine(cells), crit, nums, details)


def _equivalence_cell(g: pd.DataFrame, grid, col: str, alpha: float, tag: str,
                      nums: dict) -> tuple[str, str]:
    """(verdict, detail line) of one pair and sink_v_scale: where TOST shows the same floor."""
    eq = g[g[col] < alpha]
    runs = intervals(eq["delta"], grid)
    first_not = g.loc[~(g[col] < alpha), "delta"]
    if len(eq) == len(g):
        v = "PASS"
    elif len(eq) == 0:
        v = "FAIL"
    else:
        v = "PARTIAL"
    worst = g.loc[g["gmean_ratio"].sub(1).abs().idxmax()]
    nums[f"equivalent_points[{tag}]"] = int(len(eq))
    nums[f"points[{tag}]"] = int(len(g))
    nums[f"first_not_equivalent_delta[{tag}]"] = first_not.min() if len(first_not) else math.nan
    return v, (f"{tag}: equivalent at {format_runs(runs)} ({len(eq)}/{len(g)} Δ); first Δ not shown "
               f"equivalent: {short(first_not.min(), 3) if len(first_not) else 'none'}; largest "
               f"geometric-mean ratio {short(worst['gmean_ratio'], 3)} at Δ={short(worst['delta'], 3)}")


def claim_c6(paired: pd.DataFrame, cfg: Mapping, dc_onset: float | None = None) -> dict:
    """Same precision floor: TOST equivalence of each fix with the combined fix, per Δ.

    For each listed pair and sink_v_scale, the Δ where TOST (on log MSE, the margin of the
    ``statistics`` section) rejects non-equivalence at ``alpha`` (Holm-adjusted p over the T1
    family when ``holm`` is true). PASS: equivalent at every Δ for every pair and sink_v_scale;
    FAIL: at none; PARTIAL otherwise. The Δ ranges where the floors coincide are reported.
    """
    alpha = float(cfg["alpha"])
    col = "p_tost_holm" if cfg.get("holm", True) else "p_tost"
    pairs = [tuple(x) for x in cfg["pairs"]]
    margin = float(paired["tost_margin"].iloc[0]) if len(paired) else math.nan
    crit = (f"TOST on per-seed log MSE, margin ±ln(1 + {margin:g}), {col} < {alpha}, at every Δ and "
            f"sink_v_scale, for {'; '.join(f'{a} vs {b}' for a, b in pairs)}")
    cells, details, nums = [], [], {}
    for a, b in pairs:
        p = paired[(paired["a"] == a) & (paired["b"] == b)]
        if p.empty:
            details.append(f"{a} vs {b}: not measured")
            continue
        grid = sorted(p["delta"].unique())
        group = [c for c in ("sink_v_scale",) if c in p.columns]
        for key, g in (p.groupby(group, sort=True) if group else [((None,), p)]):
            svs = key[0] if isinstance(key, tuple) else key
            tag = f"{a} vs {b}" + (f", sink_v_scale={svs:g}" if svs is not None else "")
            v, line = _equivalence_cell(g, grid, col, alpha, tag, nums)
            cells.append(v)
            details.append(line)
    if dc_onset is not None and np.isfinite(dc_onset):
        details.append(f"for reference: predicted Δc(S=256) = {short(dc_onset, 4)}, "
                       "where forward S=256 starts collapsing")
        nums["dc_pred_S256"] = dc_onset
    if not cells:
        return result("C6", "INCONCLUSIVE", crit, nums, details or ["no pairs measured"])
    return result("C6", combine(cells), crit, nums, details)
