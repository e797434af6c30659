"""The real-model section: a pretrained model's heads against C5's band and the theory, and its outputs.

From the per-head summary (:func:`pcast.analysis.realmodel.head_summary`) and the per-run output
summary (:func:`pcast.analysis.realmodel.output_summary`), with ``claims.realmodel`` of config.yaml:

* ``band``: in what fraction of heads C5's improvement (MSE forward S=1 / reverse S=256) lies in it,
  above it, below it; the largest ratio and its head;
* ``combos`` and ``max_abs_error``: the Gaussian theory (measured Δ, σ, detected sinks) predicts a
  head's non-sink underflow when ``|predicted − measured|`` ≤ max_abs_error; told apart for clean-sink
  heads (one sink, key 0: the theory's own setting) and the rest, with the three reasons measured
  (positional structure: measured − key-shuffled; tail shape: predicted − key-shuffled; several sinks);
* how far the output moves: the embedding cosine of forward S=1 and reverse S=256 and of every policy.

The verdict is about the theory on the heads it is meant for: PASS when it predicts every
clean-sink head in every judged combination, FAIL when none, PARTIAL otherwise, INCONCLUSIVE with
no clean-sink head.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from pcast.analysis.realmodel import BASELINE, FIXED
from pcast.analysis.text import short
from pcast.analysis.verdicts.common import result

__all__ = ["REALMODEL", "REALMODEL_KEYS", "claim_realmodel"]

REALMODEL = "realmodel"
REALMODEL_KEYS = ("band", "combos", "max_abs_error", "worst_heads")


def _sinks(v) -> str:
    return "none" if v is None or (isinstance(v, float) and np.isnan(v)) or str(v) == "" else str(v)


def _frac(mask) -> str:
    mask = np.asarray(mask, dtype=bool)
    return f"{int(mask.sum())} of {mask.size} ({100 * mask.mean():.0f}%)" if mask.size else "0 of 0"


def _ratio_lines(per_head: pd.DataFrame, lo: float, hi: float) -> list[str]:
    r = per_head["ratio"].to_numpy(float)
    if not r.size:
        return []
    top = per_head.sort_values("ratio", ascending=False).iloc[0]
    types = per_head["sink_type"].value_counts()
    return [f"MSE {BASELINE} / {FIXED} per head: median {short(float(np.median(r)), 3)}×; in C5's {lo:g}–{hi:g}× "
            f"band in {_frac((r >= lo) & (r <= hi))} heads, above it in {_frac(r > hi)}, below {lo:g}× in "
            f"{_frac(r < lo)}; largest {short(float(r.max()), 3)}× at layer {int(top['layer'])}, head "
            f"{int(top['head'])} (sinks {_sinks(top['sinks'])}, P mass lost by {BASELINE}: "
            f"{100 * float(top['mass_underflow']):.2f}%).",
            "Detected sink types (pcast.models.heads.detect_sinks): "
            + ", ".join(f"{k} {int(v)}" for k, v in types.items()) + "."]


def _theory_lines(clean: pd.DataFrame, rest: pd.DataFrame, combos, tol: float) -> list[str]:
    lines = []
    for name, part in (("clean-sink heads (one sink, key 0)", clean), ("the other heads", rest)):
        if len(part):
            lines.append(f"Theory on {name}, {', '.join(combos)}: mean |predicted − measured| "
                         f"{short(part['abs_error'].mean(), 3)}, max {short(part['abs_error'].max(), 3)}; within "
                         f"{tol:g} in {_frac(part['abs_error'] <= tol)} head-combinations.")
    miss = pd.concat([clean, rest])
    miss = miss[miss["abs_error"] > tol]
    if len(miss):
        pos = (miss["positional"].abs() > tol).mean()
        tail = (miss["tail"].abs() > tol).mean()
        multi = (miss["sink_type"] == "multi").mean()
        lines.append(f"Where it misses (|error| > {tol:g}, {len(miss)} head-combinations): positional structure "
                     f"(measured − key-shuffled beyond {tol:g}) in {100 * pos:.0f}%, tail shape (predicted − "
                     f"key-shuffled beyond {tol:g}) in {100 * tail:.0f}%, several sink-like keys in "
                     f"{100 * multi:.0f}%.")
    return lines


def _output_lines(outputs: pd.DataFrame | None, numbers: dict) -> list[str]:
    if outputs is None or not len(outputs):
        return ["No model was run (experiments.realmodel.tensors is a user's file): no output effect."]
    o = outputs.set_index("run")
    lines = []
    for run in (BASELINE, FIXED):
        if run in o.index:
            numbers[f"cos_min {run}"] = float(o.loc[run, "cos_min"])
            lines.append(f"Embedding cosine to the exact model, {run}: mean {o.loc[run, 'cos_mean']:.6f}, min "
                         f"{o.loc[run, 'cos_min']:.6f}; pair similarities move by at most "
                         f"{short(o.loc[run, 'sim_change_max'], 3)}; {int(o.loc[run, 'pairs_moved'])} of "
                         f"{int(o.loc[run, 'pairs'])} pairs change rank (Kendall τ {short(o.loc[run, 'kendall_tau'], 4)}).")
    worst = o["cos_min"].idxmin()
    lines.append(f"Lowest cosine of any run: {worst} ({o.loc[worst, 'cos_min']:.6f}).")
    return lines


def claim_realmodel(heads: pd.DataFrame, outputs: pd.DataFrame | None, cfg: Mapping) -> dict:
    """The verdict dict of the real-model section; see the module doc."""
    lo, hi = (float(x) for x in cfg["band"])
    tol = float(cfg["max_abs_error"])
    combos = list(cfg["combos"])
    per_head = heads[heads["run"] == BASELINE]
    r = per_head["ratio"].to_numpy(float)
    judged = heads[heads["run"].isin(combos)].copy()
    judged["abs_error"] = judged["pred_error"].abs()
    clean = judged[judged["sink_type"] == "clean"]
    rest = judged[judged["sink_type"] != "clean"]
    ok = clean["abs_error"] <= tol
    nan = float("nan")
    numbers = {"heads": len(per_head), "band_lo": lo, "band_hi": hi,
               "frac_in_band": float(np.mean((r >= lo) & (r <= hi))) if r.size else nan,
               "frac_above_band": float(np.mean(r > hi)) if r.size else nan,
               "ratio_median": float(np.median(r)) if r.size else nan, "ratio_max": float(r.max()) if r.size else nan,
               "clean_rows": len(clean), "clean_predicted": int(ok.sum()),
               "clean_mean_abs_error": float(clean["abs_error"].mean()) if len(clean) else nan,
               "rest_mean_abs_error": float(rest["abs_error"].mean()) if len(rest) else nan, "max_abs_error": tol}
    details = _ratio_lines(per_head, lo, hi) + _theory_lines(clean, rest, combos, tol)
    details += _output_lines(outputs, numbers)
    verdict = ("INCONCLUSIVE" if not len(clean) else "PASS" if ok.all() else "FAIL" if not ok.any() else "PARTIAL")
    criterion = (f"the Gaussian theory (pcast.theory exact, the head's measured Δ, σ and sinks) predicts each "
                 f"clean-sink head's non-sink underflow in {', '.join(combos)} within {tol:g} (claims.realmodel); "
                 f"C5's band {lo:g}–{hi:g}× and the outputs are reported")
    return result(REALMODEL, verdict, criterion, numbers, details)
