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
from pcast.analysis.verdicts.common import (ARTIFACTS_CHOICE, AS_STATED, Choice, Subcase, across_readings, choice,
                                            combine, exact_fraction, family_z, result, subcase_verdict)

__all__ = ["claim_c1", "claim_c2", "leading_order_tolerance", "distinct_points", "RULES", "KEY_SETS"]

#: C1's and C2's criteria in words: each verdict's criterion starts with its rule, and docs/claims.md and
#: docs/method.md state the same words (tests/analysis/test_choices.py holds them together).
RULES = {
    "C1": ("the paper's leading-order law Φ(Δ + δk − 6.93 − ln S), not the exact model, within claims.C1.allowance "
           "first neglected terms ½ Var(M_k) φ(1) plus z·SE of the measured fraction at every distinct point of "
           "each forward combination"),
    "C2": ("at every Δ of the grid, not only where the exact model expects few events, and on one key set for both "
           "halves (a reading: all non-sink keys, or the keys outside the sink block, which may use the sink "
           "block's share): reverse S=1 within the no-sink fraction plus z·SE, and reverse S=256 with zero underflow"),
}


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

    A point (Δ, sink_v_scale) holds when ``|measured − Φ law|`` ≤ ``cfg['allowance']`` × ½ Var(M_k) φ(1) (the
    law's first neglected term, :func:`~pcast.analysis.verdicts.underflow.leading_order_tolerance`; 0.0595 at
    ksink 4 and allowance 1) + z·SE (the seed-mean's standard error, z the family quantile of ``level`` over every
    distinct point judged, :func:`pcast.analysis.verdicts.underflow.distinct_points`). Trivial points:
    measurement and law both within the tolerance of 0 or of 1 (the flat ends say nothing of the law's position).
    Settings: the forward combinations (the sentence covers forward order at any S); readings: none (the law
    leaves nothing open; the sinks' value norm cannot change an underflow count), so one reading, the claim as
    stated. The robustness table recomputes it at other confidence levels and other allowances.
    """
    combos = list(cfg["combos"])
    allowance = float(cfg["allowance"])
    d = distinct_points(collapse[collapse["combo"].isin(combos)].dropna(subset=["pred_leading"]))
    k = int(d["ksink"].iloc[0]) if len(d) else 4
    term = leading_order_tolerance(k)
    tol = allowance * term
    z = family_z(level, max(len(d), 1))
    crit = (f"{RULES['C1']}: |measured − Φ(Δ + δk − 6.93 − ln S)| ≤ {short(tol, 3)} (claims.C1.allowance = {allowance:g} × the first "
            f"neglected term) + z·SE at every distinct Δ of {', '.join(combos)}; z = {short(z, 3)} (level {level:g} "
            f"over {len(d)} distinct points)")
    tols = [f"{short(tol, 3)}: {allowance:g} × the leading-order law's first neglected term ½ Var(M_{k}) φ(1) = "
            f"{short(term, 3)} (M_{k}: the max of {k} N(0,1) sink scores, Var = {short(2 * term / sps.norm.pdf(1.0), 4)})",
            f"z·SE: SE = standard deviation of the underflow fraction over seeds / √seeds; z = {short(z, 3)}"]
    kinds = ["settings: each forward combination of claims.C1.combos (the sentence covers forward order at "
             "every S)", "readings: none; the law leaves nothing open and the sinks' value norm cannot change "
             "which P underflow, so rows that differ only in it are one point"]
    if d.empty:
        return result("C1", "INCONCLUSIVE", crit, {}, ["no rows with a prediction"], tolerances=tols,
                      readings=[], kinds=kinds)
    subs, z, more = _c1_judge(d, combos, tol, level)
    nums = {"tolerance_leading": tol, "first_neglected_term": term, "allowance": allowance, "z": z,
            "points": int(len(d)), **more}
    readings = [Subcase(AS_STATED, combine(subs), "; ".join(f"{s.name}: {s.verdict}" for s in subs)
                        + f" ({len(d)} distinct points)")]
    robust = [
        choice("confidence level of z·SE", "statistics.confidence_level", level,
               "the data's noise: the seeds' standard error, widened over the family of distinct points",
               lambda a: combine(_c1_judge(d, combos, tol, float(a))[0]), cfg, _alternatives(cfg, "confidence_level")),
        choice("the allowance beside z·SE, in first neglected terms ½ Var(M_k) φ(1)", "claims.C1.allowance", allowance,
               f"{ARTIFACTS_CHOICE}: the paper gives the law to leading order and no tolerance; one neglected term "
               f"({short(term, 3)} at ksink {k}) is the size of what it leaves out; 0 judges it on the seeds' noise alone",
               lambda a: combine(_c1_judge(d, combos, float(a) * term, level)[0]), cfg, _alternatives(cfg, "allowance")),
    ]
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


#: The readings of the guarantee's key set: which non-sink keys "removes it" and "zero underflow" speak of.
KEY_SETS = ("all non-sink keys", "the keys outside the sink block")


def _guarantee(z: pd.DataFrame, fz: pd.DataFrame, zc: str, keys: str) -> Subcase:
    """Zero underflow at every Δ among ``keys`` (a guarantee: one counterexample fails it); trivial where the
    forward combination with the same S does not underflow either. The counts do not say which keys underflowed:
    for the keys outside the sink block the test is the count within the sink block's share (what zero outside
    it allows: in reverse order only the sink block's own keys are cast after the sinks' max)."""
    events = z.groupby("delta")["underflow"].sum()
    fr = _fractions(z)
    share = _share(z)
    holds = events == 0 if keys == KEY_SETS[0] else pd.Series([x <= share for x in fr], index=fr.index)
    trivial = (fz.groupby("delta")["underflow"].sum() == 0).reindex(events.index, fill_value=False) \
        if len(fz) else pd.Series(False, index=events.index)
    grid = list(events.index)
    bad = events[events > 0]
    what = "zero" if keys == KEY_SETS[0] else f"within the sink block's share {share} (zero outside it)"
    dom = (f"{what} at {format_runs(intervals(events[holds].index, grid))} ({int(holds.sum())} of {len(grid)} Δ, "
           f"{int((holds & ~trivial).sum())} of them non-trivial)")
    if len(bad):
        dom += (f"; underflows from Δ={short(float(bad.index.min()), 3)} ({int(bad.iloc[0])} events), up to a "
                f"fraction {short(float(max(fr)))} (the sink block's share {share} = {short(float(share))})")
    return Subcase(f"{zc}: zero underflow among {keys} at every Δ", subcase_verdict(holds, trivial, guarantee=True),
                   dom)


def _removes(r: pd.DataFrame, f: pd.DataFrame, rc: str, fc: str, z: float, keys: str) -> Subcase:
    """Reverse order removes the collapse among ``keys``: the fraction stays within the no-sink underflow (the
    fraction at the grid's first Δ) plus z·SE, plus the sink block's share for the keys outside the sink block;
    trivial where forward is within it too. Fractions and the bound are exact fractions of the integer counts;
    only the z·SE slack is a float."""
    frac = _fractions(r)
    se = _per_delta(r, "underflow_frac_se") if "underflow_frac_se" in r else pd.Series(0.0, index=frac.index)
    no_sink = frac.iloc[0]
    share = _share(r) if keys == KEY_SETS[1] else Fraction(0)
    bound = share + no_sink
    holds = pd.Series([x <= bound or float(x - bound) <= z * float(s) for x, s in zip(frac, se)], index=frac.index)
    ffrac = _fractions(f) if len(f) else pd.Series(dtype=object)
    trivial = pd.Series([d in ffrac.index and ffrac[d] <= bound for d in frac.index], index=frac.index)
    dom = (f"max fraction {short(float(max(frac)))} against the bound {short(float(bound))} (share {share} + "
           f"no-sink {short(float(no_sink))}; exact fractions of the counts) at {int(holds.sum())} of {len(frac)} Δ "
           f"({int((~trivial).sum())} where {fc} exceeds the bound, up to "
           f"{short(float(max(ffrac))) if len(ffrac) else 'nan'})")
    return Subcase(f"{rc}: reverse order removes the collapse among {keys}", subcase_verdict(holds, trivial), dom)


def _expected_region(z: pd.DataFrame, zc: str, max_exp: float) -> Subcase:
    """Scoped: zero underflow where the exact model expects at most ``max_exp`` events in the sample."""
    region = z[z["pred_expected_count"] <= max_exp]
    if region.empty:
        return Subcase(f"{zc} where the exact model expects ≤ {max_exp:g} events", "INCONCLUSIVE", "no such Δ")
    events = region.groupby("delta")["underflow"].sum()
    return Subcase(f"{zc} where the exact model expects ≤ {max_exp:g} events (Δ ≤ "
                   f"{short(region['delta'].max(), 3)})", subcase_verdict(events == 0, guarantee=True),
                   f"{int(events.sum())} events measured there")


def _c2_readings(collapse: pd.DataFrame, cfg: Mapping, level: float, region: bool = False) -> list[Subcase]:
    """One reading per key set (:data:`KEY_SETS`), each the strict rule over both halves judged on that key set:
    reverse S=1 removes the collapse, and reverse S=256 has zero underflow (``region``: only where the exact
    model expects at most ``cfg['max_expected_count']`` events, for the all-keys reading)."""
    zc, rc, fc = cfg["zero_combo"], cfg["reverse_combo"], cfg.get("forward_combo", "forward S=1")
    z = collapse[collapse["combo"] == zc].dropna(subset=["pred_expected_count"]).sort_values("delta")
    r = collapse[collapse["combo"] == rc].sort_values("delta")
    f = collapse[collapse["combo"] == fc]
    fz = collapse[(collapse["order"] == "forward") & (collapse["scale"] == z["scale"].iloc[0])]
    zq = family_z(level, max(r["delta"].nunique(), 1))
    out = []
    for keys in KEY_SETS:
        g = _expected_region(z, zc, float(cfg["max_expected_count"])) if region and keys == KEY_SETS[0] \
            else _guarantee(z, fz, zc, keys)
        halves = [g] + ([_removes(r, f, rc, fc, zq, keys)] if len(r) else [])
        out.append(Subcase(f"the guarantee covers {keys}", combine(halves),
                           "; ".join(f"{s.name}: {s.verdict} ({s.domain})" for s in halves)))
    return out


def _c2_block_n(collapse: pd.DataFrame, cfg: Mapping, level: float) -> Choice:
    """block_n decides the sink block's share: the verdict per block_n the grid measures, and INCONCLUSIVE (not
    measured) at each alternative of ``claims.C2.alternatives.block_n`` it does not."""
    have = sorted(int(b) for b in collapse["block_n"].unique())
    verdicts = {}
    for b in have if len(have) > 1 else []:
        verdicts[f"{b} (measured)"] = across_readings(_c2_readings(collapse[collapse["block_n"] == b], cfg, level))
    for b in _alternatives(cfg, "block_n"):
        if int(b) not in have:
            verdicts[f"{int(b)}"] = ("INCONCLUSIVE (not in this run: add a shape with this block_n to "
                                     "experiments.collapse.shapes)")
    return Choice("the KV block size (experiments.collapse.shapes[].block_n): the sink block's share",
                  ", ".join(str(b) for b in have), f"{ARTIFACTS_CHOICE}: the grid's kernel blocks", verdicts,
                  key="claims.C2.alternatives.block_n")


def claim_c2(collapse: pd.DataFrame, cfg: Mapping, *, level: float = 0.95) -> dict:
    """Reverse order removes the collapse, and reverse with S = 256 underflows nowhere on the grid.

    Two settings, both as stated: ``reverse_combo`` removes the collapse (its fraction within the no-sink
    underflow plus z·SE at every Δ) and ``zero_combo`` has zero underflow at every Δ (a guarantee). Readings:
    the key set both speak of (:data:`KEY_SETS`), the same for both halves: every non-sink key, or the keys
    outside the sink block (the sink block's own non-sink keys meet the sinks' max in either order, and the
    derivation does not cover them): then each half is allowed the sink block's share (block_n − k)/(n − k).
    The exact model's region (at most ``max_expected_count`` expected events) is a scoped verdict beneath and an
    alternative in the robustness table, never the verdict. Every bound check compares exact fractions of the
    summed integer counts.
    """
    zc, rc, fc = cfg["zero_combo"], cfg["reverse_combo"], cfg.get("forward_combo", "forward S=1")
    z = collapse[collapse["combo"] == zc].dropna(subset=["pred_expected_count"]).sort_values("delta")
    crit = (f"{RULES['C2']}: per key set (all non-sink keys; the keys outside the sink block): {zc} underflows none of them at "
            f"every Δ and sink_v_scale of the grid; {rc}'s fraction among them ≤ the no-sink fraction + z·SE at every "
            "Δ; outside the sink block each half is allowed the sink block's share (block_n − k)/(n − k)")
    kinds = [f"settings: {rc} removes the collapse, and {zc} has zero underflow (the sentence states both)",
             "readings: which non-sink keys the guarantee covers (every one, or those outside the sink block, whose "
             "own keys meet the sinks' max in either order), one key set for both halves"]
    if z.empty:
        return result("C2", "INCONCLUSIVE", crit, {}, [f"no {zc} rows with a prediction"], readings=[], kinds=kinds)
    r = collapse[collapse["combo"] == rc].sort_values("delta")
    f = collapse[collapse["combo"] == fc]
    zq = family_z(level, max(r["delta"].nunique(), 1))
    readings = _c2_readings(collapse, cfg, level)
    fz = collapse[(collapse["order"] == "forward") & (collapse["scale"] == z["scale"].iloc[0])]
    scoped = [_guarantee(z, fz, zc, k) for k in KEY_SETS] + [_removes(r, f, rc, fc, zq, k) for k in KEY_SETS if len(r)]
    scoped.append(_expected_region(z, zc, float(cfg["max_expected_count"])))
    tols = ["zero underflow: none (a guarantee: the count must be exactly 0, or within the sink block's share for "
            "the keys outside it; the counts do not say which keys underflowed)",
            f"{rc}: the no-sink fraction at the grid's first Δ + z·SE (z = {short(zq, 3)}), + the sink block's share "
            f"(block_n − k)/(n − k) = {_share(z)} outside the sink block; fractions and bound exact, from the counts"]
    events = z.groupby("delta")["underflow"].sum()
    nums = {"first_nonzero_delta": float(events[events > 0].index.min()) if (events > 0).any() else math.nan,
            "max_fraction_" + zc: float(max(_fractions(z))), "sink_block_share": float(_share(z)),
            "underflow_events_" + zc: int(events.sum()), "block_n": int(z["block_n"].iloc[0])}
    robust = [choice(f"confidence level of {rc}'s z·SE", "statistics.confidence_level", level,
                     "the data's noise: the seeds' standard error, widened over the Δ grid",
                     lambda a: across_readings(_c2_readings(collapse, cfg, float(a))), cfg,
                     _alternatives(cfg, "confidence_level")),
              Choice(f"{zc}: where the guarantee is judged", "every Δ of the grid",
                     "the paper's words (a zero-underflow guarantee, no domain given)",
                     {f"only where the exact model expects ≤ {float(cfg['max_expected_count']):g} events (all keys)":
                      across_readings(_c2_readings(collapse, cfg, level, region=True))},
                     key="claims.C2.max_expected_count"),
              _c2_block_n(collapse, cfg, level)]
    details = [f"{fc}: fraction up to {short(float(max(_fractions(f)))) if len(f) else 'nan'} (the collapse "
               f"reverse order removes)", "conditions of the guarantee's derivation: all sinks in the KV block visited "
               "last (block 0, k ≤ block_n), non-causal rows, non-sink scores N(0, σ²); it does not cover the sink "
               "block's own non-sink keys, which meet the sinks' max"]
    return result("C2", across_readings(readings), crit, nums, details, scoped=scoped, tolerances=tols,
                  readings=readings, robustness=robust, kinds=kinds)
