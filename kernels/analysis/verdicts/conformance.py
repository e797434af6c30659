"""The supporting check: every Triton-kernel-vs-emulator difference explained, and the multi-call engine
equal to single calls bit for bit.

Three sub-cases, each a guarantee over its rows (one failing row FAILs it, and the strict
:func:`~pcast.analysis.verdicts.common.combine` FAILs the check): the kernel grid (the conformance
section's (order, S) at its shapes), the covering cases (the experiments' calls chosen so that every value of
every option they use meets the kernel once) and the engine rows (every call of the experiments through
:func:`pcast.attention_calls` at the sweeps' N against one :func:`pcast.attention` per item). Every row
counts (:func:`pcast.analysis.conformance_table.row_passes`). The Δ of the rows are placed against the
collapse's Δc (:func:`pcast.theory.critical_delta`, E4M3, the rows' ksink) for S = 1 and S = 256.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from pcast.analysis.conformance_table import coverage, prepared
from pcast.analysis.text import short
from pcast.analysis.verdicts.common import Subcase, combine, result, subcase_verdict
from pcast.theory import critical_delta

__all__ = ["conformance_check", "AT_DELTA_C"]

#: A Δ within this of Δc counts as "at" Δc (half the collapse experiment's Δ step of 0.5).
AT_DELTA_C = 0.25


def _place(delta: float, dc: float) -> str:
    return "at" if abs(delta - dc) <= AT_DELTA_C else ("below" if delta < dc else "above")


def _delta_line(deltas, ksink: int) -> str:
    """Each Δ against Δc for S = 1 and S = 256 (E4M3, ``ksink`` sink keys)."""
    dc1, dc256 = critical_delta(1.0, k=ksink), critical_delta(256.0, k=ksink)
    parts = [f"{short(d, 3)} ({_place(float(d), dc1)} / {_place(float(d), dc256)})" for d in deltas]
    return (f"Δ against Δc of E4M3 with ksink = {ksink} (S = 1: {dc1:.2f}; S = 256: {dc256:.2f}; 'at' within "
            f"{AT_DELTA_C:g}): " + ", ".join(parts))


def _options_line(opts: Mapping) -> str:
    return "; ".join(f"{k} {', '.join(short(v, 4) if isinstance(v, float) else str(v) for v in vals)}"
                     for k, vals in opts.items())


def _subcases(c: pd.DataFrame) -> list[Subcase]:
    grid_labels = {f"{o} S={float(s):g}" for o, s in zip(c["order"], c["scale"])}
    is_grid = (c["check"] != "engine") & c["case"].isin(grid_labels) if "case" in c else c["check"] != "engine"
    parts = [("kernel grid", c[is_grid]), ("kernel, covering cases", c[(c["check"] != "engine") & ~is_grid]),
             ("engine vs single calls", c[c["check"] == "engine"])]
    out = []
    for name, g in parts:
        if g.empty:
            continue
        n_max = int(g["n"].max())
        out.append(Subcase(name, subcase_verdict(g["passes"].tolist(), guarantee=True),
                           f"{int(g['passes'].sum())}/{len(g)} rows pass, N up to {n_max}, max |Δout| = "
                           f"{short(g['max_abs_diff'].max(), 2)}"))
    return out


def conformance_check(conf: pd.DataFrame, cfg: Mapping | None = None) -> dict:
    """Every row of the conformance table passes: kernel rows explained, engine rows identical bit for bit."""
    crit = ("every kernel row has every difference explained, every engine row is identical bit for bit "
            "(outputs, diagnostics, lse); every row counts")
    if conf is None or conf.empty:
        return result("conformance", "INCONCLUSIVE", crit, {}, ["no conformance data"])
    c = prepared(conf)
    if "case" not in c:
        c["case"] = [f"{o} S={float(s):g}" for o, s in zip(c["order"], c["scale"])]
    subs = _subcases(c)
    cov = coverage(conf)
    kern, eng = cov.get("kernel", {}), cov.get("engine", {})
    nums = {"rows": int(len(c)), "passing": int(c["passes"].sum()), "kernel_rows": kern.get("rows", 0),
            "engine_rows": eng.get("rows", 0), "engine_calls": eng.get("cases", 0),
            "engine_n": max(eng.get("n", [0])), "max_abs_diff": float(c["max_abs_diff"].max()),
            "engine_max_abs_diff": eng.get("max_abs_diff", float("nan")),
            "diag_equal": int(c["diag_equal_b"].sum()),
            "kernel_backends": "+".join(sorted(set(map(str, c[c["check"] != "engine"]["kernel_backend"])))) or "none"}
    details = [f"{nums['passing']}/{nums['rows']} rows pass: {nums['kernel_rows']} kernel rows (Triton kernel as "
               f"{nums['kernel_backends']} vs the emulator, N = {', '.join(map(str, kern.get('n', [])))}), "
               f"{nums['engine_rows']} engine rows ({nums['engine_calls']} calls of the experiments through "
               f"attention_calls vs a single call per item, N = {', '.join(map(str, eng.get('n', [])))}); "
               f"diagnostics identical in {nums['diag_equal']}/{nums['rows']}; max |Δout| = "
               f"{short(nums['max_abs_diff'])} (engine rows: {short(nums['engine_max_abs_diff'])})"]
    for check, part in (("engine", eng), ("kernel", kern)):
        if part:
            norms = ", ".join(short(v, 3) for v in part["sink_v_scale"])
            details.append(f"{check} rows: sink value norms {norms}; options: {_options_line(part['options'])}")
    if eng and eng["delta"] and "ksink" in c:
        ks = c.loc[(c["check"] == "engine") & (c["sink_kind"] == "keys"), "ksink"]
        if len(ks):
            details.append(_delta_line(eng["delta"], int(ks.max())))
    tol = ["kernel rows: the contract's explained differences (pcast.conformance.explain: outputs within the "
           "section's relative tol plus one grid step per fragile P element; counts only at fragile elements)",
           "engine rows: none (bit for bit, as docs/interfaces.md states for attention_calls)"]
    return result("conformance", combine(subs), crit, nums, details, scoped=subs, tolerances=tol)
