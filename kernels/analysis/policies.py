"""What each deployed P policy loses: the policies experiment's summary, measured next to the theory.

:func:`policy_summary` turns ``results/tidy/policies.csv`` (columns
:data:`pcast.contract.POLICY_TIDY_COLUMNS`) into ``results/stats/policies.csv``: one row per
configuration (policy, variant, sink_kind, sink_v_scale, Δ and the rest of
:data:`pcast.contract.POLICY_CONFIG_COLUMNS`), with

* ``underflow_frac_mean/_lo/_hi``, ``saturated_frac_mean/_lo/_hi``: the mean over seeds and its
  Student-t confidence interval (``scipy.stats.t``; it collapses to the mean when every seed
  agrees, NaN with one seed);
* ``rel_mse_median``, ``floor_rel_mse_median``: medians over seeds of the relative MSE and of the
  V-cast floor (the same call with P unrounded);
* ``floor_ratio`` with ``floor_ratio_lo/_hi``: the median per-seed ratio rel_mse / floor_rel_mse
  and its paired-bootstrap CI (:func:`pcast.analysis.paired.median_ratio_ci`): how far the
  P cast lifts the error above what the operand casts cost anyway;
* ``applied_scale``, ``pred_model``, ``pred_underflow``, ``pred_saturated``: the theory
  (:mod:`.policy_predictions`);
* per curve (the configuration less Δ), repeated on each of its rows: ``dc_meas`` (where the
  seed-mean underflow curve crosses ``crossing_level``, :func:`pcast.analysis.summaries.crossing_ci`,
  as for the threshold experiment) with its bootstrap-over-seeds CI ``dc_lo/dc_hi``, ``dc_pred``
  (where the prediction crosses on the same Δ range), ``underflow_at_start`` (the seed-mean
  fraction at the grid's first Δ, which tells "collapsed from the start" from "never").

:func:`curve_keys`, :func:`curves` and :func:`first_delta` are shared with T5 and the audit.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from pcast.contract import POLICY_CONFIG_COLUMNS
from pcast.analysis import policy_predictions as pp
from pcast.analysis.paired import median_ratio_ci
from pcast.analysis.summaries import crossing_ci

__all__ = ["REQUIRED", "POLICY_FIELDS", "config_keys", "curve_keys", "seed_mean_ci", "seed_summary", "policy_summary",
           "curves", "first_delta", "floor_rows", "best_policy_ratio", "policy_peaks", "require"]

# The configuration columns a policy sets (pcast.policies.Policy's P-path fields); the others
# (shape, sink, Δ, variant and its operand casts) are the setting that policies are compared in.
POLICY_FIELDS = ("policy", "order", "scale", "scale_mode", "rescale_threshold", "sink_mode", "fmt", "rowsum",
                 "block_m", "block_n")
# The tidy columns the summary reads.
REQUIRED = ("seed", "policy", "variant", "sink_kind", "ksink", "delta", "sigma", "sink_v_scale", "order",
            "scale", "scale_mode", "rescale_threshold", "sink_mode", "fmt", "n", "block_n", "backend",
            "rel_mse", "floor_rel_mse", "underflow_frac", "underflow_sink_frac", "saturated_frac")


def require(cfg, section: str, keys) -> None:
    """A ValueError naming each config key of ``section`` that ``cfg`` lacks (before any work)."""
    missing = [k for k in keys if k not in cfg]
    if missing:
        raise ValueError(f"config key {', '.join(f'{section}.{k}' for k in missing)} is missing; "
                         f"required: {', '.join(keys)}")


def config_keys(df: pd.DataFrame, exclude=()) -> list[str]:
    """The configuration columns (:data:`POLICY_CONFIG_COLUMNS`) present in ``df``, less ``exclude``."""
    ex = set(exclude)
    return [c for c in POLICY_CONFIG_COLUMNS if c in df.columns and c not in ex]


def curve_keys(df: pd.DataFrame) -> list[str]:
    """One curve against Δ: every configuration column but Δ."""
    return config_keys(df, exclude=("delta",))


def check_tidy(df: pd.DataFrame, required=None, table: str = "policies",
               columns: str = "POLICY_TIDY_COLUMNS") -> None:
    """A tidy table has the ``required`` columns (pcast.contract's ``columns``) and at least one row."""
    missing = [c for c in (REQUIRED if required is None else required) if c not in df.columns]
    if missing:
        raise ValueError(f"tidy {table} table: columns {', '.join(missing)} are missing; "
                         f"required: pcast.contract.{columns}")
    if df.empty:
        raise ValueError(f"tidy {table} table: no rows")


def seed_mean_ci(df: pd.DataFrame, keys, value: str, confidence_level: float = 0.95) -> pd.DataFrame:
    """Mean over seeds of ``value`` per group and its Student-t CI: ``keys + [value_mean, _lo, _hi]``."""
    if not 0 < confidence_level < 1:
        raise ValueError(f"confidence_level={confidence_level!r} is not allowed; allowed: a number in (0, 1)")
    g = df.groupby(list(keys), sort=True, dropna=False)[value]
    out = pd.DataFrame({"mean": g.mean(), "sd": g.std(ddof=1), "n": g.count()})
    with np.errstate(invalid="ignore", divide="ignore"):
        t = stats.t.ppf((1 + confidence_level) / 2, out["n"] - 1)
        half = np.where(out["sd"] == 0, 0.0, t * out["sd"] / np.sqrt(out["n"]))
    half = np.where(out["n"] >= 2, half, math.nan)
    res = pd.DataFrame({f"{value}_mean": out["mean"], f"{value}_lo": out["mean"] - half,
                        f"{value}_hi": out["mean"] + half}, index=out.index)
    return res.reset_index()


def seed_summary(df: pd.DataFrame, keys, means, confidence_level: float = 0.95) -> pd.DataFrame:
    """Per configuration of ``keys``: ``n_seeds``, ``backend`` (the backends that ran it, joined by "+") and,
    for each column of ``means``, its seed mean with the interval of :func:`seed_mean_ci`."""
    g = df.groupby(keys, sort=True, dropna=False)
    out = g.agg(n_seeds=("seed", "nunique")).reset_index()
    out.insert(len(keys), "backend", g["backend"].agg(lambda s: "+".join(sorted(set(map(str, s))))).to_numpy())
    for value in means:
        out = out.merge(seed_mean_ci(df, keys, value, confidence_level), on=keys, how="left")
    return out


def _floor_ratios(df: pd.DataFrame, keys: list[str], boot: dict) -> pd.DataFrame:
    """Median per-seed rel_mse / floor_rel_mse and its paired-bootstrap CI, per configuration."""
    rows = []
    for key, part in df.groupby(keys, sort=True, dropna=False):
        r, lo, hi = median_ratio_ci(part["rel_mse"], part["floor_rel_mse"], **boot)
        rows.append((*key, r, lo, hi))
    return pd.DataFrame(rows, columns=keys + ["floor_ratio", "floor_ratio_lo", "floor_ratio_hi"])


def _predictions(out: pd.DataFrame, ckeys: list[str]) -> None:
    """``applied_scale``, ``pred_model``, ``pred_underflow``, ``pred_saturated`` (in place)."""
    for col in ("applied_scale", "pred_underflow", "pred_saturated"):
        out[col] = np.nan
    out["pred_model"] = ""
    for _, part in out.groupby(ckeys, sort=True, dropna=False):
        row = part.iloc[0].to_dict()
        deltas = part["delta"].to_numpy(float)
        out.loc[part.index, "applied_scale"] = pp.applied_scale(row)
        out.loc[part.index, "pred_model"] = pp.underflow_model(row)
        out.loc[part.index, "pred_underflow"] = pp.predict_underflow(row, deltas)
        out.loc[part.index, "pred_saturated"] = pp.predict_saturation(row, deltas)


def seed_crossing(part: pd.DataFrame, value: str, level: float, boot: dict) -> tuple:
    """One curve's rows (seed × Δ) of ``value``: ``(Δ grid, crossing of level, CI lo, CI hi, seed mean at the
    first Δ)``, from the seeds with every Δ; NaN where fewer than 2 Δ or no seed."""
    wide = part.pivot_table(index="seed", columns="delta", values=value,
                            aggfunc="first").sort_index(axis=1).dropna(axis=0, how="any")
    x = wide.columns.to_numpy(float)
    est = lo = hi = math.nan
    if len(x) >= 2 and len(wide):
        est, lo, hi = crossing_ci(x, wide.to_numpy(float), level, **boot)
    start = float(wide.iloc[:, 0].mean()) if len(wide) else math.nan
    return x, est, lo, hi, start


def _crossings(df: pd.DataFrame, ckeys: list[str], level: float, boot: dict) -> pd.DataFrame:
    """Measured and predicted Δc per curve (``ckeys`` + dc_meas, dc_lo, dc_hi, dc_pred, underflow_at_start)."""
    rows = []
    for key, part in df.groupby(ckeys, sort=True, dropna=False):
        x, est, lo, hi, start = seed_crossing(part, "underflow_frac", level, boot)
        pred = pp.predicted_crossing(part.iloc[0].to_dict(), x, level) if len(x) >= 2 else math.nan
        rows.append((*key, est, lo, hi, pred, start))
    return pd.DataFrame(rows, columns=ckeys + ["dc_meas", "dc_lo", "dc_hi", "dc_pred", "underflow_at_start"])


def policy_summary(df: pd.DataFrame, *, crossing_level: float = 0.5, n_resamples: int = 2000,
                   confidence_level: float = 0.95, boot_method: str = "percentile",
                   seed: int = 0) -> pd.DataFrame:
    """The policies summary (``results/stats/policies.csv``; columns in the module docstring).

    ``crossing_level`` defines Δc; the bootstrap keywords are those of every bootstrapped statistic
    (:func:`pcast.analysis.stats.bootstrap`); ``confidence_level`` is also the seed-mean CI level.
    """
    check_tidy(df)
    if not 0 < crossing_level < 1:
        raise ValueError(f"crossing_level={crossing_level!r} is not allowed; allowed: a number in (0, 1)")
    keys, ckeys = config_keys(df), curve_keys(df)
    boot = {"n_resamples": n_resamples, "confidence_level": confidence_level, "method": boot_method,
            "seed": seed}
    g = df.groupby(keys, sort=True, dropna=False)
    out = seed_summary(df, keys, ("underflow_frac", "saturated_frac"), confidence_level)
    med = g.agg(underflow_sink_frac_mean=("underflow_sink_frac", "mean"), rel_mse_median=("rel_mse", "median"),
                floor_rel_mse_median=("floor_rel_mse", "median")).reset_index()
    out = out.merge(med, on=keys, how="left").merge(_floor_ratios(df, keys, boot), on=keys, how="left")
    _predictions(out, ckeys)
    out = out.merge(_crossings(df, ckeys, crossing_level, boot), on=ckeys, how="left")
    out["crossing_level"] = float(crossing_level)
    return out.reset_index(drop=True)


# ----------------------------------------------------------------------------- shared by T5 and the audit


def curves(summary: pd.DataFrame, variant: str | None = None):
    """``(key dict, rows sorted by Δ)`` per curve of the summary, of one variant (all if None)."""
    s = summary if variant is None else summary[summary["variant"] == variant]
    ckeys = curve_keys(s)
    for key, part in s.groupby(ckeys, sort=True, dropna=False):
        yield dict(zip(ckeys, key)), part.sort_values("delta", kind="mergesort")


def first_delta(part: pd.DataFrame, mask) -> float:
    """The smallest Δ of ``part`` where ``mask`` holds; NaN if it never does."""
    d = part.loc[np.asarray(mask, dtype=bool), "delta"]
    return float(d.min()) if len(d) else math.nan


def best_policy_ratio(summary: pd.DataFrame) -> pd.Series:
    """Per row: rel_mse_median over the smallest rel_mse_median of any policy in the same setting
    (same variant, sink, Δ and shape): 1 for the best policy at that Δ."""
    setting = config_keys(summary, exclude=POLICY_FIELDS)
    best = summary.groupby(setting, sort=False, dropna=False)["rel_mse_median"].transform("min")
    with np.errstate(invalid="ignore", divide="ignore"):
        return summary["rel_mse_median"] / best


def _peak(part: pd.DataFrame, col: str) -> tuple[float, float, int | None]:
    """(max of ``col`` over Δ, its Δ, its row label); NaN, NaN, None when ``col`` is all NaN."""
    v = part[col].to_numpy(float)
    if not np.isfinite(v).any():
        return math.nan, math.nan, None
    i = int(np.nanargmax(v))
    return float(v[i]), float(part["delta"].iloc[i]), part.index[i]


def floor_rows(summary: pd.DataFrame, key: dict, floor_variant: str) -> pd.DataFrame:
    """The rows of the curve ``key`` in ``floor_variant`` (the same policy, sink and shape)."""
    f = summary[summary["variant"] == floor_variant]
    for c in ("policy", "sink_kind", "sink_v_scale", "n", "d"):
        if c in key:
            f = f[f[c] == key[c]]
    return f.sort_values("delta", kind="mergesort")


def policy_peaks(summary: pd.DataFrame, *, variant: str, floor_variant: str) -> pd.DataFrame:
    """One row per curve of ``variant``: its Δc (measured, CI, predicted), the peak over Δ of its
    MSE over the best policy's (``best_ratio``, at ``best_delta``), the peak of the ``floor_variant``
    curve's median ratio to its V-cast floor (``floor_ratio`` with CI, at ``floor_delta``) and the
    largest mean saturated fraction (``saturated_max`` at ``saturated_delta``, and the theory's)."""
    for name, v in (("variant", variant), ("floor_variant", floor_variant)):
        if v not in set(summary["variant"]):
            raise ValueError(f"{name}={v!r} is not in the summary; allowed: {', '.join(sorted(set(summary['variant'])))}")
    s = summary.assign(best_ratio=best_policy_ratio(summary))
    rows = []
    for key, part in curves(s, variant):
        first = part.iloc[0]
        br, bd, _ = _peak(part, "best_ratio")
        fpart = floor_rows(s, key, floor_variant)
        fr, fd, fi = _peak(fpart, "floor_ratio")
        sm, sd, _ = _peak(part, "saturated_frac_mean")
        rows.append({**key, "dc_meas": first["dc_meas"], "dc_lo": first["dc_lo"], "dc_hi": first["dc_hi"],
                     "dc_pred": first["dc_pred"], "pred_model": first["pred_model"],
                     "underflow_at_start": first["underflow_at_start"], "best_ratio": br, "best_delta": bd,
                     "floor_variant": floor_variant, "floor_ratio": fr,
                     "floor_ratio_lo": fpart.at[fi, "floor_ratio_lo"] if fi is not None else math.nan,
                     "floor_ratio_hi": fpart.at[fi, "floor_ratio_hi"] if fi is not None else math.nan,
                     "floor_delta": fd, "saturated_max": sm, "saturated_delta": sd,
                     "pred_saturated_max": float(part["pred_saturated"].max())})
    return pd.DataFrame(rows)
