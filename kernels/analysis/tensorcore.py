"""The tensorcore experiment's summary (rule ``tensorcore``): per tensor core, order, S and Δ, the MSE with the
tensor core's P·V arithmetic over the MSE with float32's (``ratio``), and the accumulation's own error (the
mean squared difference of the two outputs) over the P-cast error (``share``: the MSE of FP8 P with float32 V
and P·V against the float64 reference), each from seed means, and the largest per-seed ``share``."""

from __future__ import annotations

import pandas as pd

__all__ = ["tensorcore_summary", "SUMMARY_KEYS"]

SUMMARY_KEYS = ["pv_arith", "order", "scale", "combo", "delta"]


def tensorcore_summary(tidy: pd.DataFrame) -> pd.DataFrame:
    """One row per :data:`SUMMARY_KEYS` (module docstring); empty (with its columns) for an empty table."""
    cols = SUMMARY_KEYS + ["seeds", "mse", "mse_fp32", "mse_pcast", "acc_mse", "ratio", "share", "share_max",
                           "underflow_frac"]
    if tidy.empty:
        return pd.DataFrame(columns=cols)
    t = tidy.assign(share_seed=tidy["acc_mse"] / tidy["mse_pcast"])
    g = t.groupby(SUMMARY_KEYS, sort=True)
    out = g[["mse", "mse_fp32", "mse_pcast", "acc_mse", "underflow_frac"]].mean()
    out["seeds"] = g["seed"].nunique()
    out["share_max"] = g["share_seed"].max()
    out["ratio"] = out["mse"] / out["mse_fp32"]
    out["share"] = out["acc_mse"] / out["mse_pcast"]
    return out.reset_index()[cols]
