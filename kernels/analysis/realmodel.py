"""The realmodel experiment's summaries: per head, per run, and the model's outputs.

* :func:`head_summary`: one row per (layer, head, run) from ``results/realmodel/heads/layer*.csv``:
  means over passages (paired: every run saw the same passages), the head's sinks, Δ, σ, the
  prediction, the key-shuffled control's fraction beside each combination, and per head the MSE
  ratio forward S=1 / reverse S=256 (ratio of the passage means; its min and max over passages), and the
  Gaussian theory's prediction from the head's median Δ, σ over passages and its sinks;
* :func:`output_summary`: one row per run from ``outputs.csv`` and ``pairs.csv``: embedding cosine
  to the exact model (mean, min), the largest change of a pair's similarity, the pairs whose rank
  moved, and Kendall's tau between exact and run similarities (scipy.stats).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import kendalltau

from pcast.contract import combo_label

__all__ = ["BASELINE", "FIXED", "head_summary", "head_ratios", "output_summary", "theory_errors"]

BASELINE = combo_label("forward", 1.0)  # the paper's baseline: forward order, S = 1
FIXED = combo_label("reverse", 256.0)  # both fixes
SHUFFLED = "shuffled "


def _mode(s: pd.Series):
    v = s.fillna("").astype(str).value_counts()
    return v.index[0] if len(v) else ""


def head_ratios(heads: pd.DataFrame) -> pd.DataFrame:
    """Per (layer, head): the MSE ratio forward S=1 / reverse S=256, of passage means and per passage."""
    key = ["layer", "head", "passage"]
    a = heads[heads["run"] == BASELINE].set_index(key)["mse"]
    b = heads[heads["run"] == FIXED].set_index(key)["mse"]
    per = (a / b).rename("r").reset_index()
    means = heads[heads["run"].isin([BASELINE, FIXED])].groupby(["layer", "head", "run"])["mse"].mean().unstack()
    out = (means[BASELINE] / means[FIXED]).rename("ratio").reset_index()
    g = per.groupby(["layer", "head"])["r"]
    out["ratio_min"] = g.min().values
    out["ratio_max"] = g.max().values
    return out


def _predict(r) -> float:
    """The Gaussian theory's prediction for one (layer, head, combination) row: median Δ and σ over passages,
    the median count of detected sinks (:func:`pcast.models.heads.predict_underflow`); NaN for policies."""
    from pcast.models.heads import predict_underflow  # lazy: torch-free at import

    if r.kind != "combo":
        return float("nan")
    st = {"delta": r.delta, "sigma": r.sigma}
    return predict_underflow(st, int(round(r.n_sinks)), order=r.order, scale=float(r.scale), n=int(r.n),
                             block_n=int(r.block_n), fmt=r.fmt)


def head_summary(heads: pd.DataFrame) -> pd.DataFrame:
    """One row per (layer, head, run) of the measured (not shuffled) runs; see the module doc."""
    meas = heads[heads["kind"] != "shuffled"]
    g = meas.groupby(["layer", "head", "run"], sort=True)
    out = g.agg(kind=("kind", "first"), order=("order", "first"), scale=("scale", "first"),
                fmt=("fmt", "first"), block_n=("block_n", "first"), backend=("backend", "first"),
                passages=("passage", "nunique"), mse=("mse", "mean"), rel_mse=("rel_mse", "mean"),
                underflow_frac=("underflow_frac", "mean"), mass_underflow=("mass_underflow", "mean"),
                saturated=("saturated", "sum"), n=("n", "first"),
                delta=("delta", "median"), sigma=("sigma", "median"), cls_mass=("cls_mass", "mean"),
                n_sinks=("n_sinks", "median"), sinks=("sinks", _mode), sink_type=("sink_type", _mode)).reset_index()
    shuf = heads[heads["kind"] == "shuffled"].copy()
    shuf["run"] = shuf["run"].str.slice(len(SHUFFLED))
    sh = shuf.groupby(["layer", "head", "run"])["underflow_frac"].mean().rename("shuffled_frac").reset_index()
    out = out.merge(sh, on=["layer", "head", "run"], how="left")
    out = out.merge(head_ratios(heads), on=["layer", "head"], how="left")
    out["pred_gauss"] = [_predict(r) for r in out.itertuples()]
    out["pred_error"] = out["pred_gauss"] - out["underflow_frac"]
    out["positional"] = out["underflow_frac"] - out["shuffled_frac"]  # measured - shuffled: order of the keys
    out["tail"] = out["pred_gauss"] - out["shuffled_frac"]  # Gaussian - exchangeable own scores: tail shape
    return out.sort_values(["layer", "head", "run"], kind="stable").reset_index(drop=True)


def theory_errors(summary: pd.DataFrame, runs=(BASELINE, combo_label("forward", 256.0))) -> pd.DataFrame:
    """``|prediction - measurement|`` of the combinations ``runs``, per sink type: mean, max, heads."""
    s = summary[summary["run"].isin(runs)].copy()
    s["abs_error"] = s["pred_error"].abs()
    g = s.groupby("sink_type")["abs_error"]
    return pd.DataFrame({"mean": g.mean(), "median": g.median(), "max": g.max(), "rows": g.size()}).reset_index()


def output_summary(outputs: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """One row per run (config order kept): cosines, similarity changes, rank moves, Kendall's tau."""
    if outputs.empty:
        return pd.DataFrame(columns=["run", "kind", "cos_mean", "cos_min", "one_minus_cos_max", "sim_change_max",
                                     "pairs", "pairs_moved", "kendall_tau"])
    rows = []
    for run in dict.fromkeys(outputs["run"]):
        o = outputs[outputs["run"] == run]
        p = pairs[pairs["run"] == run]
        tau = kendalltau(p["sim_exact"], p["sim_run"]).statistic if len(p) > 1 else np.nan
        rows.append({"run": run, "kind": o["kind"].iloc[0], "cos_mean": o["cosine"].mean(),
                     "cos_min": o["cosine"].min(), "one_minus_cos_max": o["one_minus_cos"].max(),
                     "sim_change_max": p["sim_change"].abs().max() if len(p) else np.nan, "pairs": len(p),
                     "pairs_moved": int(p["rank_moved"].astype(bool).sum()), "kendall_tau": tau})
    return pd.DataFrame(rows)
