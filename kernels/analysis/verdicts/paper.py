"""The abstract's own numbers next to the artifact's: computed from the theory and the measurements.

The only numbers written in are the paper's, in ``claims.paper`` of config.yaml. A number agrees
when the artifact's value rounds to it at the precision the abstract prints it with (half a unit
of its last digit: 6.93 ± 0.005, ≈ 1 ± 0.5) and, where measured, the measurement's widened
bootstrap CI reaches that interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from pcast import theory
from pcast.analysis.registry import PAPER
from pcast.analysis.text import short
from pcast.analysis.verdicts.common import Subcase, combine, family_z, result

__all__ = ["claim_paper", "printed_precision"]


def printed_precision(x: float) -> float:
    """Half a unit of the last digit ``x`` is printed with (6.93 -> 0.005, 1.0 -> 0.5, 0.0625 -> 0.00005)."""
    text = repr(float(x)).rstrip("0").rstrip(".")
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10.0 ** -decimals


def _measured_constant(thr: pd.DataFrame, k: int | None, level: float) -> tuple[float, float, float]:
    """From the threshold rows (of ksink ``k``; every row when None): log_threshold − δk estimated as
    Δc_meas − ln S + δk (k given) or the δk estimated as 6.93... − Δc_meas + ln S; (est, lo, hi) pooled."""
    rows = thr.dropna(subset=["dc_meas"])
    if k is not None:
        rows = rows[rows["ksink"] == k]
    if rows.empty:
        return math.nan, math.nan, math.nan
    off = rows["dc_meas"] - np.log(rows["scale"].astype(float))
    half = (rows["dc_hi"] - rows["dc_lo"]) / 2 * family_z(level, len(thr)) / family_z(level, 1)
    w = 1.0 / np.maximum(half, 1e-12) ** 2
    est = float((off * w).sum() / w.sum())
    se = float(1.0 / np.sqrt(w.sum()))
    return est, est - se, est + se


def _row(name: str, paper, theory_v: float, measured: tuple | None, tol: float) -> tuple[Subcase, dict]:
    ok = abs(theory_v - float(paper)) <= tol
    meas_txt = "—"
    if measured is not None and np.isfinite(measured[0]):
        est, lo, hi = measured
        ok = ok and (lo - tol <= float(paper) <= hi + tol)
        meas_txt = f"{short(est, 4)} [{short(lo, 4)}, {short(hi, 4)}]"
    line = {"number": name, "paper": f"{paper:g}", "artifact (theory)": short(theory_v, 5),
            "artifact (measured)": meas_txt, "agrees": ("yes" if ok else "NO") + f" (±{tol:g})"}
    return Subcase(name, "PASS" if ok else "FAIL", f"paper {paper:g}, theory {short(theory_v, 5)}, "
                   f"measured {meas_txt}, printed precision ±{tol:g}"), line


def _band_row(c5: Mapping, band) -> tuple[Subcase, dict]:
    """The 3–10× row is C5's result: the same windows, CIs, readings and verdict."""
    lo, hi = (float(v) for v in band)
    holding = [r["reading"] for r in c5.get("readings", []) if r["verdict"] in ("PASS", "PARTIAL")]
    n = len(c5.get("readings", []))
    text = (f"C5: {c5['verdict']}; holds under {len(holding)} of {n} readings"
            + (f" ({'; '.join(holding)})" if holding else ""))
    v = c5["verdict"]
    agrees = {"PASS": "yes", "PARTIAL": "partly", "FAIL": "NO", "INCONCLUSIVE": "untested"}[v]
    line = {"number": f"{lo:g}–{hi:g}× (C5)", "paper": f"{lo:g}–{hi:g}×", "artifact (theory)": "—",
            "artifact (measured)": text, "agrees": f"{agrees} (C5's verdict: {v})"}
    return Subcase(f"{lo:g}–{hi:g}× improvement", v, text), line


def claim_paper(cfg: Mapping, thresholds: pd.DataFrame, c5: Mapping, *, fmt: str = "e4m3fn",
                level: float = 0.95) -> dict:
    """Every number of the abstract next to the artifact's (module docstring for the agreement rule); the
    3–10× row is ``c5``, C5's result, so the band has one answer."""
    const, (k, dk), dp_p, s2 = (float(cfg["threshold_constant"]), cfg["delta_k"], float(cfg["dp"]),
                                float(cfg["compare_scale"]))
    k = int(k)
    lt = theory.log_threshold(fmt)
    c_meas = _measured_constant(thresholds, 1, level)
    o = _measured_constant(thresholds, k, level)
    dk_meas = (lt - o[0], lt - o[2], lt - o[1]) if np.isfinite(o[0]) else None
    rows = [_row(f"{const:g} (the threshold constant; Δc at ksink=1 − ln S)", const, lt, c_meas,
                 printed_precision(const)),
            _row(f"δk ≈ {dk:g} at ksink = {k} (measured: 6.931 + ln S − Δc)", dk, theory.delta_k(k), dk_meas,
                 printed_precision(dk)),
            _band_row(c5, cfg["band"]),
            _row("dp(256) = 2^-4", dp_p, float(theory.dp(256.0, fmt)), None, 0.0)]
    gain = float(theory.coverage(s2, fmt) - theory.coverage(256.0, fmt))
    rows.append((Subcase(f"{s2:g} covers slightly more", "PASS" if gain > 0 else "FAIL",
                         f"+{short(gain, 3)} octaves"),
                 {"number": f"{s2:g}: slightly higher coverage", "paper": "slightly higher",
                  "artifact (theory)": f"+{short(gain, 3)} octaves ({short(theory.coverage(s2, fmt), 4)} vs "
                                       f"{short(theory.coverage(256.0, fmt), 4)})",
                  "artifact (measured)": "—", "agrees": "yes" if gain > 0 else "NO"}))
    subs = [s for s, _ in rows]
    crit = ("each number of the abstract against the artifact's at the precision the abstract prints it with; "
            "a measured value's widened bootstrap CI must reach it")
    tols = ["printed precision: half a unit of the abstract's last digit (6.93: ±0.005; ≈ 1: ±0.5; 2^-4: exact)",
            f"measured: inverse-variance pool over S of the crossings' CIs (level {level:g}, widened over the rows)"]
    out = result(PAPER, combine(subs), crit, {}, [f"{s.name}: {s.domain}" for s in subs], scoped=subs,
                 tolerances=tols)
    out["table"] = [line for _, line in rows]
    words = {"PASS": "agree", "PARTIAL": "agree in part", "FAIL": "disagree", "INCONCLUSIVE": "untested"}
    by = {v: [s.name for s in subs if s.verdict == v] for v in words}
    out["headline"] = "; ".join(f"{words[v]}: {', '.join(names)}" for v, names in by.items() if names)
    return out
