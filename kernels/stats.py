"""Paired statistics behind the claims: ratios, signed-rank and t tests, TOST, Holm, Δc crossings.

Everything here works on the tidy tables of the pipeline (``results/tidy/{experiment}.csv``,
one row per seed x configuration, see ``docs/interfaces.md``). Every distribution is
scipy's or statsmodels'; this module only arranges the data and handles degenerate cases.

Pairing. Two combinations (``combo``, e.g. ``"forward S=1"``) are compared on the same
seeds: a seed's Q, K, V went through every combination, so the unit of analysis is the
per-seed log ratio ``d = ln MSE_a - ln MSE_b``. Seeds present in only one combination are
dropped (the count that remained is reported as ``n_pairs``).

Conventions, chosen so that every comparison lives on one scale (log MSE):

* **median ratio** ``exp(median(d))``: the median of the per-seed ratios MSE_a/MSE_b; with an
  even number of seeds the two middle ratios are averaged on the log scale (geometric mean),
  which makes ``ratio(a, b) == 1 / ratio(b, a)`` exactly. Its 95% CI is a paired bootstrap
  (``scipy.stats.bootstrap(paired=True)``) with ``np.random.default_rng(seed)``.
* **Wilcoxon signed-rank** on ``d`` (``scipy.stats.wilcoxon``, ``method="auto"``: exact null
  distribution for n <= 50 without ties or zero differences; with ties/zeros an exhaustive
  permutation for n <= 13, else the normal approximation). The method used is reported.
* **paired t-test** on log MSE (``scipy.stats.ttest_rel``).
* **TOST** on log MSE with margin ``m = ln(1 + margin)`` (``margin=0.10`` means the two floors
  agree within a factor 1.1 either way): two one-sided ``ttest_1samp`` calls,
  ``H0: mean(d) <= -m`` and ``H0: mean(d) >= m``; ``p_tost`` is the larger p. Equivalence is
  declared when ``p_tost < alpha``; a non-significant difference test is never read as
  equivalence.
* **Holm** (``statsmodels.stats.multitest.multipletests(method="holm")``) over the whole family
  of rows passed in, separately for each test; NaN p-values stay NaN and are not counted.

Degenerate data (documented behaviour, also tested):

* both MSEs exactly 0 for a seed (e.g. an exact run): ``d = 0`` for that seed;
* exactly one MSE 0: ``d = ±inf``. The ratio statistics keep the infinity (median ratio may be
  0 or inf); Wilcoxon, which only uses signs and ranks, replaces ±inf by a finite value larger
  than every finite |d| (rank-preserving); the t-test and TOST are undefined (NaN) and the
  ``note`` column says why;
* all ``d`` identical (zero spread): Wilcoxon p = 1 when all are 0 (no evidence of a difference),
  else scipy's value; the t-test p is 1 when ``d == 0`` and 0 otherwise (t = ±inf); TOST
  p is 0 when ``|d| < m`` and 1 otherwise; the bootstrap CI collapses to the point;
* fewer than 2 pairs: every test is NaN.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
from scipy import stats

__all__ = [
    "CONFIG_COLUMNS",
    "combo_label",
    "config_columns",
    "pair_by_seed",
    "log_ratios",
    "median_ratio_ci",
    "wilcoxon_log",
    "ttest_log",
    "tost_log",
    "holm",
    "paired_tests",
    "seed_interval",
    "crossing",
    "crossing_ci",
    "knee_ratio",
    "write_csv",
]

# The configuration columns of a tidy table, in the documented order (docs/interfaces.md).
CONFIG_COLUMNS = [
    "experiment", "n", "d", "block_m", "block_n", "causal", "ksink", "delta", "sigma",
    "sink_v_scale", "order", "scale", "fmt", "rowsum",
]
# Columns that name the combination; pairing happens across them.
COMBO_COLUMNS = ("order", "scale", "combo", "backend")

_INF_LOG = 1e6  # stands in for ln(0) when ranking; exp(±1e6) is inf/0 again


def combo_label(order: str, scale: float) -> str:
    """The ``combo`` label of the tidy tables: ``"{order} S={scale:g}"``."""
    return f"{order} S={float(scale):g}"


def config_columns(df: pd.DataFrame, exclude: Iterable[str] = COMBO_COLUMNS) -> list[str]:
    """Configuration columns present in ``df`` other than those that name the combination."""
    ex = set(exclude)
    return [c for c in CONFIG_COLUMNS if c in df.columns and c not in ex]


def write_csv(df: pd.DataFrame, path) -> None:
    """Write a CSV with deterministic bytes: no index, ``%.10g`` floats, ``\\n`` line ends."""
    df.to_csv(path, index=False, float_format="%.10g", lineterminator="\n")


# ----------------------------------------------------------------------------- pairing


def pair_by_seed(df: pd.DataFrame, a: str, b: str, value: str = "mse",
                 keys: Sequence[str] | None = None) -> pd.DataFrame:
    """Rows of combo ``a`` and ``b`` joined on configuration ``keys`` and ``seed``.

    Returns a frame with ``keys + ["seed", a, b]`` (the two ``value`` columns named after
    the combos), sorted by keys then seed. Raises if a (keys, seed) appears twice in one
    combination, which would make the pairing ambiguous.
    """
    keys = list(keys if keys is not None else config_columns(df))
    cols = keys + ["seed"]
    out = []
    for combo in (a, b):
        part = df.loc[df["combo"] == combo, cols + [value]]
        if part.duplicated(cols).any():
            dup = part.loc[part.duplicated(cols, keep=False), cols].head(3).to_dict("records")
            raise ValueError(f"combo {combo!r}: (configuration, seed) repeated, cannot pair: {dup}")
        out.append(part.rename(columns={value: combo}))
    merged = out[0].merge(out[1], on=cols, how="inner", validate="one_to_one")
    return merged.sort_values(cols, kind="mergesort").reset_index(drop=True)


def log_ratios(x, y) -> np.ndarray:
    """Per-pair ``ln x - ln y`` with 0/0 -> 0 and c/0 -> +inf, 0/c -> -inf (c > 0)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if np.any(x < 0) or np.any(y < 0):
        raise ValueError("MSE values must be >= 0")
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.log(x) - np.log(y)
    d[(x == 0) & (y == 0)] = 0.0
    return d


def _finite_for_ranks(d: np.ndarray) -> np.ndarray:
    """Replace ±inf by ±(a value above every finite |d|): signs and ranks are unchanged."""
    d = np.asarray(d, dtype=float).copy()
    inf = ~np.isfinite(d)
    if inf.any():
        big = (np.max(np.abs(d[~inf])) if (~inf).any() else 0.0) + 1.0
        d[inf] = np.sign(d[inf]) * big
    return d


# ----------------------------------------------------------------------------- ratio + CI


def median_ratio_ci(x, y, *, n_resamples: int = 2000, confidence_level: float = 0.95,
                    method: str = "percentile", seed: int = 0) -> tuple[float, float, float]:
    """Median of the per-pair ratios x/y and its paired-bootstrap CI.

    The statistic is ``exp(median(ln x - ln y))`` (see the module docstring). The bootstrap is
    ``scipy.stats.bootstrap`` with ``paired=True`` and ``rng=np.random.default_rng(seed)``.
    Returns ``(ratio, low, high)``; the CI is NaN with fewer than 2 pairs and collapses to the
    point when every pair has the same ratio.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    d = _ranked_log_ratios(x, y)
    n = d.size
    if n == 0:
        return (math.nan, math.nan, math.nan)
    with np.errstate(over="ignore"):
        point = float(np.exp(np.median(d)))
        if n < 2:
            return (point, math.nan, math.nan)
        if np.ptp(d) == 0:
            return (point, point, point)

        def stat(xs, ys, axis=-1):
            return np.median(_ranked_log_ratios(xs, ys), axis=axis)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            res = stats.bootstrap(
                (x, y), stat, paired=True, vectorized=True, n_resamples=int(n_resamples),
                confidence_level=confidence_level, method=method,
                rng=np.random.default_rng(seed),
            )
        lo, hi = res.confidence_interval
        return (point, float(np.exp(lo)), float(np.exp(hi)))


def _ranked_log_ratios(x, y) -> np.ndarray:
    """:func:`log_ratios` with ±inf replaced by ±1e6, so medians and quantiles stay defined."""
    d = log_ratios(x, y)
    return np.where(np.isfinite(d), d, np.sign(d) * _INF_LOG)


# ----------------------------------------------------------------------------- tests


def wilcoxon_log(d) -> tuple[float, float, str]:
    """Wilcoxon signed-rank test of ``d`` (log ratios) against 0: ``(statistic, p, method)``.

    ``method`` says how scipy's ``method="auto"`` resolved: ``"exact"`` (n <= 50, no ties, no
    zeros), ``"permutation"`` (ties or zeros, n <= 13, exhaustive), ``"asymptotic"``;
    ``"all-equal"`` when every difference is 0 (p = 1); ``"n<2"`` when not computable.
    """
    d = _finite_for_ranks(np.asarray(d, dtype=float))
    n = d.size
    if n < 2:
        return (math.nan, math.nan, "n<2")
    if np.all(d == 0):
        return (0.0, 1.0, "all-equal")
    nz = d[d != 0]
    ties = np.unique(np.abs(nz)).size < nz.size
    zeros = nz.size < n
    if n <= 50 and not ties and not zeros:
        how = "exact"
    elif (ties or zeros) and n <= 13:
        how = "permutation"
    else:
        how = "asymptotic"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = stats.wilcoxon(d, method="auto")
    return (float(res.statistic), float(res.pvalue), how)


def ttest_log(d) -> tuple[float, float]:
    """Paired t-test on log MSE (mean of ``d`` against 0): ``(t, p)``; NaN if undefined."""
    d = np.asarray(d, dtype=float)
    if d.size < 2 or not np.all(np.isfinite(d)):
        return (math.nan, math.nan)
    if np.ptp(d) == 0:
        return (0.0, 1.0) if d[0] == 0 else (math.copysign(math.inf, d[0]), 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = stats.ttest_1samp(d, 0.0)
    return (float(res.statistic), float(res.pvalue))


def tost_log(d, margin_log: float, *, alpha: float = 0.05) -> dict:
    """Two one-sided t-tests that the mean log ratio lies within ``(-margin_log, margin_log)``.

    Returns ``p_lower`` (H0: mean <= -m), ``p_upper`` (H0: mean >= m), ``p_tost`` (their max),
    and the (1 - 2 alpha) CI of the mean ``ci_low, ci_high`` on the log scale: TOST rejects
    exactly when that CI lies inside the margins.
    """
    d = np.asarray(d, dtype=float)
    m = float(margin_log)
    nan = {"p_lower": math.nan, "p_upper": math.nan, "p_tost": math.nan,
           "ci_low": math.nan, "ci_high": math.nan}
    if not m > 0:
        raise ValueError(f"TOST margin must be > 0, got {margin_log!r}")
    if d.size < 2 or not np.all(np.isfinite(d)):
        return nan
    if np.ptp(d) == 0:
        inside = abs(d[0]) < m
        p = 0.0 if inside else 1.0
        return {"p_lower": 0.0 if d[0] > -m else 1.0, "p_upper": 0.0 if d[0] < m else 1.0,
                "p_tost": p, "ci_low": float(d[0]), "ci_high": float(d[0])}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lower = stats.ttest_1samp(d, -m, alternative="greater")
        upper = stats.ttest_1samp(d, m, alternative="less")
        ci = stats.ttest_1samp(d, 0.0).confidence_interval(confidence_level=1 - 2 * alpha)
    pl, pu = float(lower.pvalue), float(upper.pvalue)
    return {"p_lower": pl, "p_upper": pu, "p_tost": max(pl, pu),
            "ci_low": float(ci.low), "ci_high": float(ci.high)}


def holm(pvalues) -> np.ndarray:
    """Holm-adjusted p-values over the whole array; NaNs are left out of the family and kept."""
    from statsmodels.stats.multitest import multipletests  # lazy: statsmodels takes ~1 s to import

    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    if ok.any():
        out[ok] = multipletests(p[ok], method="holm")[1]
    return out


def paired_tests(df: pd.DataFrame, pairs: Sequence[Sequence[str]], *, value: str = "mse",
                 group_cols: Sequence[str] | None = None, margin: float = 0.10,
                 alpha: float = 0.05, n_resamples: int = 2000, confidence_level: float = 0.95,
                 boot_method: str = "percentile", seed: int = 0) -> pd.DataFrame:
    """The T1 family: one row per (configuration group, pair of combinations).

    ``df`` is a tidy table; ``pairs`` lists ``(a, b)`` combos; ratios are MSE_a / MSE_b.
    ``group_cols`` default to every configuration column that is not a combination column
    (so each Δ and sink_v_scale is its own group). Holm adjustment runs over all rows returned.
    """
    group_cols = list(group_cols if group_cols is not None else config_columns(df))
    margin_log = math.log1p(margin)
    rows = []
    present = set(df["combo"].unique())
    for a, b in pairs:
        if a not in present or b not in present:
            continue
        paired = pair_by_seed(df, a, b, value=value, keys=group_cols)
        for key, g in paired.groupby(group_cols, sort=True, dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            x = g[a].to_numpy(float)
            y = g[b].to_numpy(float)
            d = log_ratios(x, y)
            notes = []
            if np.any((x == 0) & (y == 0)):
                notes.append("some pairs both 0 (d=0)")
            if not np.all(np.isfinite(d)):
                notes.append("one side 0 in some pairs: t-test/TOST undefined")
            if d.size >= 2 and np.ptp(d[np.isfinite(d)] if np.isfinite(d).any() else d) == 0:
                notes.append("zero spread")
            ratio, lo, hi = median_ratio_ci(x, y, n_resamples=n_resamples,
                                            confidence_level=confidence_level,
                                            method=boot_method, seed=seed)
            w, pw, how = wilcoxon_log(d)
            t, pt = ttest_log(d)
            tost = tost_log(d, margin_log, alpha=alpha)
            with np.errstate(over="ignore"):
                gmean = float(np.exp(np.mean(d))) if d.size else math.nan
            rows.append({
                **dict(zip(group_cols, key)), "a": a, "b": b, "n_pairs": int(d.size),
                "median_ratio": ratio, "ci_low": lo, "ci_high": hi, "gmean_ratio": gmean,
                "wilcoxon_stat": w, "p_wilcoxon": pw, "wilcoxon_method": how,
                "t_stat": t, "p_ttest": pt,
                "tost_margin": margin, "p_tost": tost["p_tost"],
                "tost_ci_low": math.exp(tost["ci_low"]) if np.isfinite(tost["ci_low"]) else math.nan,
                "tost_ci_high": math.exp(tost["ci_high"]) if np.isfinite(tost["ci_high"]) else math.nan,
                "note": "; ".join(notes),
            })
    cols = list(group_cols) + ["a", "b", "n_pairs", "median_ratio", "ci_low", "ci_high",
                               "gmean_ratio", "wilcoxon_stat", "p_wilcoxon", "wilcoxon_method",
                               "t_stat", "p_ttest", "tost_margin", "p_tost", "tost_ci_low",
                               "tost_ci_high", "note"]
    out = pd.DataFrame(rows, columns=cols)
    out.insert(out.columns.get_loc("wilcoxon_method") + 1, "p_wilcoxon_holm", holm(out["p_wilcoxon"]))
    out.insert(out.columns.get_loc("p_ttest") + 1, "p_ttest_holm", holm(out["p_ttest"]))
    out.insert(out.columns.get_loc("p_tost") + 1, "p_tost_holm", holm(out["p_tost"]))
    out["different"] = out["p_wilcoxon_holm"] < alpha
    out["equivalent"] = out["p_tost_holm"] < alpha
    return out


# ----------------------------------------------------------------------------- summaries


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


def _crossing_rows(x: np.ndarray, y: np.ndarray, level: float) -> np.ndarray:
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
    return float(_crossing_rows(x, np.asarray(y, dtype=float)[None, :], level)[0])


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
    est = float(_crossing_rows(x, curves.mean(axis=0)[None, :], level)[0])
    n = curves.shape[0]
    if n < 2 or not np.isfinite(est):
        return (est, math.nan, math.nan)

    def stat(idx, axis=-1):
        idx = np.asarray(idx).astype(int)
        flat = idx.reshape(-1, n)
        mean = curves[flat].mean(axis=1)
        return _crossing_rows(x, mean, level).reshape(idx.shape[:-1])

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


# ----------------------------------------------------------------------------- summaries with theory
#
# These join measured tidy tables with the predictions of kernels.theory. They are what the
# stats rules write to results/stats/ and what figures, tables and verdicts read.


def _theory_ok(row) -> bool:
    """Theory applies: non-causal rows, a known FP8 format, sinks inside block 0."""
    from .formats import FORMATS

    causal = str(row.get("causal", False)).lower() in ("true", "1")
    return (not causal and row.get("fmt", "e4m3fn") in FORMATS
            and 1 <= int(row.get("ksink", 1)) <= int(row.get("block_n", 64)))


def _predict(row, deltas, method: str) -> np.ndarray:
    from . import theory

    if not _theory_ok(row):
        return np.full(np.shape(deltas), np.nan)
    return np.asarray(theory.underflow_fraction(
        np.asarray(deltas, dtype=float), float(row["scale"]), k=int(row["ksink"]),
        fmt=row.get("fmt", "e4m3fn"), sigma=float(row.get("sigma", 1.0)), order=row["order"],
        n=int(row["n"]), block_n=int(row["block_n"]), method=method), dtype=float)


def collapse_summary(df: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """Per configuration (every Δ, sink_v_scale and combination): measured vs predicted underflow.

    Columns: the configuration columns, ``combo``, ``backend`` (the backends that ran, joined by
    ``+``), ``n_seeds``, ``underflow``/``terms`` (summed over seeds), ``underflow_frac_mean``
    (the pooled fraction, what the theory predicts), ``underflow_frac_median/_lo/_hi`` (median and
    central ``level`` interval over seeds), ``underflow_sink_frac_mean``, ``mse_median/_lo/_hi``,
    ``pred_leading`` and ``pred_exact`` (kernels.theory.underflow_fraction; NaN where the theory
    does not apply, e.g. causal rows) and ``pred_expected_count`` = ``pred_exact * terms``.
    """
    keys = config_columns(df, exclude=("backend", "combo")) + ["combo"]
    g = df.groupby(keys, sort=True, dropna=False)
    out = g.agg(n_seeds=("seed", "nunique"), underflow=("underflow", "sum"),
                terms=("terms", "sum"), underflow_sink=("underflow_sink", "sum"),
                terms_sink=("terms_sink", "sum"), saturated=("saturated", "sum")).reset_index()
    out.insert(len(keys), "backend",
               g["backend"].agg(lambda s: "+".join(sorted(set(map(str, s))))).to_numpy())
    with np.errstate(invalid="ignore", divide="ignore"):
        out["underflow_frac_mean"] = out["underflow"] / out["terms"]
        out["underflow_sink_frac_mean"] = out["underflow_sink"] / out["terms_sink"]
    for value in ("underflow_frac", "mse"):
        si = seed_interval(df, keys, value, level).drop(columns=["n_seeds", f"{value}_mean"])
        out = out.merge(si, on=keys, how="left")
    out["pred_leading"] = np.nan
    out["pred_exact"] = np.nan
    theory_keys = [c for c in keys if c not in ("delta", "sink_v_scale", "combo", "experiment")]
    for _, part in out.groupby(theory_keys, sort=True, dropna=False):
        row = part.iloc[0].to_dict()
        deltas = np.unique(part["delta"].to_numpy(float))
        for method in ("leading", "exact"):
            pred = dict(zip(deltas, _predict(row, deltas, method)))
            out.loc[part.index, f"pred_{method}"] = part["delta"].map(pred).to_numpy(float)
    out["pred_expected_count"] = out["pred_exact"] * out["terms"]
    return out.reset_index(drop=True)


def scales_summary(df: pd.DataFrame, *, baseline: str = "forward S=1", level: float = 0.95,
                   n_resamples: int = 2000, confidence_level: float = 0.95,
                   boot_method: str = "percentile", seed: int = 0) -> pd.DataFrame:
    """Per (S, order, Δ, ...): theory of S, measured MSE and underflow, improvement over baseline.

    Theory columns (kernels.theory, for the row's fmt): ``bit_exact``, ``dp``, ``coverage``,
    ``saturates`` (P = 1 maps above the format's max finite value: S > max_finite).
    ``improvement`` is the paired median ratio MSE(baseline) / MSE(this row), per seed, with its
    bootstrap CI (``improvement_lo/_hi``); NaN where the baseline combination was not run.
    """
    from . import theory
    from .formats import get_format

    keys = config_columns(df, exclude=("backend", "combo")) + ["combo"]
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
    # improvement over the baseline combination, paired by seed within each configuration
    pair_keys = [c for c in keys if c not in ("order", "scale", "combo")]
    base = df[df["combo"] == baseline][pair_keys + ["seed", "mse"]].rename(columns={"mse": "_base"})
    imp = []
    for key, part in df.merge(base, on=pair_keys + ["seed"], how="inner").groupby(keys, sort=True):
        r, lo, hi = median_ratio_ci(part["_base"], part["mse"], n_resamples=n_resamples,
                                    confidence_level=confidence_level, method=boot_method,
                                    seed=seed)
        imp.append((*key, r, lo, hi))
    imp = pd.DataFrame(imp, columns=keys + ["improvement", "improvement_lo", "improvement_hi"])
    out = out.merge(imp, on=keys, how="left")
    return out.reset_index(drop=True)


def _exact_crossing(row, lo: float, hi: float, level: float) -> float:
    """Δ in [lo, hi] where the exact model's fraction equals ``level`` (NaN if not bracketed)."""
    from scipy.optimize import brentq

    f = lambda d: float(_predict(row, np.array([d]), "exact")[0]) - level  # noqa: E731
    flo, fhi = f(lo), f(hi)
    if not (flo <= 0 <= fhi):
        return math.nan
    return float(brentq(f, lo, hi, xtol=1e-6))


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
    from . import theory

    keys = [c for c in config_columns(df, exclude=("backend", "combo", "delta"))]
    rows = []
    for key, part in df.groupby(keys, sort=True, dropna=False):
        row = dict(zip(keys, key))
        wide = part.pivot_table(index="seed", columns="delta", values="underflow_frac",
                                aggfunc="first").sort_index(axis=1)
        complete = wide.dropna(axis=0, how="any")
        x = wide.columns.to_numpy(float)
        if len(x) >= 2 and len(complete):
            est, lo, hi = crossing_ci(x, complete.to_numpy(float), level, n_resamples=n_resamples,
                                      confidence_level=confidence_level, method=boot_method,
                                      seed=seed)
        else:
            est = lo = hi = math.nan
        ok = _theory_ok(row)
        k = int(row["ksink"])
        fmt = row.get("fmt", "e4m3fn")
        dk = theory.delta_k(k) if k >= 1 else math.nan
        pred = theory.critical_delta(float(row["scale"]), k=k, fmt=fmt) if ok else math.nan
        dc_exact = _exact_crossing(row, float(x.min()), float(x.max()), level) \
            if ok and len(x) >= 2 else math.nan
        rows.append({**row, "n_seeds": int(len(complete)),
                     "grid_step": float(np.min(np.diff(x))) if len(x) >= 2 else math.nan,
                     "delta_k": dk, "dc_pred": pred, "dc_exact": dc_exact, "dc_meas": est,
                     "dc_lo": lo, "dc_hi": hi, "diff": est - pred})
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
    from . import theory

    part = paired[(paired["b"] == reference) & paired["a"].str.startswith("forward ")]
    keys = [c for c in config_columns(part, exclude=("backend", "combo", "delta", "order", "scale"))]
    rows = []
    for key, g in part.groupby(keys + ["a"], sort=True, dropna=False):
        g = g.sort_values("delta")
        row = dict(zip(keys + ["a"], key))
        order, s = row["a"].split(" S=")
        x = g["delta"].to_numpy(float)
        r = g["median_ratio"].to_numpy(float)
        knee = knee_ratio(x, r, factor) if len(x) >= 2 else math.nan
        peak = int(np.nanargmax(r)) if np.isfinite(r).any() else None
        k = int(row.get("ksink", 4))
        rows.append({**{c: row[c] for c in keys}, "combo": row["a"], "order": order,
                     "scale": float(s), "reference": reference, "factor": factor, "knee": knee,
                     "peak_ratio": r[peak] if peak is not None else math.nan,
                     "peak_delta": x[peak] if peak is not None else math.nan,
                     "dc_pred": theory.critical_delta(float(s), k=k, fmt=row.get("fmt", "e4m3fn")),
                     "knee_minus_dc": knee - theory.critical_delta(float(s), k=k,
                                                                   fmt=row.get("fmt", "e4m3fn"))})
    return pd.DataFrame(rows)
