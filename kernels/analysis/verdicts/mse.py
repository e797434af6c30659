"""C5 (the fixes improve MSE 3–10×), from the T1 family; the sinks' value norms tested and measured."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from pcast.analysis.text import format_runs, intervals, short
from pcast.analysis.verdicts.common import (ARTIFACTS_CHOICE, Choice, Subcase, across_readings, choice, combine,
                                            result, subcase_verdict)

__all__ = ["claim_c5", "moderate_windows", "sink_value_norms", "norm_source", "BAND_RULES"]

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


def _c5_cell(g: pd.DataFrame, ds: list[float], band, far: float, name: str, grid, rule: str = "peak",
             fix: str = "") -> Subcase:
    """One (reading, sink_v_scale, fix): the peak of the median paired ratio over the reading's Δ (``rule``
    "peak"), or any Δ of the reading whose CI meets the band ("passes through"), against the band. Its params:
    the ``fix`` and ``peak``, the peak in words (or why there is none)."""
    lo, hi = band
    w = g[g["delta"].isin(ds)].sort_values("delta")
    if w.empty:
        return Subcase(name, "INCONCLUSIVE", "no Δ in this reading", {"fix": fix, "peak": "no Δ in this reading"})
    i = int(np.nanargmax(w["median_ratio"].to_numpy(float)))
    peak, at = float(w["median_ratio"].iloc[i]), float(w["delta"].iloc[i])
    ci_lo, ci_hi = float(w["ci_low"].iloc[i]), float(w["ci_high"].iloc[i])
    regime, v = _band_regime(peak, ci_lo, ci_hi, lo, hi, far)
    inband = w.loc[(w["ci_high"] >= lo) & (w["ci_low"] <= hi), "delta"]
    if rule == "passes through" and len(inband):
        v = "PASS"
    words = f"peak {short(peak, 3)}× [{short(ci_lo, 3)}, {short(ci_hi, 3)}] at Δ={short(at, 3)}"
    return Subcase(name, v, f"{words} → {regime}; in [{lo:g}, {hi:g}] at {format_runs(intervals(inband, grid))}",
                   {"fix": fix, "peak": words})


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
            these = [_c5_cell(g, ds, band, far, f"{tag}, {fix}", grid, rule, fix) for fix, g in gs.groupby("b", sort=True)]
            cells += these
            readings.append(Subcase(tag, combine(these),
                                    f"{sum(c.verdict == 'PASS' for c in these)} of {len(these)} fixes in band: "
                                    + "; ".join(f"{c.params['fix']} {c.params['peak']}" for c in these)))
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
    robust = _c5_robustness(p, cfg, windows, baseline_fraction, band, far, sink_norms)
    details = [f"{nums['in_band']} of {len(cells)} cells (reading x fix) in band; the readings' verdicts and each "
               "cell are listed above", open_parameters(p)]
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


def norm_source(norms: pd.DataFrame | None, grid=()) -> str:
    """Where the tested sink-value norms come from: the generator's range, and the real model's measurement (with
    the ``grid`` values that lie within the measured range)."""
    text = "the generator's range: 0 (learned sinks that carry no value) to 1 (unit-norm values)"
    if norms is not None and len(norms):
        v = norms["sink_v_norm"]
        inside = [g for g in grid if v.min() <= g <= v.max()]
        text += (f"; measured in the real model's {len(v)} clean-sink heads: {short(v.min(), 2)}–{short(v.max(), 2)}"
                 f" (median {short(v.median(), 2)}) × the other keys' value norm"
                 + ((f"; the grid's {', '.join(f'{g:g}' for g in inside)} within it" if inside else
                     "; no grid value within it (add one to experiments.collapse.sink_v_scale)") if len(grid) else ""))
    return text


def _c5_robustness(p: pd.DataFrame, cfg: Mapping, windows, baseline_fraction, band, far: float,
                   sink_norms: pd.DataFrame | None) -> list[Choice]:
    """C5's choices, each recomputed from ``p``: the band rule, far_above, the windows, each norm alone."""
    def verdict(**kw) -> str:
        args = {"windows": windows, "baseline_fraction": baseline_fraction, "band": band, "far": far, **kw}
        return across_readings(_c5_judge(p, **args)[0])

    robust = [Choice("how a fix meets the band", "peak", f"{ARTIFACTS_CHOICE}: \"show 3–10× improvement\" read as "
                     "the improvement at its largest over the moderate Δ (the paper does not say which Δ)",
                     {"passes through (any Δ of the window)": verdict(rule="passes through")})]
    alt = cfg.get("alternatives") or {}
    robust.append(choice("'far above' the band", "claims.C5.far_above", far,
                         f"{ARTIFACTS_CHOICE}: a gain several times the band's top is no longer the claimed one",
                         lambda a: verdict(far=float(a)), cfg, alt.get("far_above", [])))
    label = lambda ws: "; ".join(f"[{lo:g}, {hi:g}]" for lo, hi in ws)  # noqa: E731
    robust.append(choice("the windows of 'moderate'", "claims.C5.moderate", [list(w) for w in windows],
                         "the theory: the baseline's predicted underflow from the onset to Δc, and from Δc on (the "
                         f"window edges are {ARTIFACTS_CHOICE})",
                         lambda ws: verdict(windows=[tuple(w) for w in ws]), cfg,
                         [[list(w) for w in ws] for ws in alt.get("moderate", [])], label=label))
    if "sink_v_scale" in p.columns and p["sink_v_scale"].nunique() > 1:
        norms = sorted(float(v) for v in p["sink_v_scale"].unique())
        robust.append(Choice("the sinks' value norms tested (experiments.collapse.sink_v_scale)",
                             ", ".join(f"{v:g}" for v in norms), norm_source(sink_norms, norms),
                             {f"only {v:g}": verdict(norms=[v]) for v in norms}, key="experiments.collapse.sink_v_scale"))
    return robust


def open_parameters(p: pd.DataFrame) -> str:
    """Which values of the parameter the paper leaves open (the sinks' value norm) the data tests, and why."""
    norms = sorted(p["sink_v_scale"].unique()) if "sink_v_scale" in p.columns else []
    return ("open in the paper, the sinks' value norm: tested at sink_v_scale " + ", ".join(f"{v:g}" for v in norms)
            + " (0: sinks that carry no value, as learned sinks usually do; 1: the generator's unit-norm values; "
            "values between: small ones); each is a reading with its own verdict") if norms else \
        "the sinks' value norm is not a column of the data: one setting"
