"""Paired statistics on per-seed MSE: ratios, signed-rank and t tests, TOST, Holm.

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
  than every finite ``|d|`` (rank-preserving); the t-test and TOST are undefined (NaN) and the
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

from pcast.contract import COMBO_COLUMNS, GROUP_COLUMNS

__all__ = [
    "config_columns", "pair_by_seed", "log_ratios", "median_ratio_ci", "wilcoxon_log", "ttest_log",
    "tost_log", "holm", "paired_tests", "PAIRED_COLUMNS",
]

_INF_LOG = 1e6  # stands in for ln(0) when ranking; exp(±1e6) is inf/0 again

# The columns of paired_tests' result after the group columns (Holm columns inserted after them).
PAIRED_COLUMNS = ("a", "b", "n_pairs", "median_ratio", "ci_low", "ci_high", "gmean_ratio",
                  "wilcoxon_stat", "p_wilcoxon", "wilcoxon_method", "t_stat", "p_ttest",
                  "tost_margin", "p_tost", "tost_ci_low", "tost_ci_high", "note")


def config_columns(df: pd.DataFrame, exclude: Iterable[str] = COMBO_COLUMNS) -> list[str]:
    """Group columns (:data:`pcast.contract.GROUP_COLUMNS`) present in ``df``, less ``exclude``."""
    ex = set(exclude)
    return [c for c in GROUP_COLUMNS if c in df.columns and c not in ex]


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


# ----------------------------------------------------------------------------- the T1 family


def _notes(x: np.ndarray, y: np.ndarray, d: np.ndarray) -> str:
    """What makes a group's tests degenerate (the ``note`` column)."""
    notes = []
    if np.any((x == 0) & (y == 0)):
        notes.append("some pairs both 0 (d=0)")
    if not np.all(np.isfinite(d)):
        notes.append("one side 0 in some pairs: t-test/TOST undefined")
    if d.size >= 2 and np.ptp(d[np.isfinite(d)] if np.isfinite(d).any() else d) == 0:
        notes.append("zero spread")
    return "; ".join(notes)


def _exp_or_nan(v: float) -> float:
    return math.exp(v) if np.isfinite(v) else math.nan


def _pair_row(x: np.ndarray, y: np.ndarray, *, margin: float, alpha: float, boot: dict) -> dict:
    """Every statistic of one (group, pair): the columns of :data:`PAIRED_COLUMNS` after a, b."""
    d = log_ratios(x, y)
    ratio, lo, hi = median_ratio_ci(x, y, **boot)
    w, pw, how = wilcoxon_log(d)
    t, pt = ttest_log(d)
    tost = tost_log(d, math.log1p(margin), alpha=alpha)
    with np.errstate(over="ignore"):
        gmean = float(np.exp(np.mean(d))) if d.size else math.nan
    return {"n_pairs": int(d.size), "median_ratio": ratio, "ci_low": lo, "ci_high": hi,
            "gmean_ratio": gmean, "wilcoxon_stat": w, "p_wilcoxon": pw, "wilcoxon_method": how,
            "t_stat": t, "p_ttest": pt, "tost_margin": margin, "p_tost": tost["p_tost"],
            "tost_ci_low": _exp_or_nan(tost["ci_low"]), "tost_ci_high": _exp_or_nan(tost["ci_high"]),
            "note": _notes(x, y, d)}


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
    boot = {"n_resamples": n_resamples, "confidence_level": confidence_level,
            "method": boot_method, "seed": seed}
    rows = []
    present = set(df["combo"].unique())
    for a, b in pairs:
        if a not in present or b not in present:
            continue
        paired = pair_by_seed(df, a, b, value=value, keys=group_cols)
        for key, g in paired.groupby(group_cols, sort=True, dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            row = _pair_row(g[a].to_numpy(float), g[b].to_numpy(float), margin=margin,
                               alpha=alpha, boot=boot)
            rows.append({**dict(zip(group_cols, key)), "a": a, "b": b, **row})
    out = pd.DataFrame(rows, columns=list(group_cols) + list(PAIRED_COLUMNS))
    out.insert(out.columns.get_loc("wilcoxon_method") + 1, "p_wilcoxon_holm", holm(out["p_wilcoxon"]))
    out.insert(out.columns.get_loc("p_ttest") + 1, "p_ttest_holm", holm(out["p_ttest"]))
    out.insert(out.columns.get_loc("p_tost") + 1, "p_tost_holm", holm(out["p_tost"]))
    out["different"] = out["p_wilcoxon_holm"] < alpha
    out["equivalent"] = out["p_tost_holm"] < alpha
    return out
