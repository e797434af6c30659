"""P in microscaled FP4: the fp4 experiment's summary, measured next to the theory.

:func:`fp4_summary` turns ``results/tidy/fp4.csv`` (columns :data:`pcast.contract.FP4_TIDY_COLUMNS`)
into ``results/stats/fp4.csv``: one row per configuration (P cast, order, Δ and the rest of
:data:`pcast.contract.FP4_CONFIG_COLUMNS`), with

* ``<x>_mean/_lo/_hi`` for x in :data:`MEANS` (the underflow fractions by cause, the flushed-group and
  saturated fractions, the relative MSE): the mean over seeds and its Student-t CI
  (:func:`pcast.analysis.policies.seed_mean_ci`); ``rel_mse_median``;
* the theory (:mod:`.fp4_predictions`): ``flush_threshold``, ``pred_groups_flushed``,
  ``pred_underflow_elem``;
* per curve (the configuration less Δ), on each of its rows: ``dc_meas`` where the seed-mean flushed-group
  fraction crosses ``crossing_level`` (interpolated, :func:`pcast.analysis.summaries.crossing_ci`) with
  its bootstrap-over-seeds CI ``dc_lo/dc_hi``, ``flushed_at_start`` (the mean fraction at the first Δ), and
  ``dc_pred`` (``critical_delta_flush``: static NVFP4, forward order; NaN otherwise);
* ``fr_ratio`` with ``fr_ratio_lo/_hi``: the median per-seed MSE ratio forward / reverse of the cast at
  that Δ and its paired-bootstrap CI (:func:`pcast.analysis.paired.median_ratio_ci`), on both orders' rows;
* ``base_ratio`` with ``base_ratio_lo/_hi``: the same ratio of the cast's MSE over the FP8 baseline's
  (the one cast whose format is not microscaled) in the same order, at that Δ.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pcast.contract import FP4_CONFIG_COLUMNS
from pcast.analysis import fp4_predictions as fp
from pcast.analysis.paired import median_ratio_ci
from pcast.analysis.policies import check_tidy, seed_crossing, seed_summary

__all__ = ["REQUIRED", "MEANS", "config_keys", "baseline_cast", "fp4_summary", "curve_rows"]

REQUIRED = ("seed", "n", "block_n", "ksink", "sigma", "sink_v_scale", "fmt", "scale_mode", "scale", "order", "delta",
            "cast", "backend", "mse", "rel_mse", "underflow_frac", "underflow_scale_frac", "underflow_elem_frac",
            "groups_flushed_frac", "saturated_frac")
MEANS = ("underflow_frac", "underflow_scale_frac", "underflow_elem_frac", "groups_flushed_frac", "saturated_frac",
         "rel_mse")


def config_keys(df: pd.DataFrame, exclude=()) -> list[str]:
    """The configuration columns present in ``df`` (and ``cast``), less ``exclude``."""
    ex = set(exclude)
    return [c for c in FP4_CONFIG_COLUMNS + ("cast",) if c in df.columns and c not in ex]


def baseline_cast(df: pd.DataFrame) -> str | None:
    """The FP8 baseline's cast label: the one cast whose format is not microscaled (None if not one)."""
    fp8 = sorted(set(df.loc[~df["fmt"].isin(list(fp.GROUP)), "cast"]))
    return fp8[0] if len(fp8) == 1 else None


def _predictions(out: pd.DataFrame, ckeys: list[str]) -> None:
    """``flush_threshold``, ``pred_groups_flushed``, ``pred_underflow_elem``, ``dc_pred`` (in place)."""
    for col in ("flush_threshold", "pred_groups_flushed", "pred_underflow_elem", "dc_pred"):
        out[col] = np.nan
    for _, part in out.groupby(ckeys, sort=True, dropna=False):
        row = part.iloc[0].to_dict()
        deltas = part["delta"].to_numpy(float)
        out.loc[part.index, "flush_threshold"] = fp.threshold(row)
        out.loc[part.index, "pred_groups_flushed"] = fp.group_flush(row, deltas)
        out.loc[part.index, "pred_underflow_elem"] = fp.element_underflow(row, deltas)
        if row["order"] == "forward":
            out.loc[part.index, "dc_pred"] = fp.critical_delta(row)


def _crossings(df: pd.DataFrame, ckeys: list[str], level: float, boot: dict) -> pd.DataFrame:
    """Measured group-flush Δc per curve: ``ckeys`` + dc_meas, dc_lo, dc_hi, flushed_at_start."""
    rows = []
    for key, part in df.groupby(ckeys, sort=True, dropna=False):
        _, est, lo, hi, start = seed_crossing(part, "groups_flushed_frac", level, boot)
        rows.append((*key, est, lo, hi, start))
    return pd.DataFrame(rows, columns=ckeys + ["dc_meas", "dc_lo", "dc_hi", "flushed_at_start"])


def _paired(df: pd.DataFrame, by: list[str], split: str, a, b, name: str, boot: dict) -> pd.DataFrame:
    """Per group of ``by``: the median per-seed MSE ratio (rows with ``split == a``) / (``split == b``)
    paired by seed, and its CI: ``by + [name, name_lo, name_hi]``."""
    rows = []
    for key, part in df.groupby(by, sort=True, dropna=False):
        x = part[part[split] == a].set_index("seed")["mse"]
        y = part[part[split] == b].set_index("seed")["mse"]
        seeds = x.index.intersection(y.index)
        r = median_ratio_ci(x[seeds].to_numpy(float), y[seeds].to_numpy(float), **boot)
        rows.append((*(key if isinstance(key, tuple) else (key,)), *r))
    return pd.DataFrame(rows, columns=by + [name, f"{name}_lo", f"{name}_hi"])


def _base_ratios(df: pd.DataFrame, keys: list[str], boot: dict) -> pd.DataFrame:
    """``keys`` + base_ratio, _lo, _hi: each cast's MSE over the FP8 baseline's, same order, Δ and seed."""
    base = baseline_cast(df)
    cols = keys + ["base_ratio", "base_ratio_lo", "base_ratio_hi"]
    if base is None:
        return pd.DataFrame(columns=cols)
    setting = [c for c in keys if c not in ("fmt", "scale_mode", "scale", "cast")]
    ref = df[df["cast"] == base][setting + ["seed", "mse"]].rename(columns={"mse": "base_mse"})
    both = df.merge(ref, on=setting + ["seed"], how="inner")
    rows = []
    for key, part in both.groupby(keys, sort=True, dropna=False):
        rows.append((*key, *median_ratio_ci(part["mse"].to_numpy(float), part["base_mse"].to_numpy(float), **boot)))
    return pd.DataFrame(rows, columns=cols)


def fp4_summary(df: pd.DataFrame, *, crossing_level: float = 0.5, n_resamples: int = 2000,
                confidence_level: float = 0.95, boot_method: str = "percentile", seed: int = 0) -> pd.DataFrame:
    """The fp4 summary (``results/stats/fp4.csv``; columns in the module docstring)."""
    check_tidy(df, REQUIRED, "fp4", "FP4_TIDY_COLUMNS")
    if not 0 < crossing_level < 1:
        raise ValueError(f"crossing_level={crossing_level!r} is not allowed; allowed: a number in (0, 1)")
    keys, ckeys = config_keys(df), config_keys(df, exclude=("delta",))
    boot = {"n_resamples": n_resamples, "confidence_level": confidence_level, "method": boot_method, "seed": seed}
    g = df.groupby(keys, sort=True, dropna=False)
    out = seed_summary(df, keys, MEANS, confidence_level)
    out = out.merge(g.agg(rel_mse_median=("rel_mse", "median")).reset_index(), on=keys, how="left")
    _predictions(out, ckeys)
    out = out.merge(_crossings(df, ckeys, crossing_level, boot), on=ckeys, how="left")
    fr_by = config_keys(df, exclude=("order",))
    out = out.merge(_paired(df, fr_by, "order", "forward", "reverse", "fr_ratio", boot), on=fr_by, how="left")
    out = out.merge(_base_ratios(df, keys, boot), on=keys, how="left")
    out["crossing_level"] = float(crossing_level)
    return out.reset_index(drop=True)


def curve_rows(summary: pd.DataFrame, order: str | None = None):
    """``(key dict, rows sorted by Δ)`` per curve (configuration less Δ) of the summary, of one order."""
    s = summary if order is None else summary[summary["order"] == order]
    ckeys = config_keys(s, exclude=("delta",))
    for key, part in s.groupby(ckeys, sort=True, dropna=False):
        yield dict(zip(ckeys, key)), part.sort_values("delta", kind="mergesort")
