"""The ``deployed`` section of the verdict: deployed kernels' own code against their presets (table T10).

Read from T10 (``figures/table_deployed.csv``, written by :func:`pcast.pipeline.deployed.t10_rows`): one row
per adapter of :mod:`pcast.deployed`. A row is PASS when its fingerprint names its preset with no probe row
outside and no row of the real model's heads lies outside the tolerance between the kernel's output and its
preset's prediction; both are checked again here from the row's numbers. A FAIL row must say why. An
INCONCLUSIVE row (the wheels not fetched) carries the fetch command as its reason. The section is PASS when
every row is PASS, INCONCLUSIVE when any row is (with the reasons), else FAIL.
"""

from __future__ import annotations

import pandas as pd

from pcast.analysis.verdicts.common import Subcase, result

__all__ = ["DEPLOYED_ID", "claim_deployed", "row_status"]

DEPLOYED_ID = "deployed"
_COLUMNS = ("kernel", "release", "preset", "fingerprint", "probe_rows_outside", "real_rows_outside", "status",
            "reason")


def row_status(row) -> str:
    """A T10 row's status, checked from its numbers (module docstring)."""
    status, reason = str(row["status"]), str(row.get("reason", "") or "").strip()
    if status == "INCONCLUSIVE":
        return status if reason else "FAIL"
    if status != "PASS":
        return "FAIL"
    ok = (str(row["fingerprint"]) == str(row["preset"]) and int(float(row["probe_rows_outside"])) == 0
          and int(float(row["real_rows_outside"])) == 0)
    return "PASS" if ok else "FAIL"


def claim_deployed(t10: pd.DataFrame | None) -> dict:
    """The deployed section's verdict and numbers from T10 (module docstring)."""
    crit = ("per deployed kernel: its fingerprint on the small probe set names its preset (0 probe rows outside "
            "the tolerance) and its output on the real model's heads agrees with its preset's prediction (0 rows "
            "outside); PASS when every kernel does, INCONCLUSIVE with the reason when a kernel could not run")
    tols = ["the probes' tolerance per element (pcast.probes.TOLERANCE_NOTE), on the probes and the real heads"]
    if t10 is None or t10.empty:
        return result(DEPLOYED_ID, "INCONCLUSIVE", crit, {}, ["no T10 rows"], tolerances=tols)
    missing = [c for c in _COLUMNS if c not in t10.columns]
    if missing:
        raise ValueError(f"the T10 table lacks columns {missing}; expected {list(_COLUMNS)}")
    t10 = t10.fillna("")
    statuses = [row_status(r) for _, r in t10.iterrows()]
    subcases, details = [], []
    for (_, r), s in zip(t10.iterrows(), statuses):
        what = (f"fingerprint {r['fingerprint']}, {r['probe_rows_outside']} probe rows and {r['real_rows_outside']} "
                f"real-head rows outside" if s != "INCONCLUSIVE" else str(r["reason"]))
        subcases.append(Subcase(f"{r['kernel']} ({r['release']}) → {r['preset']}", s, what))
        if str(r["reason"]):
            details.append(f"{r['kernel']}: {r['reason']}")
    verdict = ("INCONCLUSIVE" if "INCONCLUSIVE" in statuses else
               "PASS" if all(s == "PASS" for s in statuses) else "FAIL")
    numbers = {f"n_{s.lower()}": sum(x == s for x in statuses) for s in ("PASS", "FAIL", "INCONCLUSIVE")}
    numbers["n_kernels"] = len(statuses)
    return result(DEPLOYED_ID, verdict, crit, numbers, details, scoped=subcases, tolerances=tols)
