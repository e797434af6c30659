"""Summaries of the tidy tables, measured next to the theory: what results/stats/ holds.

Seed intervals and Δc crossings (with their bootstrap over seeds), then one summary per
experiment: :func:`collapse_summary`, :func:`scales_summary`, :func:`threshold_summary`, and the
MSE knees derived from the T1 family (:func:`knee_summary`). They join the measured tidy tables
with the predictions of :mod:`pcast.theory`; figures, tables and verdicts read them.
:mod:`pcast.analysis.stats` builds each one from the ``statistics:`` section of config.yaml.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats
from scipy.optimize import brentq

from pcast import theory
from pcast.formats import FORMATS, get_format
from pcast.analysis.paired import config_columns, median_ratio_ci

__all__ = [
    "write_csv", "seed_interval", "crossing", "crossing_ci", "knee_ratio", "collapse_summary",
    "scales_summary", "threshold_summary", "knee_summary",
]


def write_csv(df: pd.DataFrame, path) -> None:
    """Write a CSV with deterministic bytes: no index, ``%.10g`` floats, ``\\n`` line ends."""
    df.to_csv(path, index=False, float_format="%.10g", lineterminator="\n")


def seed_interval(df: pd.DataFrame, by: Sequence[str], value: str,
                  level: float = 0.95) -> pd.DataFrame:
    """Median and central ``level`` interval over seeds (empirical quantiles) per group.

    Returns ``by + [value_median, value_lo, value_hi, value_mean, n_seeds]``.
    """
    q = (1 - level) / 2
    g = df.groupby(list(by), sort=True, dropna=False)[value]
    out = pd.DataFrame({
        f"{value}_median": g.median(),
        f"{value}_lo": g.quantile(q),
        f"{value}_hi": g.quantile(1 - q),
        f"{value}_mean": g.mean(),
        "n_seeds": g.size(),
    }).reset_index()
    return out


# ----------------------------------------------------------------------------- crossings


def crossing_rows(x: np.ndarray, y: np.ndarray, level: float) -> np.ndarray:
    """First upward crossing of ``level`` along the last axis of ``y`` (rows), interpolated."""
    y = np.atleast_2d(np.asarray(y, dtype=float))
    x = np.asarray(x, dtype=float)
    above = y >= level
    j = np.argmax(above, axis=-1)
    rows = np.arange(y.shape[0])
    out = np.full(y.shape[0], np.nan)
    # Reaching the level at the first grid point counts only when it is hit exactly there:
    # otherwise the crossing lies left of the grid and is not bracketed.
    at_start = above.any(axis=-1) & (j == 0) & (y[:, 0] == level)
    out[at_start] = x[0]
    ok = above.any(axis=-1) & (j > 0)
    jj, rr = j[ok], rows[ok]
    y0, y1 = y[rr, jj - 1], y[rr, jj]
    out[ok] = x[jj - 1] + (level - y0) * (x[jj] - x[jj - 1]) / (y1 - y0)
    return out


def crossing(x, y, level: float = 0.5) -> float:
    """The ``x`` where ``y`` first reaches ``level`` from below, by linear interpolation.

    ``x`` must be increasing. NaN when ``y`` never reaches the level on the grid, or already
    exceeds it at the first point (the crossing lies outside the grid).
    """
    x = np.asarray(x, dtype=float)
    if np.any(np.diff(x) <= 0):
        raise ValueError("x must be strictly increasing")
    return float(crossing_rows(x, np.asarray(y, dtype=float)[None, :], level)[0])


def crossing_ci(x, curves, level: float = 0.5, *, n_resamples: int = 2000,
                confidence_level: float = 0.95, method: str = "percentile",
                seed: int = 0) -> tuple[float, float, float]:
    """Crossing of the seed-mean curve and its bootstrap CI over seeds.

    ``curves`` is ``[n_seeds, len(x)]`` (one curve per seed on a shared grid). The estimate is
    the crossing of the mean curve; the CI resamples seeds (``scipy.stats.bootstrap`` on the
    seed indices). Resamples whose mean curve does not cross give NaN; if any do, the CI is NaN.
    """
    x = np.asarray(x, dtype=float)
    curves = np.atleast_2d(np.asarray(curves, dtype=float))
    est = float(crossing_rows(x, curves.mean(axis=0)[None, :], level)[0])
    n = curves.shape[0]
    if n < 2 or not np.isfinite(est):
        return (est, math.nan, math.nan)

    def stat(idx, axis=-1):
        idx = np.asarray(idx).astype(int)
        flat = idx.reshape(-1, n)
        mean = curves[flat].mean(axis=1)
        return crossing_rows(x, mean, level).reshape(idx.shape[:-1])

    if np.all(np.ptp(curves, axis=0) == 0):
        return (est, est, est)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.bootstrap((np.arange(n),), stat, vectorized=True,
                              n_resamples=int(n_resamples), confidence_level=confidence_level,
                              method=method, rng=np.random.default_rng(seed))
    lo, hi = res.confidence_interval
    return (est, float(lo), float(hi))


def knee_ratio(x, ratio, factor: float) -> float:
    """First ``x`` where ``ratio`` (e.g. MSE over its fixed floor) reaches ``factor``.

    Interpolated on ``ln(ratio)``; NaN if it never does on the grid or starts above it.
    """
    r = np.asarray(ratio, dtype=float)
    with np.errstate(divide="ignore"):
        lr = np.log(np.where(r > 0, r, np.nan))
    lr = np.where(np.isnan(lr), -np.inf, lr)
    return crossing(x, lr, math.log(factor))


# ----------------------------------------------------------------------------- with theory


def _theory_ok(row) -> bool:
    """Theory applies: non-causal rows, a known FP8 format, sinks inside block 0."""
    causal = str(row.get("causal", False)).lower() in ("true", "1")
    return (not causal and row.get("fmt", "e4m3fn") in FORMATS
            and 1 <= int(row.get("ksink", 1)) <= int(row.get("block_n", 64)))


def _predict(row, deltas, method: str) -> np.ndarray:
    if not _theory_ok(row):
        return np.full(np.shape(deltas), np.nan)
    return np.asarray(theory.underflow_fraction(
        np.asarray(deltas, dtype=float), float(row["scale"]), k=int(row["ksink"]),
        fmt=row.get("fmt", "e4m3fn"), sigma=float(row.get("sigma", 1.0)), order=row["order"],
        n=int(row["n"]), block_n=int(row["block_n"]), method=method), dtype=float)


def _summary_keys(df: pd.DataFrame) -> list[str]:
    """A summary's row key: every configuration column and the combination label."""
    return config_columns(df, exclude=("backend", "combo")) + ["combo"]


def _add_predictions(out: pd.DataFrame, keys: list[str]) -> None:
    """``pred_leading`` and ``pred_exact`` per row of a collapse summary (in place)."""
    out["pred_leading"] = np.nan
    out["pred_exact"] = np.nan
    theory_keys = [c for c in keys if c not in ("delta", "sink_v_scale", "combo", "experiment")]
    for _, part in out.groupby(theory_keys, sort=True, dropna=False):
        row = part.iloc[0].to_dict()
        deltas = np.unique(part["delta"].to_numpy(float))
        for method in ("leading", "exact"):
            pred = dict(zip(deltas, _predict(row, deltas, method)))
            out.loc[part.index, f"pred_{method}"] = part["delta"].map(pred).to_numpy(float)


def collapse_summary(df: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """Per configuration (every Δ, sink_v_scale and combination): measured vs predicted underflow.

    Columns: the configuration columns, ``combo``, ``backend`` (the backends that ran, joined by
    ``+``), ``n_seeds``, ``underflow``/``terms`` (summed over seeds), ``underflow_frac_mean``
    (the pooled fraction, what the theory predicts), ``underflow_frac_se`` (its standard error: the
    standard deviation over seeds / sqrt(seeds); 0 with one seed), ``underflow_frac_median/_lo/_hi``
    (median and central ``level`` interval over seeds), ``underflow_sink_frac_mean``, ``mse_median/_lo/_hi``,
    ``pred_leading`` and ``pred_exact`` (pcast.theory.underflow_fraction; NaN where the theory
    does not apply, e.g. causal rows) and ``pred_expected_count`` = ``pred_exact * terms``.
    """
    keys = _summary_keys(df)
    g = df.groupby(keys, sort=True, dropna=False)
    out = g.agg(n_seeds=("seed", "nunique"), underflow=("underflow", "sum"),
                terms=("terms", "sum"), underflow_sink=("underflow_sink", "sum"),
                terms_sink=("terms_sink", "sum"), saturated=("saturated", "sum")).reset_index()
    out.insert(len(keys), "backend",
               g["backend"].agg(lambda s: "+".join(sorted(set(map(str, s))))).to_numpy())
    with np.errstate(invalid="ignore", divide="ignore"):
        out["underflow_frac_mean"] = out["underflow"] / out["terms"]
        out["underflow_sink_frac_mean"] = out["underflow_sink"] / out["terms_sink"]
    se = g["underflow_frac"].agg(lambda s: float(s.std(ddof=1)) / np.sqrt(len(s)) if len(s) > 1 else 0.0)
    out["underflow_frac_se"] = se.to_numpy(float)
    for value in ("underflow_frac", "mse"):
        si = seed_interval(df, keys, value, level).drop(columns=["n_seeds", f"{value}_mean"])
        out = out.merge(si, on=keys, how="left")
    _add_predictions(out, keys)
    out["pred_expected_count"] = out["pred_exact"] * out["terms"]
    return out.reset_index(drop=True)


def _improvement(df: pd.DataFrame, keys: list[str], baseline: str, boot: dict) -> pd.DataFrame:
    """Paired median ratio MSE(baseline) / MSE(row) per summary key, with its bootstrap CI."""
    pair_keys = [c for c in keys if c not in ("order", "scale", "combo")]
    base = df[df["combo"] == baseline][pair_keys + ["seed", "mse"]].rename(columns={"mse": "_base"})
    imp = []
    for key, part in df.merge(base, on=pair_keys + ["seed"], how="inner").groupby(keys, sort=True):
        r, lo, hi = median_ratio_ci(part["_base"], part["mse"], **boot)
        imp.append((*key, r, lo, hi))
    return pd.DataFrame(imp, columns=keys + ["improvement", "improvement_lo", "improvement_hi"])


def scales_summary(df: pd.DataFrame, *, baseline: str = "forward S=1", level: float = 0.95,
                   n_resamples: int = 2000, confidence_level: float = 0.95,
                   boot_method: str = "percentile", seed: int = 0) -> pd.DataFrame:
    """Per (S, order, Δ, ...): theory of S, measured MSE and underflow, improvement over baseline.

    Theory columns (pcast.theory, for the row's fmt): ``bit_exact``, ``dp``, ``coverage``,
    ``saturates`` (P = 1 maps above the format's max finite value: S > max_finite).
    ``improvement`` is the paired median ratio MSE(baseline) / MSE(this row), per seed, with its
    bootstrap CI (``improvement_lo/_hi``); NaN where the baseline combination was not run.
    """
    keys = _summary_keys(df)
    g = df.groupby(keys, sort=True, dropna=False)
    out = g.agg(n_seeds=("seed", "nunique"), underflow=("underflow", "sum"),
                terms=("terms", "sum"), saturated=("saturated", "sum")).reset_index()
    with np.errstate(invalid="ignore", divide="ignore"):
        out["underflow_frac_mean"] = out["underflow"] / out["terms"]
    si = seed_interval(df, keys, "mse", level).drop(columns=["n_seeds"])
    out = out.merge(si, on=keys, how="left")
    fmts = out["fmt"] if "fmt" in out else pd.Series("e4m3fn", index=out.index)
    out["bit_exact"] = [theory.bit_exact(float(s)) for s in out["scale"]]
    out["dp"] = [theory.dp(float(s), f) for s, f in zip(out["scale"], fmts)]
    out["coverage"] = [theory.coverage(float(s), f) for s, f in zip(out["scale"], fmts)]
    out["saturates"] = [float(s) > get_format(f).max_finite for s, f in zip(out["scale"], fmts)]
    boot = {"n_resamples": n_resamples, "confidence_level": confidence_level,
            "method": boot_method, "seed": seed}
    out = out.merge(_improvement(df, keys, baseline, boot), on=keys, how="left")
    return out.reset_index(drop=True)


def _exact_crossing(row, lo: float, hi: float, level: float) -> float:
    """Δ in [lo, hi] where the exact model's fraction equals ``level`` (NaN if not bracketed)."""
    f = lambda d: float(_predict(row, np.array([d]), "exact")[0]) - level  # noqa: E731
    flo, fhi = f(lo), f(hi)
    if not (flo <= 0 <= fhi):
        return math.nan
    return float(brentq(f, lo, hi, xtol=1e-6))


def _threshold_row(row: dict, part: pd.DataFrame, level: float, boot: dict) -> dict:
    """Measured, closed-form and exact-model Δc of one configuration of the threshold experiment."""
    wide = part.pivot_table(index="seed", columns="delta", values="underflow_frac",
                            aggfunc="first").sort_index(axis=1)
    complete = wide.dropna(axis=0, how="any")
    x = wide.columns.to_numpy(float)
    if len(x) >= 2 and len(complete):
        est, lo, hi = crossing_ci(x, complete.to_numpy(float), level, **boot)
    else:
        est = lo = hi = math.nan
    ok = _theory_ok(row)
    k = int(row["ksink"])
    fmt = row.get("fmt", "e4m3fn")
    dk = theory.delta_k(k) if k >= 1 else math.nan
    pred = theory.critical_delta(float(row["scale"]), k=k, fmt=fmt) if ok else math.nan
    dc_exact = _exact_crossing(row, float(x.min()), float(x.max()), level) \
        if ok and len(x) >= 2 else math.nan
    return {**row, "n_seeds": int(len(complete)),
            "grid_step": float(np.min(np.diff(x))) if len(x) >= 2 else math.nan,
            "delta_k": dk, "dc_pred": pred, "dc_exact": dc_exact, "dc_meas": est,
            "dc_lo": lo, "dc_hi": hi, "diff": est - pred}


def threshold_summary(df: pd.DataFrame, *, level: float = 0.5, n_resamples: int = 2000,
                      confidence_level: float = 0.95, boot_method: str = "percentile",
                      seed: int = 0) -> pd.DataFrame:
    """Measured and predicted Δc per configuration of the threshold experiment.

    For each configuration other than Δ (ksink, S, order, ...): ``delta_k``, ``dc_pred`` (the
    closed form ``log_threshold + ln S - delta_k``), ``dc_exact`` (where the exact model's
    predicted fraction crosses ``level``, on a 0.01 grid over the measured Δ range),
    ``dc_meas`` (where the seed-mean measured fraction crosses ``level``, interpolated on the
    Δ grid) with its bootstrap-over-seeds CI ``dc_lo/dc_hi``, ``diff = dc_meas - dc_pred``,
    the grid step and the number of seeds.
    """
    keys = config_columns(df, exclude=("backend", "combo", "delta"))
    boot = {"n_resamples": n_resamples, "confidence_level": confidence_level,
            "method": boot_method, "seed": seed}
    rows = [_threshold_row(dict(zip(keys, key)), part, level, boot)
            for key, part in df.groupby(keys, sort=True, dropna=False)]
    return pd.DataFrame(rows)


def knee_summary(paired: pd.DataFrame, *, reference: str = "reverse S=256",
                 factor: float = 2.0) -> pd.DataFrame:
    """The MSE knee of each forward-order combination, from the T1 family of the collapse experiment.

    The knee is the first Δ where the median paired ratio MSE(combo) / MSE(``reference``) reaches
    ``factor`` (interpolated on the log ratio): where the collapse starts to cost precision,
    measured against a combination that does not collapse. One row per (combo, sink_v_scale, ...)
    with ``knee`` (NaN if never reached on the grid), the peak ratio and its Δ, and the closed-form
    ``dc_pred`` for the same S and ksink.
    """
    part = paired[(paired["b"] == reference) & paired["a"].str.startswith("forward ")]
    keys = config_columns(part, exclude=("backend", "combo", "delta", "order", "scale"))
    rows = []
    for key, g in part.groupby(keys + ["a"], sort=True, dropna=False):
        g = g.sort_values("delta")
        row = dict(zip(keys + ["a"], key))
        order, s = row["a"].split(" S=")
        x = g["delta"].to_numpy(float)
        r = g["median_ratio"].to_numpy(float)
        knee = knee_ratio(x, r, factor) if len(x) >= 2 else math.nan
        peak = int(np.nanargmax(r)) if np.isfinite(r).any() else None
        dc = theory.critical_delta(float(s), k=int(row.get("ksink", 4)), fmt=row.get("fmt", "e4m3fn"))
        rows.append({**{c: row[c] for c in keys}, "combo": row["a"], "order": order,
                     "scale": float(s), "reference": reference, "factor": factor, "knee": knee,
                     "peak_ratio": r[peak] if peak is not None else math.nan,
                     "peak_delta": x[peak] if peak is not None else math.nan,
                     "dc_pred": dc, "knee_minus_dc": knee - dc})
    return pd.DataFrame(rows)
