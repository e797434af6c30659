"""C6 (both fixes saturate to the same precision floor): TOST equivalence per Δ over the claim's domain."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from pcast import theory
from pcast.analysis.paired import config_columns, holm, log_ratios, pair_by_seed, tost_log
from pcast.analysis.text import format_runs, intervals, short
from pcast.analysis.verdicts.common import (ARTIFACTS_CHOICE, Choice, Subcase, across_readings, choice, combine,
                                            result, subcase_verdict)
from pcast.analysis.verdicts.mse import open_parameters

__all__ = ["claim_c6", "c6_domain_limit", "tost_pvalues"]


def c6_domain_limit(paired: pd.DataFrame, pairs) -> float:
    """The upper end of C6's domain: the smallest predicted Δc (pcast.theory) of the forward combinations among
    ``pairs``, in the data's σ units; beyond it forward order with that S collapses and the fixes no longer both
    apply. Infinite when no pair has a forward combination."""
    k = int(paired["ksink"].iloc[0]) if "ksink" in paired and len(paired) else 4
    fmt = str(paired["fmt"].iloc[0]) if "fmt" in paired and len(paired) else "e4m3fn"
    sigma = float(paired["sigma"].iloc[0]) if "sigma" in paired and len(paired) else 1.0
    scales = [float(c.split(" S=")[1]) for pair in pairs for c in pair if c.startswith("forward S=")]
    return min((theory.critical_delta(s, k=k, fmt=fmt) * sigma for s in scales), default=math.inf)


def tost_pvalues(tidy: pd.DataFrame, pairs, margin: float, alpha: float) -> pd.DataFrame:
    """TOST p-values (pcast.analysis.paired.tost_log on per-seed log MSE) of ``pairs`` at another ``margin``,
    one row per configuration group and pair, from the tidy collapse table: the same test the statistics
    step runs, at a margin it did not use (no bootstrap, no new sweep)."""
    keys = config_columns(tidy)
    rows = []
    present = set(tidy["combo"].unique())
    for a, b in pairs:
        if a not in present or b not in present:
            continue
        joined = pair_by_seed(tidy, a, b, keys=keys)
        for key, g in joined.groupby(keys, sort=True, dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            d = log_ratios(g[a].to_numpy(float), g[b].to_numpy(float))
            rows.append({**dict(zip(keys, key)), "a": a, "b": b,
                         "p_tost": tost_log(d, math.log1p(margin), alpha=alpha)["p_tost"]})
    return pd.DataFrame(rows)


def _holm_in(p: pd.Series) -> pd.Series:
    """Holm-adjusted p-values over the rows given (a family tested at one level)."""
    return pd.Series(holm(p.to_numpy(float)), index=p.index)


def _at_margin(rows: pd.DataFrame, margin: float, current: float, tidy: pd.DataFrame | None, alpha: float,
               pairs) -> pd.DataFrame:
    """``rows`` (paired.csv's) with ``p_tost`` at ``margin``: as they are at the statistics step's margin, else
    recomputed from ``tidy`` (:func:`tost_pvalues`)."""
    if np.isclose(margin, current):
        return rows
    if tidy is None:
        raise ValueError(f"a TOST margin of {margin:g} (the statistics step used {current:g}) needs the tidy collapse "
                         "table to recompute the p-values")
    p = tost_pvalues(tidy[tidy["delta"].isin(rows["delta"].unique())], pairs, float(margin), alpha)
    keys = [c for c in p.columns if c != "p_tost"]
    return rows.drop(columns=["p_tost"]).merge(p, on=keys, how="left")


def _trivial(rows: pd.DataFrame, pair, alpha: float, holm: bool) -> pd.DataFrame:
    """The Δ (per sink_v_scale) where ``pair`` is equivalent at its own margin (``rows``: its p-values, Holm over
    its own rows when ``holm``): the sink changes nothing a fix could fix there."""
    t = rows[(rows["a"] == pair[0]) & (rows["b"] == pair[1])]
    keys = [c for c in ("sink_v_scale", "delta") if c in t.columns]
    p = _holm_in(t["p_tost"]) if holm and len(t) else t["p_tost"]
    return t.assign(trivial=p < alpha)[keys + ["trivial"]]


def _equivalence_cell(g: pd.DataFrame, grid, col: str, alpha: float, tag: str, min_nontrivial: int,
                      params: Mapping) -> Subcase:
    """One pair and sink_v_scale (``params``): where TOST shows the same floor, trivial Δ not counted as support;
    fewer than ``min_nontrivial`` non-trivial Δ is INCONCLUSIVE (too little to judge equivalence on)."""
    g = g.sort_values("delta")
    holds = (g[col] < alpha).to_numpy()
    trivial = g["trivial"].fillna(False).to_numpy(bool) if "trivial" in g else np.zeros(len(g), bool)
    eq = g.loc[holds & ~trivial, "delta"]
    worst = g.loc[g["gmean_ratio"].sub(1).abs().idxmax()]
    n_non = int((~trivial).sum())
    dom = (f"equivalent at {format_runs(intervals(g.loc[holds, 'delta'], grid))}; at {len(eq)} of "
           f"{n_non} non-trivial Δ ({format_runs(intervals(eq, grid))}); trivial (sink without "
           f"effect): {format_runs(intervals(g.loc[trivial, 'delta'], grid))}; largest geometric-mean ratio "
           f"{short(worst['gmean_ratio'], 3)} at Δ={short(worst['delta'], 3)}")
    if n_non < min_nontrivial:
        return Subcase(tag, "INCONCLUSIVE", dom + f"; {n_non} non-trivial Δ, fewer than the {min_nontrivial} an "
                                                  "equivalence verdict needs (claims.C6.min_nontrivial)", params)
    return Subcase(tag, subcase_verdict(holds, trivial), dom, params)


def _c6_cells(rows: pd.DataFrame, trivial_rows: pd.DataFrame, cfg: Mapping, holm: bool,
              min_nontrivial: int) -> list[Subcase]:
    """One cell per pair and sink_v_scale over ``rows`` (Holm, when ``holm``, over those rows); the trivial Δ from
    ``trivial_rows`` (the trivial pair's p-values at claims.C6.trivial_margin)."""
    alpha, pairs = float(cfg["alpha"]), [tuple(x) for x in cfg["pairs"]]
    col = "p_tost_holm" if holm else "p_tost"
    rows = rows.assign(p_tost_holm=_holm_in(rows["p_tost"])) if holm else rows
    trivial = _trivial(trivial_rows, tuple(cfg["trivial_pair"]), alpha, holm)
    cells = []
    for a, b in pairs:
        p = rows[(rows["a"] == a) & (rows["b"] == b)]
        if p.empty:
            continue
        grid = sorted(p["delta"].unique())
        keys = [c for c in ("sink_v_scale", "delta") if c in p.columns]
        p = p.merge(trivial, on=keys, how="left")
        for svs, g in (p.groupby("sink_v_scale", sort=True) if "sink_v_scale" in p else [(None, p)]):
            tag = f"{a} vs {b}" + (f", sink_v_scale={svs:g}" if svs is not None else "")
            params = {"pair": f"{a} vs {b}", **({"sink_v_scale": float(svs)} if svs is not None else {})}
            cells.append(_equivalence_cell(g, grid, col, alpha, tag, min_nontrivial, params))
    return cells


def _by_norm(cells: list[Subcase]) -> list[Subcase]:
    """One reading per sink_v_scale (the norm the paper leaves open): the strict rule over its pairs."""
    norms = sorted({c.params["sink_v_scale"] for c in cells if "sink_v_scale" in c.params})
    if cells and not norms:
        return [Subcase("the claim as stated", combine(cells),
                        f"{sum(c.verdict == 'PASS' for c in cells)} of {len(cells)} pairs equivalent at every Δ")]
    out = []
    for v in norms:
        these = [c for c in cells if c.params.get("sink_v_scale") == v]
        out.append(Subcase(f"sink_v_scale={v:g}", combine(these),
                           f"{sum(c.verdict == 'PASS' for c in these)} of {len(these)} pairs equivalent at every Δ: "
                           + "; ".join(f"{c.params['pair']} {c.verdict}" for c in these), {"sink_v_scale": v}))
    return out


def _judge(inside: pd.DataFrame, cfg: Mapping, margin: float, current: float, tidy, family, *, holm: bool,
           trivial_margin: float, min_nontrivial: int, alpha: float) -> list[Subcase]:
    """The cells at a TOST ``margin`` and a ``trivial_margin`` (p-values recomputed where they differ from the
    statistics step's ``current``) and a level ``alpha``."""
    cfg = {**cfg, "alpha": alpha}
    rows = _at_margin(inside, margin, current, tidy, alpha, family)
    trivial_rows = _at_margin(inside, trivial_margin, current, tidy, alpha, family)
    return _c6_cells(rows, trivial_rows, cfg, holm, min_nontrivial)


def _robustness(v, cfg: Mapping, *, margin: float, trivial_margin: float, min_non: int, alpha: float, holm: bool,
                recompute: bool) -> list[Choice]:
    """C6's choices, ``v(**kw)`` the verdict with one of them changed (``recompute``: the tidy table is there to
    recompute TOST at another margin)."""
    alt = cfg.get("alternatives") or {}
    return [
        choice("the TOST equivalence margin", "statistics.tost_margin", margin,
               f"{ARTIFACTS_CHOICE}: floors within a factor 1 + margin either way (the paper gives no margin)",
               lambda m: v(m=float(m)), cfg, alt.get("tost_margin", []) if recompute else []),
        choice("the triviality margin (the trivial pair equivalent: the sink changes nothing)",
               "claims.C6.trivial_margin", trivial_margin, f"{ARTIFACTS_CHOICE}, kept apart from the TOST margin so "
               "that the verdict is monotone in each", lambda m: v(tm=float(m)), cfg,
               alt.get("trivial_margin", []) if recompute else []),
        choice("the fewest non-trivial Δ a cell needs", "claims.C6.min_nontrivial", min_non,
               f"{ARTIFACTS_CHOICE}: one Δ is too little to call two floors the same", lambda n: v(mn=int(n)), cfg,
               alt.get("min_nontrivial", [])),
        choice("the TOST level", "claims.C6.alpha", alpha, "the data's noise: the error rate the test controls",
               lambda a: v(a=float(a)), cfg, alt.get("alpha", [])),
        Choice("Holm adjustment over the domain's T1 rows", str(holm).lower(),
               "the data's noise: a family of tests at one level", {str(not holm).lower(): v(h=not holm)},
               key="claims.C6.holm"),
    ]


def claim_c6(paired: pd.DataFrame, cfg: Mapping, dc_onset: float | None = None, *, tidy: pd.DataFrame | None = None,
             stats_cfg: Mapping | None = None) -> dict:
    """Same precision floor: TOST equivalence of each fix with the combined fix, per Δ, over the claim's domain.

    The domain: Δ below forward S's predicted Δc (``c6_domain_limit``, from pcast.theory), where both fixes
    apply; the rows at and beyond it are judged the same way, shown as ``beyond_domain`` and never in the verdict.
    For each listed pair (settings) and sink_v_scale (readings), the Δ where TOST (on log MSE, the margin of the
    ``statistics`` section) rejects non-equivalence at ``alpha`` (Holm-adjusted p over the T1 family's rows in the
    domain when ``holm`` is true). A Δ where ``trivial_pair`` is itself equivalent at its own margin
    (``trivial_margin``, Holm over its own rows) is trivial: no support; the trivial Δ do not move with the TOST
    margin, so the verdict is monotone in it. Cell: INCONCLUSIVE with fewer than ``min_nontrivial`` non-trivial Δ;
    else PASS equivalent at every Δ, FAIL at no non-trivial Δ, PARTIAL otherwise. ``tidy`` (the tidy collapse
    table) recomputes the TOST p-values at a margin the statistics step did not use.
    """
    alpha = float(cfg["alpha"])
    holm = bool(cfg.get("holm", True))
    col = "p_tost_holm" if holm else "p_tost"
    pairs = [tuple(x) for x in cfg["pairs"]]
    margin = float(paired["tost_margin"].iloc[0]) if len(paired) else math.nan
    trivial_margin, min_non = float(cfg["trivial_margin"]), int(cfg["min_nontrivial"])
    family = [tuple(x) for x in stats_cfg["pairs"]] if stats_cfg is not None else pairs + [tuple(cfg["trivial_pair"])]
    limit = c6_domain_limit(paired, pairs)
    crit = (f"TOST on per-seed log MSE, margin ±ln(1 + {margin:g}), {col} < {alpha}, at every Δ < {short(limit, 4)} "
            f"(forward Δc, pcast.theory) and sink_v_scale, for {'; '.join(f'{a} vs {b}' for a, b in pairs)}; Δ where "
            f"{' vs '.join(cfg['trivial_pair'])} is itself equivalent (margin ±ln(1 + {trivial_margin:g})) are trivial "
            f"(no support); at least {min_non} non-trivial Δ per cell")
    tols = [f"equivalence margin ±ln(1 + {margin:g}) (statistics.tost_margin) at {col} < {alpha}: the test "
            "controls its error rate from the seeds' own spread" + ("; Holm over the T1 family's rows in the domain"
                                                                    if holm else ""),
            f"triviality margin ±ln(1 + {trivial_margin:g}) (claims.C6.trivial_margin), apart from the TOST margin"]
    kinds = ["settings: each pair of claims.C6.pairs (both fixes against the combined one: the sentence's 'both')",
             "readings: the sinks' value norm (sink_v_scale), open in the paper",
             f"domain: Δ < {short(limit, 4)}, forward Δc from pcast.theory; beyond it forward order collapses and "
             "only one fix applies, so those Δ are shown apart and never enter the verdict"]
    inside, beyond = paired[paired["delta"] < limit], paired[paired["delta"] >= limit]

    def judge(rows, m=margin, h=holm, tm=trivial_margin, mn=min_non, a=alpha):
        return _judge(rows, cfg, m, margin, tidy, family, holm=h, trivial_margin=tm, min_nontrivial=mn, alpha=a)

    cells = judge(inside)
    outside = judge(beyond) if len(beyond) else []
    details = [f"{sum(c.verdict == 'PASS' for c in cells)} of {len(cells)} cells (pair x sink_v_scale) equivalent at "
               f"every Δ of the domain", open_parameters(paired)]
    details += [f"{a} vs {b}: not measured" for a, b in pairs
                if paired[(paired["a"] == a) & (paired["b"] == b)].empty]
    nums = {"domain_limit": limit, "cells": len(cells), "passing": sum(c.verdict == "PASS" for c in cells),
            "deltas_in_domain": int(inside["delta"].nunique()), "deltas_beyond": int(beyond["delta"].nunique())}
    if dc_onset is not None and np.isfinite(dc_onset):
        nums["dc_pred_S256"] = dc_onset
    readings = _by_norm(cells)
    beyond_lines = [Subcase(f"beyond the domain (Δ ≥ {short(limit, 4)}): {c.name}", c.verdict, c.domain)
                    for c in outside]
    if not cells:
        return result("C6", "INCONCLUSIVE", crit, nums, details or ["no pairs measured"], tolerances=tols,
                      readings=[], kinds=kinds, beyond_domain=beyond_lines)
    robust = _robustness(lambda **kw: across_readings(_by_norm(judge(inside, **kw))), cfg, margin=margin,
                         trivial_margin=trivial_margin, min_non=min_non, alpha=alpha, holm=holm,
                         recompute=tidy is not None)
    return result("C6", across_readings(readings), crit, nums, details, scoped=cells, tolerances=tols,
                  readings=readings, robustness=robust, beyond_domain=beyond_lines, kinds=kinds)
