"""The tensorcore section of figures/claims.md: does an FP8 tensor core's accumulation add to the cast error?"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from pcast.analysis.text import short
from pcast.analysis.verdicts.common import Subcase, combine, result

__all__ = ["TENSORCORE", "claim_tensorcore"]

TENSORCORE = "tensorcore"


def _check_line(arith: str, c: Mapping) -> str:
    return (f"{arith}: the emulator's arithmetic equals mmasim's instruction in {c['elements'] - c['mismatched']} of "
            f"{c['elements']} elements of {c['tiles']} random E4M3 tiles ({c['truncated']} of them differ from "
            "float32's A·B + C: sums that hit the truncation)")


def claim_tensorcore(summary: pd.DataFrame, check: Mapping, cfg: Mapping) -> dict:
    """PASS per tensor core when mmasim agrees bit for bit on every checked element and the accumulation's own
    error stays at most ``cfg["max_share"]`` of the P-cast error at every order, S, Δ and seed; strict
    combine over the tensor cores. Without mmasim: INCONCLUSIVE, saying so."""
    lim = float(cfg["max_share"])
    crit = ("per tensor core: the emulator's P·V arithmetic equals mmasim's bit for bit on every checked tile "
            "element, and at every order, S, Δ and seed the accumulation's own error (mean squared difference from "
            f"float32 P·V) is at most {short(lim)} of the P-cast error (MSE of FP8 P, float32 V and P·V against "
            "float64)")
    if "skipped" in check:
        return result(TENSORCORE, "INCONCLUSIVE", crit, {}, [f"skipped: {check['skipped']}"])
    subcases, details, table = [], [], []
    for arith, c in sorted(check["mmasim"].items()):
        details.append(_check_line(arith, c))
        s = summary[summary["pv_arith"] == arith]
        worst = float(s["share_max"].max()) if len(s) else float("nan")
        ok = c["mismatched"] == 0 and len(s) > 0 and worst <= lim
        subcases.append(Subcase(arith, "PASS" if ok else "FAIL", f"largest share {short(worst)}"))
        for (combo, scale, order), g in s.groupby(["combo", "scale", "order"], sort=True):
            table.append({"tensor core": arith, "combination": combo,
                          "MSE ratio (tensor core / float32)": f"{g['ratio'].min():.6f}–{g['ratio'].max():.6f}",
                          "accumulation / P-cast error (largest)": short(g["share_max"].max())})
    verdict = combine(subcases)
    out = result(TENSORCORE, verdict, crit, {"max_share": lim}, details, scoped=subcases,
                 tolerances=[f"max_share = {short(lim)} (claims.tensorcore.max_share): the accumulation must stay two "
                             "orders of magnitude below the P-cast error; mmasim agreement: none (bit for bit)"])
    out["table"] = table
    return out
