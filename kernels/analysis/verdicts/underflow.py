"""C1 (the leading-order underflow law of forward order) and C2 (reverse order, the zero-underflow guarantee)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

import numpy as np
import pandas as pd
from scipy import stats as sps

from pcast.analysis.text import format_runs, intervals, short
from pcast.analysis.tolerance import max_moments
from pcast.analysis.verdicts.common import (AS_STATED, Choice, Subcase, across_readings, combine, exact_fraction,
                                            family_z, result, subcase_verdict)

__all__ = ["claim_c1", "claim_c2", "leading_order_tolerance", "distinct_points"]


def leading_order_tolerance(k: int) -> float:
    """The first term the leading-order law Φ(Δ + δk − 6.93 − ln S) neglects, at its largest.

    The law replaces the sink block's random score maximum M (in σ units) by its mean δk; the exact
    fraction is E[Φ(x + M − δk)]. Its Taylor expansion's first neglected term is ½ Var(M) Φ''(x),
    and ``|Φ''(x)|`` = ``|x|`` φ(x) is largest at ``|x|`` = 1: the tolerance is ½ Var(M) φ(1).
    """
    return float(0.5 * max_moments(int(k))[1] * sps.norm.pdf(1.0))


def _c1_subcase(dc: pd.DataFrame, combo: str, tol: float, z: float) -> tuple[Subcase, float]:
    """One forward combination: where the leading-order law is within ``tol`` + z·SE of the measurement."""
    meas, lead = dc["underflow_frac_mean"].to_numpy(float), dc["pred_leading"].to_numpy(float)
    se = dc["underflow_frac_se"].to_numpy(float) if "underflow_frac_se" in dc else np.zeros(len(dc))
    err = np.abs(meas - lead)
    holds = err <= tol + z * se
    trivial = (np.maximum(meas, lead) <= tol) | (np.minimum(meas, lead) >= 1 - tol)
    grid = sorted(dc["delta"].unique())
    miss = dc.loc[~holds, "delta"]
    i = int(np.argmax(err))
    dom = (f"within at {int(holds.sum())} of {len(dc)} points ({int((~trivial).sum())} non-trivial); largest miss "
           f"{short(err[i])} at Δ={short(dc['delta'].iloc[i], 3)}"
           + (f"; outside at {format_runs(intervals(miss, grid))}" if len(miss) else ""))
    return Subcase(f"{combo}: leading-order Φ law", subcase_verdict(holds, trivial), dom), float(err.max())


def _exact_line(d: pd.DataFrame, z: float) -> str:
    """The artifact's exact model against the same measurements (supporting, not the paper's law)."""
    meas, ex = d["underflow_frac_mean"].to_numpy(float), d["pred_exact"].to_numpy(float)
    terms = d["terms"].to_numpy(float)
    se = d["underflow_frac_se"].to_numpy(float) if "underflow_frac_se" in d else np.zeros(len(d))
    binom = np.sqrt(np.clip(ex * (1 - ex), 0, None) / terms)
    ok = np.abs(meas - ex) <= z * np.maximum(se, binom) + 1.0 / terms
    return (f"supporting, the artifact's exact model (not the paper's law): within z·SE (+ one event) at {int(ok.sum())} "
            f"of {len(d)} points; largest |measured − exact| {short(np.abs(meas - ex).max())}")


def distinct_points(d: pd.DataFrame) -> pd.DataFrame:
    """The distinct measured points: rows that differ only in the sinks' value norm and carry the same
    counts are one point (underflow does not depend on V, so each repeats once per sink_v_scale)."""
    cols = [c for c in ("combo", "delta", "ksink", "n", "block_n", "scale", "order", "underflow", "terms")
            if c in d.columns]
    return d.drop_duplicates(subset=cols).reset_index(drop=True)


def _c1_judge(d: pd.DataFrame, combos, tol: float, level: float) -> tuple[list[Subcase], float, dict]:
    """The per-combination settings at ``level`` (the family is the distinct points judged)."""
    z = family_z(level, max(len(d), 1))
    subs, nums = [], {}
    for combo in combos:
        dc = d[d["combo"] == combo]
        if len(dc):
            sub, worst = _c1_subcase(dc, combo, tol, z)
            subs.append(sub)
            nums[f"max_abs_error_leading[{combo}]"] = worst
    return subs, z, nums


def claim_c1(collapse: pd.DataFrame, cfg: Mapping, *, level: float = 0.95) -> dict:
    """The paper's leading-order Φ law, judged on its own, per forward combination of ``cfg['combos']``.

    A point (Δ, sink_v_scale) holds when ``|measured − Φ law|`` ≤ ½ Var(M_k) φ(1) (the law's first
    neglected term, :func:`~pcast.analysis.verdicts.underflow.leading_order_tolerance`) + z·SE (the seed-mean's standard error, z the
    family quantile of ``level`` over every distinct point judged, :func:`pcast.analysis.verdicts.underflow.distinct_points`). Trivial
    points: measurement and law both within the tolerance of 0 or of 1 (the flat ends say nothing
    of the law's position). Settings: the forward combinations (the sentence covers forward order at
    any S); readings: none (the law leaves nothing open; the sinks' value norm cannot change an
    underflow count), so one reading, the claim as stated.
    """
    combos = list(cfg["combos"])
    d = distinct_points(collapse[collapse["combo"].isin(combos)].dropna(subset=["pred_leading"]))
    k = int(d["ksink"].iloc[0]) if len(d) else 4
    tol = leading_order_tolerance(k)
    z = family_z(level, max(len(d), 1))
    crit = (f"|measured − Φ(Δ + δk − 6.93 − ln S)| ≤ {short(tol, 3)} + z·SE at every distinct Δ of "
            f"{', '.join(combos)}; z = {short(z, 3)} (level {level:g} over {len(d)} distinct points)")
    tols = [f"{short(tol, 3)}: the leading-order law's first neglected term ½ Var(M_{k}) φ(1) (M_{k}: the max of "
            f"{k} N(0,1) sink scores, Var = {short(2 * tol / sps.norm.pdf(1.0), 4)})",
            f"z·SE: SE = standard deviation of the underflow fraction over seeds / √seeds; z = {short(z, 3)}"]
    kinds = ["settings: each forward combination of claims.C1.combos (the sentence covers forward order at "
             "every S)", "readings: none; the law leaves nothing open and the sinks' value norm cannot change "
             "which P underflow, so rows that differ only in it are one point"]
    if d.empty:
        return result("C1", "INCONCLUSIVE", crit, {}, ["no rows with a prediction"], tolerances=tols,
                      readings=[], kinds=kinds)
    subs, z, more = _c1_judge(d, combos, tol, level)
    nums = {"tolerance_leading": tol, "z": z, "points": int(len(d)), **more}
    readings = [Subcase(AS_STATED, combine(subs), "; ".join(f"{s.name}: {s.verdict}" for s in subs)
                        + f" ({len(d)} distinct points)")]
    alts = {f"{a:g}": combine(_c1_judge(d, combos, tol, float(a))[0])
            for a in _alternatives(cfg, "confidence_level")}
    robust = [Choice("confidence level of z·SE (statistics.confidence_level)", f"{level:g}",
                     "the data's noise: the seeds' standard error, widened over the family of distinct points",
                     alts)] if alts else []
    details = [f"{sum(s.verdict == 'PASS' for s in subs)} of {len(subs)} forward combinations within the law's "
               f"tolerance at every point ({len(d)} distinct points of {int(collapse['combo'].isin(combos).sum())} "
               "rows)", _exact_line(d, z)]
    return result("C1", across_readings(readings), crit, nums, details, scoped=subs, tolerances=tols,
                  readings=readings, robustness=robust, kinds=kinds)


def _alternatives(cfg: Mapping, key: str) -> list:
    """The alternative values of a choice (``cfg['alternatives'][key]``), none when not given."""
    return list((cfg.get("alternatives") or {}).get(key, []))


def _share(z: pd.DataFrame) -> Fraction:
    """The share of non-sink keys in the sink block: reverse order's residual can be no larger (exact)."""
    r = z.iloc[0]
    return exact_fraction(min(int(r["block_n"]), int(r["n"])) - int(r["ksink"]), int(r["n"]) - int(r["ksink"]))


def _per_delta(df: pd.DataFrame, col: str) -> pd.Series:
    return df.groupby("delta")[col].max()


def _fractions(df: pd.DataFrame) -> pd.Series:
    """Δ -> the largest exact underflow fraction (count / terms, summed over seeds) over the rows at that Δ."""
    return df.groupby("delta").apply(lambda g: max(exact_fraction(u, t) for u, t in zip(g["underflow"], g["terms"])),
                                     include_groups=False)


def _guarantee(z: pd.DataFrame, fz: pd.DataFrame, zc: str) -> Subcase:
    """Zero underflow at every Δ (a guarantee: one counterexample fails it); trivial where the forward
    combination with the same S does not underflow either."""
    events = z.groupby("delta")["underflow"].sum()
    holds = events == 0
    trivial = (fz.groupby("delta")["underflow"].sum() == 0).reindex(events.index, fill_value=False) \
        if len(fz) else pd.Series(False, index=events.index)
    grid = list(events.index)
    bad = events[events > 0]
    dom = (f"zero at {format_runs(intervals(events[holds].index, grid))} ({int(holds.sum())} of {len(grid)} Δ, "
           f"{int((holds & ~trivial).sum())} of them non-trivial)")
    if len(bad):
        first = float(bad.index.min())
        dom += (f"; underflows from Δ={short(first, 3)} ({int(bad.iloc[0])} events), up to a fraction "
                f"{short(float(max(_fractions(z))))} (the sink block's share {_share(z)} = {short(float(_share(z)))})")
    return Subcase(f"{zc}: zero underflow at every Δ", subcase_verdict(holds, trivial, guarantee=True), dom)


def _removes(r: pd.DataFrame, f: pd.DataFrame, rc: str, fc: str, z: float) -> Subcase:
    """Reverse order removes the collapse: the fraction stays within the sink block's share plus the
    no-sink underflow (the fraction at the grid's first Δ) plus z·SE; trivial where forward is within it too.
    Fractions and the bound are exact fractions of the integer counts; only the z·SE slack is a float."""
    frac = _fractions(r)
    se = _per_delta(r, "underflow_frac_se") if "underflow_frac_se" in r else pd.Series(0.0, index=frac.index)
    no_sink = frac.iloc[0]
    bound = _share(r) + no_sink
    holds = pd.Series([x <= bound or float(x - bound) <= z * float(s) for x, s in zip(frac, se)], index=frac.index)
    ffrac = _fractions(f) if len(f) else pd.Series(dtype=object)
    trivial = pd.Series([d in ffrac.index and ffrac[d] <= bound for d in frac.index], index=frac.index)
    dom = (f"max fraction {short(float(max(frac)))} against the bound {short(float(bound))} (share {_share(r)} + "
           f"no-sink {short(float(no_sink))}; exact fractions of the counts) at {int(holds.sum())} of {len(frac)} Δ "
           f"({int((~trivial).sum())} where {fc} exceeds the bound, up to "
           f"{short(float(max(ffrac))) if len(ffrac) else 'nan'})")
    return Subcase(f"{rc}: reverse order removes the collapse", subcase_verdict(holds, trivial), dom)


def _expected_region(z: pd.DataFrame, zc: str, max_exp: float) -> Subcase:
    """Scoped: zero underflow where the exact model expects at most ``max_exp`` events in the sample."""
    region = z[z["pred_expected_count"] <= max_exp]
    if region.empty:
        return Subcase(f"{zc} where the exact model expects ≤ {max_exp:g} events", "INCONCLUSIVE", "no such Δ")
    events = region.groupby("delta")["underflow"].sum()
    return Subcase(f"{zc} where the exact model expects ≤ {max_exp:g} events (Δ ≤ "
                   f"{short(region['delta'].max(), 3)})", subcase_verdict(events == 0, guarantee=True),
                   f"{int(events.sum())} events measured there")


def claim_c2(collapse: pd.DataFrame, cfg: Mapping, *, level: float = 0.95) -> dict:
    """Reverse order removes the collapse, and reverse with S = 256 underflows nowhere on the grid.

    Two settings, both as stated: ``reverse_combo``'s fraction within the sink block's share
    (block_n − k)/(n − k) plus the no-sink underflow plus z·SE at every Δ; ``zero_combo``'s
    underflow count exactly 0 at every Δ (a guarantee). The exact model's region (at most
    ``max_expected_count`` expected events) is a scoped verdict beneath, never the verdict. Every
    bound check compares exact fractions of the summed integer counts. One reading: the claim as stated.
    """
    zc, rc, fc = cfg["zero_combo"], cfg["reverse_combo"], cfg.get("forward_combo", "forward S=1")
    z = collapse[collapse["combo"] == zc].dropna(subset=["pred_expected_count"]).sort_values("delta")
    crit = (f"{zc}: measured underflow count 0 at every Δ and sink_v_scale of the grid; {rc}: fraction ≤ sink-block "
            f"share + no-sink fraction + z·SE at every Δ")
    kinds = [f"settings: {rc} removes the collapse, and {zc} has zero underflow (the sentence states both)",
             "readings: none (the sentence leaves nothing open): one reading, the claim as stated"]
    if z.empty:
        return result("C2", "INCONCLUSIVE", crit, {}, [f"no {zc} rows with a prediction"], readings=[], kinds=kinds)
    r = collapse[collapse["combo"] == rc].sort_values("delta")
    f = collapse[collapse["combo"] == fc]
    m = max(r["delta"].nunique(), 1)
    fz = collapse[(collapse["order"] == "forward") & (collapse["scale"] == z["scale"].iloc[0])]
    guarantee = _guarantee(z, fz, zc)

    def stated_at(lv: float) -> list[Subcase]:
        return [guarantee] + ([_removes(r, f, rc, fc, family_z(lv, m))] if len(r) else [])

    zq = family_z(level, m)
    stated = stated_at(level)
    scoped = stated + [_expected_region(z, zc, float(cfg["max_expected_count"]))]
    tols = ["zero underflow: none (a guarantee: the count must be exactly 0)",
            f"{rc}: the sink block's share (block_n − k)/(n − k) = {_share(z)}, a bound by construction (those "
            f"keys meet the sinks' max), + the no-sink fraction at the grid's first Δ + z·SE (z = {short(zq, 3)}); "
            "fractions and bound exact, from the integer counts"]
    events = z.groupby("delta")["underflow"].sum()
    nums = {"first_nonzero_delta": float(events[events > 0].index.min()) if (events > 0).any() else math.nan,
            "max_fraction_" + zc: float(max(_fractions(z))), "sink_block_share": float(_share(z)),
            "underflow_events_" + zc: int(events.sum())}
    readings = [Subcase(AS_STATED, combine(stated), "; ".join(f"{s.name}: {s.verdict}" for s in stated))]
    alts = {f"{a:g}": combine(stated_at(float(a))) for a in _alternatives(cfg, "confidence_level")}
    robust = [Choice(f"confidence level of {rc}'s z·SE (statistics.confidence_level)", f"{level:g}",
                     "the data's noise: the seeds' standard error, widened over the Δ grid", alts)] if alts else []
    region = scoped[-1]
    robust.append(Choice(f"{zc}: where the guarantee is judged", "every Δ of the grid",
                         "the paper's words (a zero-underflow guarantee, no domain given)",
                         {f"only where the exact model expects ≤ {float(cfg['max_expected_count']):g} events":
                          combine(stated[1:] + [region])}))
    details = [f"{fc}: fraction up to {short(float(max(_fractions(f)))) if len(f) else 'nan'} (the collapse "
               f"reverse order removes)", "conditions of the guarantee's derivation: all sinks in the KV block visited "
               "last (block 0, k ≤ block_n), non-causal rows, non-sink scores N(0, σ²); it does not cover the sink "
               "block's own non-sink keys, which meet the sinks' max"]
    return result("C2", across_readings(readings), crit, nums, details, scoped=scoped, tolerances=tols,
                  readings=readings, robustness=robust, kinds=kinds)
