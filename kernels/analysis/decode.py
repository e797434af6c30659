"""The decode experiment's statistics (``results/stats/decode*.csv``) and its theory.

A configuration is (kind, policy, num_splits, split_layout, order, p_normalize, scale), a decode preset's
(``policy``) with its own block size, P format and sink mode; its unit of replication is one
decode row, (seed, head). Three tables:

* :func:`decode_curves`: per configuration and Δ, the mean non-sink underflow fraction over the rows with its
  Student-t CI, and the theory's (:func:`predicted_fraction`).
* :func:`decode_crossings`: per configuration, Δc where the mean curve first reaches ``crossing_level``,
  with a bootstrap CI over rows (:func:`pcast.analysis.summaries.crossing_ci`), the theory's Δc (the same
  crossing of the predicted curve on a 0.01 grid) and each side's status: ``cross``, ``never`` (below the
  level on the whole grid) or ``always`` (at or above it from the first Δ). ``dc_miss`` is the measured minus
  the predicted Δc where both cross; ``uf_max_err`` the largest ``|measured - theory|`` fraction over Δ.
* :func:`decode_partition`: per (n, S) of the P-cast error rows, the relative RMS error of the cast
  ``sqrt(Σ err² / Σ x²)`` pooled over seeds, its bootstrap CI over seeds, and
  :func:`pcast.theory.decode.partition_rms_error`.

Theory per configuration (:func:`predicted_fraction`): sink keys with online P,
:func:`pcast.theory.decode.split_underflow_fraction` (leading order); a seeding logit with online P,
:func:`~pcast.theory.decode.init_underflow_fraction` (a logit that joins the denominator after the casts,
``sink_mode="final"``, changes no cast: 0 to leading order); partition-normalised P,
:func:`~pcast.theory.decode.partition_underflow_fraction`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
from scipy import stats

from pcast.analysis.policies import seed_crossing, seed_mean_ci
from pcast.analysis.summaries import crossing_rows
from pcast.theory.decode import (init_underflow_fraction, partition_rms_error, partition_underflow_fraction,
                                   split_critical_delta, split_underflow_fraction)

__all__ = ["CONFIG_KEYS", "predicted_fraction", "decode_curves", "decode_crossings", "decode_partition",
           "status_of"]

CONFIG_KEYS = ["kind", "policy", "num_splits", "split_layout", "order", "p_normalize", "scale"]
_FIXED = ["n", "block_n", "ksink", "sigma", "fmt", "sink_mode"]


def predicted_fraction(cfg: Mapping, deltas) -> np.ndarray:
    """The theory's non-sink underflow fraction of one configuration (a tidy row's fields) at ``deltas``."""
    if str(cfg["fmt"]) == "none":
        return np.zeros(np.shape(deltas))
    kw = dict(num_splits=int(cfg["num_splits"]), layout=str(cfg["split_layout"]), n=int(cfg["n"]),
              block_n=int(cfg["block_n"]), sigma=float(cfg["sigma"]), fmt=str(cfg["fmt"]))
    d, S = np.asarray(deltas, dtype=float), float(cfg["scale"])
    final = cfg["kind"] == "logit" and cfg.get("sink_mode") == "final"  # the sink never meets a cast
    if cfg["p_normalize"] == "partition":
        sink = "keys" if cfg["kind"] == "keys" else ("none" if final else "logit")
        return np.asarray(partition_underflow_fraction(d, S, k=int(cfg["ksink"]) or 1, sink=sink, **kw))
    if cfg["kind"] == "keys":
        return np.asarray(split_underflow_fraction(d, S, order=str(cfg["order"]), k=int(cfg["ksink"]), **kw))
    if final:
        return np.zeros_like(d)
    return np.asarray(init_underflow_fraction(d, S, **kw))


def status_of(first: float, peak: float, level: float) -> str:
    """``always`` when a curve is at or above ``level`` at its first Δ, ``never`` when it stays below it."""
    return "always" if first >= level else ("never" if peak < level else "cross")


def _curve_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The underflow rows with one ``seed`` per decode row (seed, head), for the per-unit pivots."""
    out = df[df["kind"] != "partition"].copy()
    out["seed"] = out["seed"].astype(int) * 100_000 + out["head"].astype(int)
    return out


def decode_curves(df: pd.DataFrame, *, confidence_level: float = 0.95) -> pd.DataFrame:
    """Mean underflow fraction per configuration and Δ with its CI over rows, and the theory's."""
    rows = _curve_rows(df)
    out = seed_mean_ci(rows, CONFIG_KEYS + ["delta"], "underflow_frac", confidence_level)
    out["n_rows"] = rows.groupby(CONFIG_KEYS + ["delta"], sort=True)["seed"].nunique().to_numpy()
    theory = np.empty(len(out))
    first = rows.groupby(CONFIG_KEYS, sort=False).first()
    for key, idx in out.groupby(CONFIG_KEYS, sort=False).groups.items():
        cfg = {**first.loc[key, _FIXED].to_dict(), **dict(zip(CONFIG_KEYS, key))}
        theory[out.index.get_indexer(idx)] = predicted_fraction(cfg, out.loc[idx, "delta"].to_numpy(float))
    out["theory"] = theory
    return out


def decode_crossings(df: pd.DataFrame, curves: pd.DataFrame, *, level: float = 0.5, boot: Mapping) -> pd.DataFrame:
    """Measured and predicted Δc per configuration (module docstring)."""
    rows = _curve_rows(df)
    out = []
    for key, part in rows.groupby(CONFIG_KEYS, sort=True):
        cfg = {**part.iloc[0][_FIXED].to_dict(), **dict(zip(CONFIG_KEYS, key))}
        x, est, lo, hi, start = seed_crossing(part, "underflow_frac", level, dict(boot))
        curve = curves.set_index(CONFIG_KEYS).loc[key].sort_values("delta")
        meas = curve["underflow_frac_mean"].to_numpy(float)
        st_meas = status_of(meas[0], meas.max(), level)
        fine = np.arange(x[0], x[-1] + 1e-9, 0.01)
        pred_curve = predicted_fraction(cfg, fine)
        st_pred = status_of(pred_curve[0], pred_curve.max(), level)
        pred = float(crossing_rows(fine, pred_curve[None, :], level)[0]) if st_pred == "cross" else math.nan
        closed = (split_critical_delta(float(cfg["scale"]), num_splits=int(cfg["num_splits"]),
                                       layout=str(cfg["split_layout"]), order=str(cfg["order"]), k=int(cfg["ksink"]),
                                       n=int(cfg["n"]), block_n=int(cfg["block_n"]), sigma=float(cfg["sigma"]),
                                       fmt=str(cfg["fmt"]))
                  if cfg["kind"] == "keys" and cfg["p_normalize"] == "online" else math.nan)
        est = est if st_meas == "cross" else math.nan
        miss = est - pred if st_meas == st_pred == "cross" else math.nan
        err = float(np.nanmax(np.abs(meas - curve["theory"].to_numpy(float))))
        out.append((*key, part["seed"].nunique(), st_meas, est, lo, hi, st_pred, pred, closed, miss, err))
    return pd.DataFrame(out, columns=CONFIG_KEYS + ["n_rows", "status_meas", "dc_meas", "dc_lo", "dc_hi",
                                                    "status_pred", "dc_pred", "dc_closed_form", "dc_miss",
                                                    "uf_max_err"])


def decode_partition(df: pd.DataFrame, *, boot: Mapping) -> pd.DataFrame:
    """Pooled relative RMS error of the partition-normalised cast per (n, S), its CI over seeds, the theory."""
    part = df[df["kind"] == "partition"]
    out = []
    for (n, s), g in part.groupby(["n", "scale"], sort=True):
        e2, x2 = g["p_err2"].to_numpy(float), g["p_x2"].to_numpy(float)
        rel = math.sqrt(e2.sum() / x2.sum())
        lo = hi = math.nan
        if len(g) >= 2:
            res = stats.bootstrap((e2, x2), lambda a, b, axis=-1: np.sqrt(a.sum(axis) / b.sum(axis)), paired=True,
                                  vectorized=True, n_resamples=int(boot["n_resamples"]),
                                  confidence_level=float(boot["confidence_level"]), method=boot["method"],
                                  rng=np.random.default_rng(int(boot["seed"])))
            lo, hi = (float(v) for v in res.confidence_interval)
        theory = partition_rms_error(int(n), float(s), float(g["sigma"].iloc[0]), str(g["fmt"].iloc[0]))
        out.append((int(n), float(s), g["seed"].nunique(), int(g["p_rows"].sum()), rel, lo, hi, theory,
                    rel / theory - 1.0))
    return pd.DataFrame(out, columns=["n", "scale", "n_seeds", "rows", "rel_rms", "rel_rms_lo", "rel_rms_hi",
                                      "theory", "rel_diff"])
