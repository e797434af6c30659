"""C5 (the fixes improve MSE 3–10×) and C6 (both fixes reach the same floor), from the T1 family."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from pcast.analysis.text import format_runs, intervals, short
from pcast.analysis.verdicts.common import Subcase, combine, result, subcase_verdict

__all__ = ["claim_c5", "claim_c6"]


def _band_regime(peak: float, ci_lo: float, ci_hi: float, lo: float, hi: float, far: float) -> tuple[str, str]:
    """(regime, verdict) of a peak improvement and its CI against the band [lo, hi] and ``far_above``:
    in band when the CI meets the band; below / above only when the whole CI is."""
    if ci_hi < lo:
        return "below", "FAIL"
    if ci_lo <= hi:
        return "in band", "PASS"
    if ci_lo <= far:
        return "above", "PARTIAL"
    return "far above", "FAIL"


def _windows(cfg: Mapping, baseline_fraction: pd.Series | None, grid) -> list[tuple[str, list[float]]]:
    """The readings of "moderate sink strength": (name, its Δ) per ``cfg['moderate']`` window of the
    baseline's predicted underflow fraction; the whole grid when no prediction is given."""
    if baseline_fraction is None or baseline_fraction.empty:
        return [("the whole Δ grid", list(grid))]
    out = []
    for lo, hi in cfg["moderate"]:
        ds = [float(d) for d, f in baseline_fraction.items() if lo <= f <= hi and d in set(grid)]
        out.append((f"moderate = baseline underflow in [{lo:g}, {hi:g}] (Δ∈{format_runs(intervals(ds, grid))[2:]})"
                    if ds else f"moderate = baseline underflow in [{lo:g}, {hi:g}] (no Δ)", ds))
    return out


def _c5_cell(g: pd.DataFrame, ds: list[float], band, far: float, name: str, grid) -> Subcase:
    """One (reading, sink_v_scale, fix): the peak of the median paired ratio over the reading's Δ."""
    lo, hi = band
    w = g[g["delta"].isin(ds)].sort_values("delta")
    if w.empty:
        return Subcase(name, "INCONCLUSIVE", "no Δ in this reading")
    i = int(np.nanargmax(w["median_ratio"].to_numpy(float)))
    peak, at = float(w["median_ratio"].iloc[i]), float(w["delta"].iloc[i])
    ci_lo, ci_hi = float(w["ci_low"].iloc[i]), float(w["ci_high"].iloc[i])
    regime, v = _band_regime(peak, ci_lo, ci_hi, lo, hi, far)
    inband = w.loc[(w["ci_high"] >= lo) & (w["ci_low"] <= hi), "delta"]
    return Subcase(name, v, f"peak {short(peak, 3)}× [{short(ci_lo, 3)}, {short(ci_hi, 3)}] at Δ={short(at, 3)} → "
                            f"{regime}; in [{lo:g}, {hi:g}] at {format_runs(intervals(inband, grid))}")


def claim_c5(paired: pd.DataFrame, cfg: Mapping, baseline_fraction: pd.Series | None = None) -> dict:
    """Improvement ratio MSE(baseline) / MSE(fix) against the claimed band, per reading of "moderate",
    sink_v_scale and fix.

    A sub-case's peak of the median paired ratio over the reading's Δ is ``below`` (CI wholly under
    lo): FAIL; ``in band`` (CI meets [lo, hi]): PASS; ``above`` (CI wholly over hi, not over
    far_above): PARTIAL (the claim understates the gain); ``far above``: FAIL. Readings: the Δ where
    the exact model puts the baseline's non-sink underflow (``baseline_fraction``: Δ -> fraction)
    inside each ``cfg['moderate']`` window. The verdict combines every sub-case (strict rule); each
    reading and sink_v_scale gets its own verdict beneath.
    """
    base, fixes = cfg["baseline"], list(cfg["fixes"])
    band = tuple(float(v) for v in cfg["band"])
    far = float(cfg["far_above"])
    crit = (f"peak over the moderate Δ of the median paired ratio MSE({base}) / MSE(fix): its bootstrap CI meets "
            f"[{band[0]:g}, {band[1]:g}], per reading of 'moderate', sink_v_scale and fix")
    tols = ["the band's edges are the paper's; a peak is in band when its paired-bootstrap CI (statistics."
            "confidence_level) meets the band, below / above only when the whole CI is",
            f"'far above': CI wholly over {far:g} (claims.C5.far_above)"]
    p = paired[(paired["a"] == base) & paired["b"].isin(fixes)]
    if p.empty:
        return result("C5", "INCONCLUSIVE", crit, {}, ["no paired tests of the baseline against a fix"], tolerances=tols)
    grid = sorted(p["delta"].unique())
    svs_col = "sink_v_scale" if "sink_v_scale" in p.columns else None
    cells, readings, nums = [], [], {}
    for wname, ds in _windows(cfg, baseline_fraction, grid):
        for svs, gs in (p.groupby(svs_col, sort=True) if svs_col else [(None, p)]):
            tag = f"{wname}, sink_v_scale={svs:g}" if svs is not None else wname
            these = [_c5_cell(g, ds, band, far, f"{tag}, {fix}", grid) for fix, g in gs.groupby("b", sort=True)]
            cells += these
            readings.append(Subcase(f"reading: {tag}", combine(these),
                                    f"{sum(c.verdict == 'PASS' for c in these)} of {len(these)} fixes in band"))
    nums.update(cells=len(cells), in_band=sum(c.verdict == "PASS" for c in cells))
    details = [f"{nums['in_band']} of {len(cells)} sub-cases (reading x sink_v_scale x fix) in band; the readings' "
               "verdicts and each sub-case are listed above", _open_parameters(p)]
    return result("C5", combine(cells), crit, nums, details, scoped=readings + cells, tolerances=tols)


def _open_parameters(p: pd.DataFrame) -> str:
    """Which values of the parameter the paper leaves open (the sinks' value norm) the data tests, and why."""
    norms = sorted(p["sink_v_scale"].unique()) if "sink_v_scale" in p.columns else []
    return ("open in the paper, the sinks' value norm: tested at sink_v_scale " + ", ".join(f"{v:g}" for v in norms)
            + " (0: sinks that carry no value, as learned sinks usually do; 1: the generator's unit-norm values; "
            "values between: small ones); each gets its own verdict beneath") if norms else \
        "the sinks' value norm is not a column of the data: one setting"


def _trivial(paired: pd.DataFrame, pair, col: str, alpha: float) -> pd.DataFrame:
    """The Δ (per sink_v_scale) where ``pair`` is equivalent: the sink changes nothing a fix could fix."""
    t = paired[(paired["a"] == pair[0]) & (paired["b"] == pair[1])]
    keys = [c for c in ("sink_v_scale", "delta") if c in t.columns]
    return t.assign(trivial=t[col] < alpha)[keys + ["trivial"]]


def _equivalence_cell(g: pd.DataFrame, grid, col: str, alpha: float, tag: str) -> Subcase:
    """One pair and sink_v_scale: where TOST shows the same floor, trivial Δ not counted as support."""
    g = g.sort_values("delta")
    holds = (g[col] < alpha).to_numpy()
    trivial = g["trivial"].fillna(False).to_numpy(bool) if "trivial" in g else np.zeros(len(g), bool)
    eq = g.loc[holds & ~trivial, "delta"]
    worst = g.loc[g["gmean_ratio"].sub(1).abs().idxmax()]
    dom = (f"equivalent at {format_runs(intervals(g.loc[holds, 'delta'], grid))}; at {len(eq)} of "
           f"{int((~trivial).sum())} non-trivial Δ ({format_runs(intervals(eq, grid))}); trivial (sink without "
           f"effect): {format_runs(intervals(g.loc[trivial, 'delta'], grid))}; largest geometric-mean ratio "
           f"{short(worst['gmean_ratio'], 3)} at Δ={short(worst['delta'], 3)}")
    return Subcase(tag, subcase_verdict(holds, trivial), dom)


def claim_c6(paired: pd.DataFrame, cfg: Mapping, dc_onset: float | None = None) -> dict:
    """Same precision floor: TOST equivalence of each fix with the combined fix, per Δ.

    For each listed pair and sink_v_scale, the Δ where TOST (on log MSE, the margin of the
    ``statistics`` section) rejects non-equivalence at ``alpha`` (Holm-adjusted p over the T1
    family when ``holm`` is true). A Δ where ``trivial_pair`` (the baseline against the combined
    fix) is itself equivalent is trivial: the sink changes nothing there, so equivalence is no
    support. Sub-case: PASS equivalent at every Δ; FAIL at no non-trivial Δ; PARTIAL otherwise.
    The verdict combines the sub-cases (strict rule); each sink_v_scale gets its own beneath.
    """
    alpha = float(cfg["alpha"])
    col = "p_tost_holm" if cfg.get("holm", True) else "p_tost"
    pairs = [tuple(x) for x in cfg["pairs"]]
    margin = float(paired["tost_margin"].iloc[0]) if len(paired) else math.nan
    trivial = _trivial(paired, tuple(cfg["trivial_pair"]), col, alpha)
    crit = (f"TOST on per-seed log MSE, margin ±ln(1 + {margin:g}), {col} < {alpha}, at every Δ and sink_v_scale, "
            f"for {'; '.join(f'{a} vs {b}' for a, b in pairs)}; Δ where {' vs '.join(cfg['trivial_pair'])} is "
            "itself equivalent are trivial (no support)")
    tols = [f"equivalence margin ±ln(1 + {margin:g}) (statistics.tost_margin) at {col} < {alpha}: the test "
            "controls its error rate from the seeds' own spread"]
    cells, details, nums = [], [], {}
    for a, b in pairs:
        p = paired[(paired["a"] == a) & (paired["b"] == b)]
        if p.empty:
            details.append(f"{a} vs {b}: not measured")
            continue
        grid = sorted(p["delta"].unique())
        keys = [c for c in ("sink_v_scale", "delta") if c in p.columns]
        p = p.merge(trivial, on=keys, how="left")
        for svs, g in (p.groupby("sink_v_scale", sort=True) if "sink_v_scale" in p else [(None, p)]):
            tag = f"{a} vs {b}" + (f", sink_v_scale={svs:g}" if svs is not None else "")
            cells.append(_equivalence_cell(g, grid, col, alpha, tag))
    details.append(f"{sum(c.verdict == 'PASS' for c in cells)} of {len(cells)} sub-cases (pair x sink_v_scale) "
                   "equivalent at every Δ")
    details.append(_open_parameters(paired))
    readings = _by_norm(cells)
    if dc_onset is not None and np.isfinite(dc_onset):
        details.append(f"for reference: predicted Δc(S=256) = {short(dc_onset, 4)}, where forward S=256 starts collapsing")
        nums["dc_pred_S256"] = dc_onset
    nums.update(cells=len(cells), passing=sum(c.verdict == "PASS" for c in cells))
    if not cells:
        return result("C6", "INCONCLUSIVE", crit, nums, details or ["no pairs measured"], tolerances=tols)
    return result("C6", combine(cells), crit, nums, details, scoped=readings + cells, tolerances=tols)


def _by_norm(cells: list[Subcase]) -> list[Subcase]:
    """One reading per sink_v_scale (the norm the paper leaves open): the strict rule over its pairs."""
    norms = sorted({c.name.split("sink_v_scale=")[1] for c in cells if "sink_v_scale=" in c.name}, key=float)
    out = []
    for v in norms:
        these = [c for c in cells if c.name.endswith(f"sink_v_scale={v}")]
        out.append(Subcase(f"reading: sink_v_scale={v}", combine(these),
                           f"{sum(c.verdict == 'PASS' for c in these)} of {len(these)} pairs equivalent at every Δ"))
    return out
