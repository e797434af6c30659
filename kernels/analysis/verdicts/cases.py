"""The ``cases`` section of the verdict: the public reports of FP8-P failures, rebuilt (table T9).

Read from the T9 table (``figures/table_cases.csv``, written by :func:`pcast.probes.cases.write_t9`):
one row per number a report printed, with the decimals it printed, the instrument's value and the row's
status. Per row, a PASS is checked again here: the instrument's value must lie within half a unit of the
report's last printed digit, else the row counts as FAIL. A PARTIAL or INCONCLUSIVE row must carry its
reason (a row without one counts as FAIL).

A case's verdict is :func:`~pcast.analysis.verdicts.common.combine` over its rows, and the section's
verdict is ``combine`` over the cases: PASS only when every number that could be rebuilt reproduces,
FAIL when one does not and no reason is known, PARTIAL when some reproduce and some differ for a stated
reason (or rest on an assumed part of the fixture). An INCONCLUSIVE row (a report that gives too little
to rebuild its fixture: random data, unstated logits) is left out of the combination: it is not a
failure of the instrument, and the section lists it with its reason.
"""

from __future__ import annotations

import pandas as pd

from pcast.analysis.verdicts.common import Subcase, combine, result

__all__ = ["CASES_ID", "claim_cases", "row_status"]

CASES_ID = "cases"  # the id of the section in the claims registry
_COLUMNS = ("case", "number", "measured", "report", "printed", "instrument", "status", "reason")


def row_status(row) -> str:
    """A T9 row's status, checked: PASS only within half a unit of the printed digit; a PARTIAL or
    INCONCLUSIVE row without its reason is FAIL."""
    status, reason = str(row["status"]), str(row.get("reason", "") or "").strip()
    if status == "PASS":
        decimals = int(str(row["printed"]).split()[0])
        value, report = float(row["instrument"]), float(row["report"])
        return "PASS" if abs(value - report) <= 0.5 * 10.0 ** -decimals * (1 + 1e-9) else "FAIL"
    if status in ("PARTIAL", "INCONCLUSIVE"):
        return status if reason and reason != "nan" else "FAIL"
    return "FAIL"


def claim_cases(t9: pd.DataFrame | None) -> dict:
    """The cases section's verdict and numbers from the T9 table (module docstring)."""
    crit = ("per reported number: the instrument's value within half a unit of the report's last printed digit "
            "(PASS); PARTIAL with the reason it differs or what was assumed; INCONCLUSIVE (left out, listed) "
            "when the report gives too little to rebuild its fixture; a case combines its numbers and the section "
            "its cases by the strict rule")
    tols = ["half a unit of the last digit each report printed (its own precision)"]
    if t9 is None or t9.empty:
        return result(CASES_ID, "INCONCLUSIVE", crit, {}, ["no T9 rows"], tolerances=tols)
    missing = [c for c in _COLUMNS if c not in t9.columns]
    if missing:
        raise ValueError(f"the T9 table lacks columns {missing}; expected {list(_COLUMNS)}")
    t9 = t9.fillna("")
    statuses = [row_status(r) for _, r in t9.iterrows()]
    subcases, details = [], []
    for case, rows in t9.assign(checked=statuses).groupby("case", sort=False):
        verdict = combine(list(rows["checked"]))
        counts = rows["checked"].value_counts()
        subcases.append(Subcase(f"{case} ({rows['number'].iloc[0]})", verdict,
                                ", ".join(f"{int(counts[s])} {s}" for s in ("PASS", "PARTIAL", "FAIL", "INCONCLUSIVE")
                                          if s in counts)))
        for _, r in rows.iterrows():
            got = f"instrument {r['instrument']}" if str(r["instrument"]) else "not rebuilt"
            why = f": {r['reason']}" if str(r["reason"]) else ""
            details.append(f"{case}, {r['measured']}: report {r['report']}, {got} → {r['checked']}{why}")
    inconclusive = sum(s == "INCONCLUSIVE" for s in statuses)
    details.append(f"{inconclusive} of {len(statuses)} numbers are INCONCLUSIVE: their reports give too little to "
                   "rebuild the fixture; that is no failure of the instrument, and they are left out of the verdict")
    numbers = {f"n_{s.lower()}": sum(x == s for x in statuses) for s in ("PASS", "PARTIAL", "FAIL", "INCONCLUSIVE")}
    numbers["n_cases"] = len(subcases)
    return result(CASES_ID, combine(subcases), crit, numbers, details, scoped=subcases, tolerances=tols)
