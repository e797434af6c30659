"""C5 (the fixes improve MSE 3–10×) and C6 (both fixes reach the same floor), from the T1 family."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from pcast import theory
from pcast.analysis.text import format_runs, intervals, short
from pcast.analysis.verdicts.common import Choice, Subcase, across_readings, combine, result, subcase_verdict

__all__ = ["claim_c5", "claim_c6", "c6_domain_limit", "tost_pvalues", "moderate_windows", "sink_value_norms",
           "norm_source", "BAND_RULES"]

#: How a (reading, norm, fix) cell meets the band: the peak over the reading's Δ (the claim's number is
#: the improvement the fix brings there), or any Δ of the reading (the ratio passes through the band).
BAND_RULES = ("peak", "passes through")


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


def moderate_windows(windows, baseline_fraction: pd.Series | None, grid) -> list[tuple[str, list[float]]]:
    """The readings of "moderate sink strength": (name, its Δ) per window of the baseline's predicted
    underflow fraction; the whole grid when no prediction is given."""
    if baseline_fraction is None or baseline_fraction.empty:
        return [("the whole Δ grid", list(grid))]
    out = []
    for lo, hi in windows:
        ds = [float(d) for d, f in baseline_fraction.items() if lo <= f <= hi and d in set(grid)]
        out.append((f"moderate = baseline underflow in [{lo:g}, {hi:g}] (Δ∈{format_runs(intervals(ds, grid))[2:]})"
                    if ds else f"moderate = baseline underflow in [{lo:g}, {hi:g}] (no Δ)", ds))
    return out


def _c5_cell(g: pd.DataFrame, ds: list[float], band, far: float, name: str, grid, rule: str = "peak") -> Subcase:
    """One (reading, sink_v_scale, fix): the peak of the median paired ratio over the reading's Δ (``rule``
    "peak"), or any Δ of the reading whose CI meets the band ("passes through"), against the band."""
    lo, hi = band
    w = g[g["delta"].isin(ds)].sort_values("delta")
    if w.empty:
        return Subcase(name, "INCONCLUSIVE", "no Δ in this reading")
    i = int(np.nanargmax(w["median_ratio"].to_numpy(float)))
    peak, at = float(w["median_ratio"].iloc[i]), float(w["delta"].iloc[i])
    ci_lo, ci_hi = float(w["ci_low"].iloc[i]), float(w["ci_high"].iloc[i])
    regime, v = _band_regime(peak, ci_lo, ci_hi, lo, hi, far)
    inband = w.loc[(w["ci_high"] >= lo) & (w["ci_low"] <= hi), "delta"]
    if rule == "passes through" and len(inband):
        v = "PASS"
    return Subcase(name, v, f"peak {short(peak, 3)}× [{short(ci_lo, 3)}, {short(ci_hi, 3)}] at Δ={short(at, 3)} → "
                            f"{regime}; in [{lo:g}, {hi:g}] at {format_runs(intervals(inband, grid))}")


def _c5_judge(p: pd.DataFrame, windows, baseline_fraction, band, far: float, rule: str = "peak",
              norms: Sequence[float] | None = None) -> tuple[list[Subcase], list[Subcase]]:
    """(readings, cells): one reading per (window of "moderate", sink_v_scale), the strict rule over its fixes."""
    grid = sorted(p["delta"].unique())
    svs_col = "sink_v_scale" if "sink_v_scale" in p.columns else None
    if svs_col and norms is not None:
        p = p[p[svs_col].isin(norms)]
    cells, readings = [], []
    for wname, ds in moderate_windows(windows, baseline_fraction, grid):
        for svs, gs in (p.groupby(svs_col, sort=True) if svs_col else [(None, p)]):
            tag = f"{wname}, sink_v_scale={svs:g}" if svs is not None else wname
            these = [_c5_cell(g, ds, band, far, f"{tag}, {fix}", grid, rule) for fix, g in gs.groupby("b", sort=True)]
            cells += these
            readings.append(Subcase(tag, combine(these),
                                    f"{sum(c.verdict == 'PASS' for c in these)} of {len(these)} fixes in band: "
                                    + "; ".join(f"{c.name.rsplit(', ', 1)[1]} {c.domain.split(' → ')[0]}"
                                                for c in these)))
    return readings, cells


def claim_c5(paired: pd.DataFrame, cfg: Mapping, baseline_fraction: pd.Series | None = None, *,
             sink_norms: pd.DataFrame | None = None) -> dict:
    """Improvement ratio MSE(baseline) / MSE(fix) against the claimed band, per reading of "moderate"
    and sink_v_scale (readings), every fix (settings).

    A cell's peak of the median paired ratio over the reading's Δ is ``below`` (CI wholly under
    lo): FAIL; ``in band`` (CI meets [lo, hi]): PASS; ``above`` (CI wholly over hi, not over
    far_above): PARTIAL (the claim understates the gain); ``far above``: FAIL. Readings: the Δ where
    the exact model puts the baseline's non-sink underflow (``baseline_fraction``: Δ -> fraction)
    inside each ``cfg['moderate']`` window, at each sink-value norm. A reading combines its fixes by
    the strict rule; the verdict combines the readings by :func:`.common.across_readings`. The
    robustness table recomputes it at ``cfg['alternatives']`` (far_above, moderate) and under the
    other band rule ("passes through"), and per sink-value norm alone (``sink_norms``: the real model's
    measured norms, :func:`pcast.analysis.verdicts.mse.sink_value_norms`, printed as that row's source).
    """
    base, fixes = cfg["baseline"], list(cfg["fixes"])
    band = tuple(float(v) for v in cfg["band"])
    far = float(cfg["far_above"])
    crit = (f"peak over the moderate Δ of the median paired ratio MSE({base}) / MSE(fix): its bootstrap CI meets "
            f"[{band[0]:g}, {band[1]:g}], for every fix, per reading (window of 'moderate' x sink_v_scale)")
    tols = ["the band's edges are the paper's; a peak is in band when its paired-bootstrap CI (statistics."
            "confidence_level) meets the band, below / above only when the whole CI is",
            f"'far above': CI wholly over {far:g} (claims.C5.far_above)"]
    kinds = ["settings: every fix of claims.C5.fixes (the sentence's improvement is each fix's)",
             "readings: \"moderate sink strength\" (a window of the baseline's predicted underflow, claims.C5.moderate) "
             "and the sinks' value norm (sink_v_scale), both open in the paper"]
    p = paired[(paired["a"] == base) & paired["b"].isin(fixes)]
    if p.empty:
        return result("C5", "INCONCLUSIVE", crit, {}, ["no paired tests of the baseline against a fix"],
                      tolerances=tols, readings=[], kinds=kinds)
    windows = [tuple(w) for w in cfg["moderate"]]
    readings, cells = _c5_judge(p, windows, baseline_fraction, band, far)
    nums = {"cells": len(cells), "in_band": sum(c.verdict == "PASS" for c in cells), "readings": len(readings),
            "readings_holding": sum(r.verdict in ("PASS", "PARTIAL") for r in readings)}
    if "sink_v_scale" in p.columns:
        peaks = p.groupby(["sink_v_scale", "b"])["median_ratio"].max()
        for v, g in peaks.groupby(level=0):
            nums[f"peak_min[sink_v_scale={v:g}]"] = float(g.min())
            nums[f"peak_max[sink_v_scale={v:g}]"] = float(g.max())
    robust = _c5_robustness(p, cfg.get("alternatives") or {}, windows, baseline_fraction, band, far, sink_norms)
    details = [f"{nums['in_band']} of {len(cells)} cells (reading x fix) in band; the readings' verdicts and each "
               "cell are listed above", _open_parameters(p)]
    return result("C5", across_readings(readings), crit, nums, details, scoped=cells, tolerances=tols,
                  readings=readings, robustness=robust, kinds=kinds)


def sink_value_norms(tensors: Mapping, heads: pd.DataFrame) -> pd.DataFrame:
    """The sinks' value norm of each clean-sink head of a real model, in the generator's units: per (layer,
    head), the mean over passages of mean ‖v‖ of the sink keys over mean ‖v‖ of the other keys (the
    generator's ``sink_v_scale`` is exactly this ratio). ``tensors``: ``layer{L}/v`` arrays [P, H, N, d]
    (results/inputs/realmodel/tensors.safetensors); ``heads``: the realmodel heads summary (its ``sinks``,
    ``;``-joined key indices, and ``sink_type``)."""
    rows = []
    h = heads[heads["sink_type"] == "clean"].drop_duplicates(["layer", "head"])
    for _, r in h.iterrows():
        v = tensors.get(f"layer{int(r['layer'])}/v")
        sinks = [int(x) for x in str(r["sinks"]).split(";") if x.strip() not in ("", "nan")]
        if v is None or not sinks:
            continue
        norms = np.linalg.norm(np.asarray(v, dtype=np.float64)[:, int(r["head"])], axis=-1)  # [P, N]
        other = np.setdiff1d(np.arange(norms.shape[1]), sinks)
        ratio = norms[:, sinks].mean(axis=1) / norms[:, other].mean(axis=1)
        rows.append({"layer": int(r["layer"]), "head": int(r["head"]), "sink_v_norm": float(ratio.mean())})
    return pd.DataFrame(rows, columns=["layer", "head", "sink_v_norm"])


def norm_source(norms: pd.DataFrame | None) -> str:
    """Where the tested sink-value norms come from: the generator's range, and the real model's measurement."""
    text = "the generator's range: 0 (learned sinks that carry no value) to 1 (unit-norm values)"
    if norms is not None and len(norms):
        v = norms["sink_v_norm"]
        text += (f"; measured in the real model's {len(v)} clean-sink heads: {short(v.min(), 2)}–{short(v.max(), 2)}"
                 f" (median {short(v.median(), 2)}) × the other keys' value norm")
    return text


def _c5_robustness(p: pd.DataFrame, alt: Mapping, windows, baseline_fraction, band, far: float,
                   sink_norms: pd.DataFrame | None) -> list[Choice]:
    """C5's choices, each recomputed from ``p``: the band rule, far_above, the windows, each norm alone."""
    def verdict(**kw) -> str:
        args = {"windows": windows, "baseline_fraction": baseline_fraction, "band": band, "far": far, **kw}
        return across_readings(_c5_judge(p, **args)[0])

    robust = [Choice("how a fix meets the band", "peak", "the paper's words (\"show 3–10× improvement\": the "
                     "improvement at a moderate strength, read at its largest)",
                     {"passes through (any Δ of the window)": verdict(rule="passes through")})]
    if alt.get("far_above"):
        robust.append(Choice("'far above' the band (claims.C5.far_above)", f"{far:g}",
                             "a stated reason: a gain several times the band's top is no longer the claimed one",
                             {f"{float(a):g}": verdict(far=float(a)) for a in alt["far_above"]}))
    if alt.get("moderate"):
        label = lambda ws: "; ".join(f"[{lo:g}, {hi:g}]" for lo, hi in ws)  # noqa: E731
        robust.append(Choice("the windows of 'moderate' (claims.C5.moderate)", label(windows),
                             "the theory: the baseline's predicted underflow from the onset to Δc, and from Δc on",
                             {label(ws): verdict(windows=[tuple(w) for w in ws]) for ws in alt["moderate"]}))
    if "sink_v_scale" in p.columns and p["sink_v_scale"].nunique() > 1:
        norms = sorted(float(v) for v in p["sink_v_scale"].unique())
        robust.append(Choice("the sinks' value norms tested (the grid's sink_v_scale)", ", ".join(f"{v:g}" for v in norms),
                             norm_source(sink_norms), {f"only {v:g}": verdict(norms=[v]) for v in norms}))
    return robust


def _open_parameters(p: pd.DataFrame) -> str:
    """Which values of the parameter the paper leaves open (the sinks' value norm) the data tests, and why."""
    norms = sorted(p["sink_v_scale"].unique()) if "sink_v_scale" in p.columns else []
    return ("open in the paper, the sinks' value norm: tested at sink_v_scale " + ", ".join(f"{v:g}" for v in norms)
            + " (0: sinks that carry no value, as learned sinks usually do; 1: the generator's unit-norm values; "
            "values between: small ones); each is a reading with its own verdict") if norms else \
        "the sinks' value norm is not a column of the data: one setting"


# ----------------------------------------------------------------------------- C6


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
    from pcast.analysis.paired import config_columns, log_ratios, pair_by_seed, tost_log

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


def _holm_in(paired: pd.DataFrame) -> pd.Series:
    """Holm-adjusted TOST p-values over the rows given (the family the claim tests)."""
    from pcast.analysis.paired import holm

    return pd.Series(holm(paired["p_tost"].to_numpy(float)), index=paired.index)


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


def _c6_cells(paired: pd.DataFrame, pairs, trivial_pair, alpha: float, holm: bool) -> list[Subcase]:
    """One cell per pair and sink_v_scale over the rows given, Holm (when ``holm``) over those rows."""
    col = "p_tost_holm" if holm else "p_tost"
    paired = paired.assign(p_tost_holm=_holm_in(paired)) if holm else paired
    trivial = _trivial(paired, tuple(trivial_pair), col, alpha)
    cells = []
    for a, b in pairs:
        p = paired[(paired["a"] == a) & (paired["b"] == b)]
        if p.empty:
            continue
        grid = sorted(p["delta"].unique())
        keys = [c for c in ("sink_v_scale", "delta") if c in p.columns]
        p = p.merge(trivial, on=keys, how="left")
        for svs, g in (p.groupby("sink_v_scale", sort=True) if "sink_v_scale" in p else [(None, p)]):
            tag = f"{a} vs {b}" + (f", sink_v_scale={svs:g}" if svs is not None else "")
            cells.append(_equivalence_cell(g, grid, col, alpha, tag))
    return cells


def _by_norm(cells: list[Subcase]) -> list[Subcase]:
    """One reading per sink_v_scale (the norm the paper leaves open): the strict rule over its pairs."""
    norms = sorted({c.name.split("sink_v_scale=")[1] for c in cells if "sink_v_scale=" in c.name}, key=float)
    if cells and not norms:
        return [Subcase("the claim as stated", combine(cells),
                        f"{sum(c.verdict == 'PASS' for c in cells)} of {len(cells)} pairs equivalent at every Δ")]
    out = []
    for v in norms:
        these = [c for c in cells if c.name.endswith(f"sink_v_scale={v}")]
        out.append(Subcase(f"sink_v_scale={v}", combine(these),
                           f"{sum(c.verdict == 'PASS' for c in these)} of {len(these)} pairs equivalent at every Δ: "
                           + "; ".join(f"{c.name.rsplit(', ', 1)[0]} {c.verdict}" for c in these)))
    return out


def _c6_robustness(inside: pd.DataFrame, pairs, cfg: Mapping, alpha: float, holm: bool, margin: float, limit: float,
                   tidy: pd.DataFrame | None, stats_cfg: Mapping | None) -> list[Choice]:
    """C6's choices: the TOST margin (p-values recomputed from ``tidy`` inside the domain) and Holm."""
    def verdict(rows: pd.DataFrame, h: bool) -> str:
        return across_readings(_by_norm(_c6_cells(rows, pairs, cfg["trivial_pair"], alpha, h)))

    robust = [Choice("Holm adjustment over the domain's T1 rows (claims.C6.holm)", str(holm).lower(),
                     "the data's noise: a family of tests at one level", {str(not holm).lower(): verdict(inside, not holm)})]
    alt = cfg.get("alternatives") or {}
    if tidy is not None and stats_cfg is not None and alt.get("tost_margin"):
        family = [tuple(x) for x in stats_cfg["pairs"]]
        verdicts = {}
        for m in alt["tost_margin"]:
            p = tost_pvalues(tidy[tidy["delta"] < limit], family, float(m), alpha)
            keys = [c for c in p.columns if c != "p_tost"]
            verdicts[f"{float(m):g}"] = verdict(inside.drop(columns=["p_tost"]).merge(p, on=keys, how="left"), holm)
        robust.insert(0, Choice("the TOST equivalence margin (statistics.tost_margin)", f"{margin:g}",
                                "a stated tolerance: floors within a factor 1 + margin either way", verdicts))
    return robust


def claim_c6(paired: pd.DataFrame, cfg: Mapping, dc_onset: float | None = None, *, tidy: pd.DataFrame | None = None,
             stats_cfg: Mapping | None = None) -> dict:
    """Same precision floor: TOST equivalence of each fix with the combined fix, per Δ, over the claim's domain.

    The domain: Δ below forward S's predicted Δc (:func:`pcast.analysis.verdicts.mse.c6_domain_limit`, from pcast.theory), where
    both fixes apply; the rows at and beyond it are judged the same way, shown as ``beyond_domain``
    and never in the verdict. For each listed pair (settings) and sink_v_scale (readings), the Δ where
    TOST (on log MSE, the margin of the ``statistics`` section) rejects non-equivalence at ``alpha``
    (Holm-adjusted p over the T1 family's rows in the domain when ``holm`` is true). A Δ where
    ``trivial_pair`` is itself equivalent is trivial: no support. Cell: PASS equivalent at every Δ;
    FAIL at no non-trivial Δ; PARTIAL otherwise. ``tidy`` (the tidy collapse table) and ``stats_cfg``
    recompute the TOST p-values at the alternative margins of ``cfg['alternatives']['tost_margin']``.
    """
    alpha = float(cfg["alpha"])
    holm = bool(cfg.get("holm", True))
    col = "p_tost_holm" if holm else "p_tost"
    pairs = [tuple(x) for x in cfg["pairs"]]
    margin = float(paired["tost_margin"].iloc[0]) if len(paired) else math.nan
    limit = c6_domain_limit(paired, pairs)
    crit = (f"TOST on per-seed log MSE, margin ±ln(1 + {margin:g}), {col} < {alpha}, at every Δ < {short(limit, 4)} "
            f"(forward Δc, pcast.theory) and sink_v_scale, for {'; '.join(f'{a} vs {b}' for a, b in pairs)}; Δ where "
            f"{' vs '.join(cfg['trivial_pair'])} is itself equivalent are trivial (no support)")
    tols = [f"equivalence margin ±ln(1 + {margin:g}) (statistics.tost_margin) at {col} < {alpha}: the test "
            "controls its error rate from the seeds' own spread" + ("; Holm over the T1 family's rows in the domain"
                                                                    if holm else "")]
    kinds = ["settings: each pair of claims.C6.pairs (both fixes against the combined one: the sentence's 'both')",
             "readings: the sinks' value norm (sink_v_scale), open in the paper",
             f"domain: Δ < {short(limit, 4)}, forward Δc from pcast.theory; beyond it forward order collapses and "
             "only one fix applies, so those Δ are shown apart and never enter the verdict"]
    inside, beyond = paired[paired["delta"] < limit], paired[paired["delta"] >= limit]
    cells = _c6_cells(inside, pairs, cfg["trivial_pair"], alpha, holm)
    outside = _c6_cells(beyond, pairs, cfg["trivial_pair"], alpha, holm) if len(beyond) else []
    details = [f"{sum(c.verdict == 'PASS' for c in cells)} of {len(cells)} cells (pair x sink_v_scale) equivalent at "
               f"every Δ of the domain", _open_parameters(paired)]
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
    robust = _c6_robustness(inside, pairs, cfg, alpha, holm, margin, limit, tidy, stats_cfg)
    return result("C6", across_readings(readings), crit, nums, details, scoped=cells, tolerances=tols,
                  readings=readings, robustness=robust, beyond_domain=beyond_lines, kinds=kinds)
