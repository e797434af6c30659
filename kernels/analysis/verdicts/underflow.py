"""C1 (the underflow law of forward order) and C2 (reverse order removes the collapse)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from kernels.analysis.text import short
from kernels.analysis.verdicts.common import result

__all__ = ["claim_c1", "claim_c2"]


def claim_c1(collapse: pd.DataFrame, cfg: Mapping) -> dict:
    """Measured pooled underflow fraction against the exact and the leading-order prediction.

    Criterion (cfg): max ``|measured − exact|`` <= ``max_abs_error`` over every Δ (and sink_v_scale)
    of ``combos``. PASS also needs the leading-order Φ law within ``leading_max_abs_error``;
    when only the exact model is within tolerance the verdict is PARTIAL (the law's form holds,
    its leading-order constant does not).
    """
    combos = list(cfg["combos"])
    tol = float(cfg["max_abs_error"])
    tol_lead = float(cfg["leading_max_abs_error"])
    d = collapse[collapse["combo"].isin(combos)].dropna(subset=["pred_exact"])
    crit = (f"max over Δ and {', '.join(combos)} of |measured − exact prediction| ≤ {tol}; "
            f"PASS also needs the leading-order Φ law within {tol_lead}")
    if d.empty:
        return result("C1", "INCONCLUSIVE", crit, {}, ["no rows with a prediction"])
    err_x = (d["underflow_frac_mean"] - d["pred_exact"]).abs()
    err_l = (d["underflow_frac_mean"] - d["pred_leading"]).abs()
    ix, il = err_x.idxmax(), err_l.idxmax()
    nums = {"max_abs_error_exact": err_x.max(), "at_delta_exact": d.at[ix, "delta"],
            "combo_exact": d.at[ix, "combo"], "max_abs_error_leading": err_l.max(),
            "at_delta_leading": d.at[il, "delta"], "combo_leading": d.at[il, "combo"],
            "points": int(len(d)), "points_over_tolerance": int((err_x > tol).sum()),
            "tolerance": tol, "leading_tolerance": tol_lead}
    if err_x.max() > tol:
        verdict = "FAIL"
    elif err_l.max() > tol_lead:
        verdict = "PARTIAL"
    else:
        verdict = "PASS"
    details = [f"exact model: max error {short(err_x.max())} at Δ={short(nums['at_delta_exact'], 3)} "
               f"({nums['combo_exact']}), {nums['points_over_tolerance']} of {len(d)} points over {tol}",
               f"leading-order Φ(Δ + δk − 6.93 − ln S): max error {short(err_l.max())} at "
               f"Δ={short(nums['at_delta_leading'], 3)} ({nums['combo_leading']})"]
    for combo in combos:
        dc = d[d["combo"] == combo]
        if len(dc):
            ex = (dc["underflow_frac_mean"] - dc["pred_exact"]).abs().max()
            lead = (dc["underflow_frac_mean"] - dc["pred_leading"]).abs().max()
            details.append(f"{combo}: max |meas − exact| = {short(ex)}, max |meas − Φ law| = {short(lead)}")
    return result("C1", verdict, crit, nums, details)


_C2_CONDITIONS = (
    "conditions of the guarantee: all sinks in the KV block visited last (block 0, "
    "k ≤ block_n), non-causal rows (every row sees the sinks), scores as modelled "
    "(non-sink N(0, σ²), sinks Δ + N(0, σ²)), and Δ small enough that the sink block's "
    "own non-sink keys stay above the FP8 threshold (Δ + σδk well below 6.93 + ln S)")


def _zero_region(z: pd.DataFrame, zc: str, max_exp: float) -> tuple[dict, list[str], int]:
    """Where ``zc`` (reverse S=256) must measure zero underflow, and where it stops doing so:
    the numbers, the detail lines and how many rows lie in the guarantee region."""
    region = z[z["pred_expected_count"] <= max_exp]
    grid = sorted(z["delta"].unique())
    by_delta = z.groupby("delta")["underflow"].sum()
    nonzero = by_delta[by_delta > 0]
    first_nonzero = float(nonzero.index.min()) if len(nonzero) else math.nan
    zero_upto = max([x for x in grid if x < first_nonzero] or [math.nan]) if len(nonzero) else max(grid)
    row0 = z.iloc[0]
    share = (min(int(row0["block_n"]), int(row0["n"])) - int(row0["ksink"])) / (int(row0["n"]) - int(row0["ksink"]))
    nums = {"guarantee_delta_max": region["delta"].max() if len(region) else math.nan,
            "violations_in_region": int((region["underflow"] > 0).sum()),
            "measured_zero_up_to_delta": zero_upto, "first_nonzero_delta": first_nonzero,
            "sink_block_share": share,
            "max_fraction_" + zc: z["underflow_frac_mean"].max(),
            "max_expected_count": max_exp}
    details = []
    if len(region):
        details.append(f"theory (exact model) expects ≤ {max_exp} underflow events in the sample for "
                       f"Δ ≤ {short(nums['guarantee_delta_max'], 3)}; measured count there: "
                       f"{int(region['underflow'].sum())} ({nums['violations_in_region']} rows non-zero)")
    else:
        details.append("the grid has no Δ where the theory expects (almost) no underflow")
    if len(nonzero):
        at = z[z["delta"] == first_nonzero]
        details.append(f"where it stops holding: first non-zero underflow at Δ={short(first_nonzero, 3)} "
                       f"({int(at['underflow'].sum())} events, exact model expects "
                       f"{short(at['pred_expected_count'].sum())}); these are the sink block's own "
                       f"{int(row0['block_n']) - int(row0['ksink'])} non-sink keys, met after the sinks raised the max; "
                       f"the fraction rises to {short(z['underflow_frac_mean'].max())} "
                       f"(limit: the sink block's share {short(share)})")
    else:
        details.append(f"measured zero underflow at every Δ up to {short(max(grid), 3)}")
    return nums, details, len(region)


def _reverse_residual(collapse: pd.DataFrame, cfg: Mapping, nums: dict) -> tuple[bool, list[str]]:
    """``reverse_combo``'s fraction against the sink block's share (adds to ``nums``)."""
    rc, rtol = cfg["reverse_combo"], float(cfg["residual_tolerance"])
    r = collapse[collapse["combo"] == rc].dropna(subset=["pred_exact"])
    if not len(r):
        return True, []
    rmax = r["underflow_frac_mean"].max()
    rshare = ((r["block_n"].clip(upper=r["n"]) - r["ksink"]) / (r["n"] - r["ksink"])).max()
    ok_r = bool(rmax <= rshare + rtol)
    nums.update({"max_fraction_" + rc: rmax, "reverse_bound": rshare + rtol})
    f1 = collapse[collapse["combo"] == cfg.get("forward_combo", "forward S=1")]
    if len(f1):
        nums["max_fraction_forward"] = f1["underflow_frac_mean"].max()
    return ok_r, [f"{rc}: max measured fraction {short(rmax)} ≤ sink-block share {short(rshare)} + {rtol}: "
                  f"{'yes' if ok_r else 'NO'}" + (f" (forward S=1 reaches {short(nums['max_fraction_forward'])})"
                                                  if "max_fraction_forward" in nums else "")]


def claim_c2(collapse: pd.DataFrame, cfg: Mapping) -> dict:
    """Zero underflow for reverse S=256 where the theory's sink-block residual vanishes; reverse
    S=1 bounded by the sink block's share.

    Guarantee region (cfg ``max_expected_count``): the Δ where the exact model expects at most
    that many underflow events in the whole measured sample (fraction x terms). There the
    measured count must be exactly 0. Reverse order's residual can never exceed the share of
    non-sink keys in the sink block, ``(block_n − k)/(n − k)``; the measured fraction of
    ``cfg['reverse_combo']`` must stay below it plus ``residual_tolerance``.
    """
    zc, rc = cfg["zero_combo"], cfg["reverse_combo"]
    max_exp = float(cfg["max_expected_count"])
    rtol = float(cfg["residual_tolerance"])
    crit = (f"{zc}: measured underflow count = 0 at every Δ where the exact model expects ≤ "
            f"{max_exp} events in the sample; {rc}: measured fraction ≤ (block_n − k)/(n − k) + {rtol}")
    z = collapse[collapse["combo"] == zc].dropna(subset=["pred_expected_count"]).sort_values("delta")
    if z.empty:
        return result("C2", "INCONCLUSIVE", crit, {}, [f"no {zc} rows with a prediction"])
    nums, details, region_rows = _zero_region(z, zc, max_exp)
    ok_r, more = _reverse_residual(collapse, cfg, nums)
    details += more + [_C2_CONDITIONS]
    if not region_rows:
        verdict = "INCONCLUSIVE"
    elif nums["violations_in_region"] > 0:
        verdict = "FAIL"
    elif not ok_r:
        verdict = "PARTIAL"
    else:
        verdict = "PASS"
    return result("C2", verdict, crit, nums, details)
