"""pcast.analysis.paired and pcast.analysis.summaries on constructed data with known answers."""

import math

import numpy as np
import pandas as pd
import pytest

from pcast.analysis import paired as S
from pcast.analysis.summaries import crossing, crossing_ci, knee_ratio, seed_interval

MARGIN = math.log(1.1)


# ---------------------------------------------------------------- Wilcoxon, exact null by hand


def test_wilcoxon_exact_value_by_hand():
    # d = 1, 2, 3, -4, 5: ranks 1..5, T- = 4 = min(T+, T-). Under H0 the 2^5 = 32 sign patterns
    # are equally likely; subsets of {1..5} with rank sum <= 4: {}, {1}, {2}, {3}, {4}, {1,2},
    # {1,3} -> 7. Two-sided p = 2 * 7 / 32.
    stat, p, how = S.wilcoxon_log([1.0, 2.0, 3.0, -4.0, 5.0])
    assert how == "exact"
    assert stat == 4.0
    assert p == pytest.approx(14 / 32, abs=1e-12)


def test_wilcoxon_all_positive_small_sample():
    # All 6 differences positive: T- = 0, only the empty subset -> p = 2 / 2^6.
    stat, p, how = S.wilcoxon_log(np.arange(1, 7) * 0.1)
    assert (stat, how) == (0.0, "exact")
    assert p == pytest.approx(2 / 64, abs=1e-12)


def test_wilcoxon_ties_use_permutation_and_all_equal_is_p1():
    _, p, how = S.wilcoxon_log([0.5, 0.5, -0.5, 1.0])
    assert how == "permutation" and 0 < p <= 1
    assert S.wilcoxon_log(np.zeros(8)) == (0.0, 1.0, "all-equal")
    assert S.wilcoxon_log([0.3])[2] == "n<2"


def test_wilcoxon_infinite_differences_are_rank_preserving():
    # one side exactly 0 -> d = +inf; its rank must just be the largest.
    d = S.log_ratios([1.0, 2.0, 3.0, 1.0, 5.0], [0.5, 1.0, 1.0, 4.0, 0.0])
    assert np.isposinf(d[-1])
    finite = d.copy()
    finite[-1] = 100.0
    assert S.wilcoxon_log(d)[:2] == S.wilcoxon_log(finite)[:2]


# ---------------------------------------------------------------- Holm


def test_holm_known_values():
    # sorted 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 -> max(0.04, 0.06) = 0.06
    adj = S.holm([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(adj, [0.03, 0.06, 0.06, 0.02])


def test_holm_keeps_nan_out_of_family():
    adj = S.holm([0.01, math.nan, 0.04])
    assert math.isnan(adj[1])
    np.testing.assert_allclose(adj[[0, 2]], [0.02, 0.04])


# ---------------------------------------------------------------- TOST


def test_tost_equal_samples_are_equivalent():
    rng = np.random.default_rng(1)
    x = rng.lognormal(size=16)
    d = S.log_ratios(x, x)
    assert S.tost_log(d, MARGIN)["p_tost"] == 0.0  # zero spread, inside the margin
    noisy = S.log_ratios(x * np.exp(rng.normal(0, 0.01, 16)), x)
    assert S.tost_log(noisy, MARGIN)["p_tost"] < 1e-6


def test_tost_shifted_samples_are_not_equivalent():
    rng = np.random.default_rng(2)
    x = rng.lognormal(size=16)
    shifted = S.log_ratios(x * 1.3 * np.exp(rng.normal(0, 0.01, 16)), x)
    res = S.tost_log(shifted, MARGIN)
    assert res["p_tost"] > 0.5
    assert res["p_lower"] < 1e-6 and res["p_upper"] > 0.5


def test_tost_absence_of_difference_is_not_equivalence():
    # Huge noise: no significant difference, and not equivalent either.
    rng = np.random.default_rng(3)
    d = rng.normal(0, 1.0, 6)
    assert S.ttest_log(d)[1] > 0.05
    assert S.tost_log(d, MARGIN)["p_tost"] > 0.05


def test_tost_matches_ci_inside_margins():
    rng = np.random.default_rng(4)
    for shift in (0.0, 0.05, 0.09, 0.12):
        d = shift + rng.normal(0, 0.03, 20)
        res = S.tost_log(d, MARGIN, alpha=0.05)
        inside = (res["ci_low"] > -MARGIN) and (res["ci_high"] < MARGIN)
        assert (res["p_tost"] < 0.05) == inside


def test_tost_constant_outside_margin_and_bad_margin():
    assert S.tost_log(np.full(5, 0.2), MARGIN)["p_tost"] == 1.0
    with pytest.raises(ValueError):
        S.tost_log(np.zeros(3), 0.0)
    assert math.isnan(S.tost_log(np.array([0.1, np.inf]), MARGIN)["p_tost"])


# ---------------------------------------------------------------- ratio and bootstrap


def test_median_ratio_known_and_symmetric():
    x = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    ratio, lo, hi = S.median_ratio_ci(3 * x, x)
    assert (ratio, lo, hi) == pytest.approx((3.0, 3.0, 3.0))
    rng = np.random.default_rng(5)
    a, b = rng.lognormal(size=16), rng.lognormal(size=16)
    r_ab = S.median_ratio_ci(a, b, seed=7)
    r_ba = S.median_ratio_ci(b, a, seed=7)
    assert r_ab[0] == pytest.approx(1 / r_ba[0])
    assert r_ab[1] <= r_ab[0] <= r_ab[2]


def test_median_ratio_ci_is_deterministic_and_covers():
    rng = np.random.default_rng(6)
    b = rng.lognormal(size=16)
    a = 5 * b * np.exp(rng.normal(0, 0.2, 16))
    r1 = S.median_ratio_ci(a, b, seed=11)
    r2 = S.median_ratio_ci(a, b, seed=11)
    assert r1 == r2
    assert r1[1] < 5 < r1[2]


def test_zero_mse_handled():
    # exact runs (MSE 0) on both sides -> ratio 1; one side 0 -> infinite ratio, no crash.
    assert S.median_ratio_ci([0.0, 0.0, 0.0], [0.0, 0.0, 0.0])[0] == 1.0
    r = S.median_ratio_ci([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    assert math.isinf(r[0])
    assert math.isnan(S.ttest_log(S.log_ratios([1.0, 2.0], [0.0, 1.0]))[1])
    with pytest.raises(ValueError):
        S.log_ratios([-1.0], [1.0])


# ---------------------------------------------------------------- the T1 family on a tidy table


def _tidy(values: dict[str, np.ndarray], deltas=(2.0, 4.0)) -> pd.DataFrame:
    rows = []
    for delta in deltas:
        for combo, mse in values.items():
            order, s = combo.split(" S=")
            for seed, m in enumerate(mse):
                rows.append({"experiment": "collapse", "seed": seed, "n": 256, "d": 64,
                             "ksink": 4, "delta": delta, "sink_v_scale": 0.0, "order": order,
                             "scale": float(s), "fmt": "e4m3fn", "combo": combo,
                             "mse": m * (1 + delta)})
    return pd.DataFrame(rows)


def test_paired_tests_family():
    rng = np.random.default_rng(8)
    base = rng.lognormal(size=16)
    df = _tidy({
        "forward S=1": 10 * base * np.exp(rng.normal(0, 0.1, 16)),
        "forward S=256": base * np.exp(rng.normal(0, 0.01, 16)),
        "reverse S=256": base,
    })
    pairs = [("forward S=1", "reverse S=256"), ("forward S=256", "reverse S=256"),
             ("reverse S=1", "reverse S=256")]  # the last combo is absent: skipped
    out = S.paired_tests(df, pairs, n_resamples=500, seed=3)
    assert len(out) == 4
    assert set(out["delta"]) == {2.0, 4.0}
    big = out[out["a"] == "forward S=1"]
    assert (big["median_ratio"].between(8, 12)).all()
    np.testing.assert_allclose(big["p_wilcoxon"], 2 / 2**16)  # all 16 positive, exact
    assert big["different"].all() and not big["equivalent"].any()
    same = out[out["a"] == "forward S=256"]
    assert same["equivalent"].all()
    # Holm over the whole family of 4
    np.testing.assert_allclose(out["p_wilcoxon_holm"], S.holm(out["p_wilcoxon"]))
    assert (out["p_tost_holm"] >= out["p_tost"]).all()


def test_paired_tests_pair_by_seed_and_reject_duplicates():
    df = _tidy({"forward S=1": np.arange(1, 6.0), "reverse S=256": np.arange(1, 6.0)})
    # drop seed 0 from one side: 4 pairs remain
    df = df[~((df["combo"] == "forward S=1") & (df["seed"] == 0))]
    out = S.paired_tests(df, [("forward S=1", "reverse S=256")], n_resamples=100)
    assert (out["n_pairs"] == 4).all()
    assert (out["median_ratio"] == 1.0).all()
    assert (out["wilcoxon_method"] == "all-equal").all()
    dup = pd.concat([df, df.head(1)])
    with pytest.raises(ValueError, match="repeated"):
        S.paired_tests(dup, [("forward S=1", "reverse S=256")])


# ---------------------------------------------------------------- crossing and knee


def test_crossing_interpolates():
    x = np.array([0.0, 1.0, 2.0, 3.0])
    assert crossing(x, [0.0, 0.2, 0.6, 0.9], 0.5) == pytest.approx(1.75)
    assert crossing(x, [0.5, 0.6, 0.7, 0.8], 0.5) == 0.0
    assert math.isnan(crossing(x, [0.6, 0.7, 0.8, 0.9], 0.5))  # not bracketed
    assert math.isnan(crossing(x, [0.0, 0.1, 0.2, 0.3], 0.5))  # never reached
    with pytest.raises(ValueError):
        crossing([1.0, 0.0], [0.0, 1.0])


def test_crossing_ci_logistic():
    from scipy.special import expit

    rng = np.random.default_rng(9)
    x = np.arange(0, 10.01, 0.25)
    curves = np.array([expit(2 * (x - 5.0 - rng.normal(0, 0.1))) for _ in range(16)])
    est, lo, hi = crossing_ci(x, curves, 0.5, n_resamples=500, seed=1)
    assert lo <= est <= hi
    assert abs(est - 5.0) < 0.1 and hi - lo < 0.2
    assert crossing_ci(x, np.tile(expit(x - 5), (4, 1)), 0.5) == pytest.approx((5.0,) * 3, abs=0.02)


def test_knee_ratio():
    x = np.array([0.0, 1.0, 2.0, 3.0])
    assert knee_ratio(x, [1.0, 1.0, 4.0, 10.0], 2.0) == pytest.approx(1.5)
    assert math.isnan(knee_ratio(x, [1.0, 1.1, 1.2, 1.3], 2.0))


def test_seed_interval():
    df = pd.DataFrame({"g": [0] * 5 + [1] * 5, "v": list(range(5)) + list(range(10, 15))})
    out = seed_interval(df, ["g"], "v", level=0.5)
    assert out["v_median"].tolist() == [2.0, 12.0]
    assert out["v_lo"].tolist() == [1.0, 11.0] and out["v_hi"].tolist() == [3.0, 13.0]
    assert out["n_seeds"].tolist() == [5, 5]
