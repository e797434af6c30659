"""The decode section of the verdict: split-KV and partition-normalised P on decode rows, from the decode
statistics (``results/stats/decode.csv`` and ``decode_partition.csv``).

Sub-cases, each judged here and combined by the strict rule (:func:`pcast.analysis.verdicts.common.combine`):

* every configuration (sink kind x num_splits x split_layout x order x p_normalize x S): PASS when the measured
  and predicted underflow curves have the same status against the crossing level (both cross, both never
  reach it on the Δ grid, or both start at or above it) and, where both cross, ``|Δc measured − Δc predicted|
  <= claims.decode.dc_tolerance`` (in Δ units); FAIL otherwise;
* every (n, S) of the P-cast error rows: PASS when the pooled relative RMS error is within
  ``claims.decode.rms_tolerance`` (a fraction) of :func:`pcast.theory.decode.partition_rms_error`; FAIL
  otherwise.

Both tolerances are the acceptance criterion of the decode experiment (docs/decode.md), set in config.yaml's
``claims.decode``; the bootstrap CIs are reported beside them, not added to them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from pcast.analysis.policies import require
from pcast.analysis.text import short
from pcast.analysis.verdicts.common import Subcase, combine, result

__all__ = ["DECODE", "DECODE_KEYS", "claim_decode"]

DECODE = "decode"
DECODE_KEYS = ("dc_tolerance", "rms_tolerance")


def _label(r) -> str:
    layout = "" if int(r["num_splits"]) == 1 else f" {r['split_layout']}"
    who = "" if str(r.get("policy", "-")) == "-" else f"{r['policy']}: "
    return (f"{who}{r['kind']} {int(r['num_splits'])} split{'s' if int(r['num_splits']) > 1 else ''}{layout} "
            f"{r['order']} {r['p_normalize']} S={float(r['scale']):g}")


def _crossing_cell(r, tol: float) -> tuple[str, str]:
    meas, pred = str(r["status_meas"]), str(r["status_pred"])
    if meas != pred:
        return "FAIL", f"measured {meas}, theory {pred}"
    if meas != "cross":
        return "PASS", f"both {meas}"
    miss = float(r["dc_miss"])
    ok = abs(miss) <= tol
    return ("PASS" if ok else "FAIL"), (f"Δc {short(r['dc_meas'], 4)} [{short(r['dc_lo'], 4)}, {short(r['dc_hi'], 4)}] "
                                        f"vs {short(r['dc_pred'], 4)}: |miss| {abs(miss):.3f} "
                                        f"{'≤' if ok else '>'} {tol:g}")


def claim_decode(crossings: pd.DataFrame | None, partition: pd.DataFrame | None, cfg: Mapping) -> dict:
    """The decode section's verdict and numbers (module docstring)."""
    require(cfg, f"claims.{DECODE}", DECODE_KEYS)
    tol, rtol = float(cfg["dc_tolerance"]), float(cfg["rms_tolerance"])
    crit = (f"every configuration: measured and predicted underflow curves cross the level alike, Δc within ±{tol:g} "
            f"where both cross; every partition size and S: relative RMS error of the cast within {rtol:.0%} of "
            "its closed form")
    tols = [f"Δc: ±{tol:g} in Δ units (claims.decode.dc_tolerance in config.yaml, the decode experiment's "
            "acceptance criterion); the bootstrap CI of each measured Δc is reported beside it",
            f"partition RMS error: ±{rtol:.0%} of pcast.theory.decode.partition_rms_error "
            "(claims.decode.rms_tolerance, the same criterion)"]
    if crossings is None or crossings.empty:
        return result(DECODE, "INCONCLUSIVE", crit, {}, ["no decode data"], tolerances=tols)
    subs, details, nums = [], [], {}
    for _, r in crossings.iterrows():
        cell, how = _crossing_cell(r, tol)
        subs.append(Subcase(_label(r), cell, how))
        nums[f"dc_meas[{_label(r)}]"] = r["dc_meas"]
        nums[f"dc_pred[{_label(r)}]"] = r["dc_pred"]
        details.append(f"{_label(r)}: {how}; largest |measured − theory| underflow fraction over Δ "
                       f"{float(r['uf_max_err']):.3f} → {cell}")
    for _, r in (partition if partition is not None else pd.DataFrame()).iterrows():
        diff = float(r["rel_diff"])
        ok = bool(np.isfinite(diff) and abs(diff) <= rtol)
        name = f"partition-normalised P, n = {int(r['n'])}, S = {float(r['scale']):g}"
        how = (f"relative RMS error {float(r['rel_rms']):.4f} [{short(r['rel_rms_lo'], 4)}, "
               f"{short(r['rel_rms_hi'], 4)}] vs closed form {float(r['theory']):.4f} ({diff:+.1%})")
        subs.append(Subcase(name, "PASS" if ok else "FAIL", how))
        nums[f"rel_rms[{int(r['n'])}, S={float(r['scale']):g}]"] = r["rel_rms"]
        details.append(f"{name}: {how} → {'PASS' if ok else 'FAIL'}")
    cells = [s.verdict for s in subs]
    nums["agree"], nums["disagree"] = cells.count("PASS"), cells.count("FAIL")
    fails = [s for s in subs if s.verdict == "FAIL"]
    return result(DECODE, combine(subs), crit, nums, details, tolerances=tols, scoped=fails)
