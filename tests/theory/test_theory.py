"""Tests of :mod:`pcast.theory`: the published numbers, closed-form special cases, a Monte-Carlo
check of the exact integration, properties of dp / coverage / bit_exact, and a statistical
comparison with the emulator backend of :func:`pcast.attention`.

Tolerances of statistical checks are derived from the sample size (see each comment); seeds are
fixed so every run is the same.
"""

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import integrate, stats
from scipy.stats import norm

from pcast.formats import FORMATS, get_format
from pcast.models.sinks import make_inputs
from pcast.theory import (bit_exact, coverage, critical_delta, delta_k, dp, log_threshold, optimal_scale,
                            underflow_fraction)

LN2 = math.log(2.0)


# ---------------------------------------------------------------------------------------------
# Monte Carlo of the MODEL (not of the kernel): an independent check of the integration.


def simulate_underflow_fraction(delta, S, k=4, fmt="e4m3fn", sigma=1.0, order="forward", n=1024, block_n=64,
                                rows=4000, seed=0):
    """Simulate ``rows`` independent query rows of the model; return (mean fraction, its SE).

    Scores: non-sink iid N(0, sigma^2), the k sinks at positions 0..k-1 get + delta. Blocks are
    visited in ``order``; per block the running max is raised to the block max before
    p = exp(s - m) is taken; a non-sink key underflows iff p*S <= half the smallest subnormal.
    Rows are independent, so SE = sd(row fractions) / sqrt(rows).
    """
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((rows, n)) * sigma
    s[:, :k] += delta
    thr = get_format(fmt).underflow_threshold
    nblk = -(-n // block_n)
    visit = range(nblk) if order == "forward" else range(nblk - 1, -1, -1)
    m = np.full(rows, -np.inf)
    under = np.zeros(rows)
    for j in visit:
        lo, hi = j * block_n, min((j + 1) * block_n, n)
        blk = s[:, lo:hi]
        m = np.maximum(m, blk.max(axis=1))
        u = np.exp(blk - m[:, None]) * S <= thr
        first_nonsink = max(k - lo, 0)
        under += u[:, first_nonsink:].sum(axis=1)
    frac = under / (n - k)
    return frac.mean(), frac.std(ddof=1) / math.sqrt(rows)


def sink_max_average(delta, S, k=4, fmt="e4m3fn"):
    """E over the sink max M_k of Phi(delta + M_k - c): keys meet the sink max and nothing else.

    Written with the density of the max, k phi(m) Phi(m)^(k-1), unlike the implementation
    (which integrates a survival function over the key's own score)."""
    c = log_threshold(fmt) + math.log(S)
    f = lambda m: k * norm.pdf(m) * norm.cdf(m) ** (k - 1) * norm.cdf(delta + m - c)  # noqa: E731
    return integrate.quad(f, -12, 12, limit=200)[0]


# ---------------------------------------------------------------------------------------------
# published numbers


@pytest.mark.parametrize("k,expected", [(1, 0.0), (2, 0.5642), (4, 1.0294), (8, 1.4236), (16, 1.7660)])
def test_delta_k_values(k, expected):
    assert abs(delta_k(k) - expected) < 1e-4


def test_delta_k_closed_forms():
    # E max of 2 and 3 standard normals: 1/sqrt(pi) and 3/(2 sqrt(pi)).
    assert abs(delta_k(2) - 1 / math.sqrt(math.pi)) < 1e-10
    assert abs(delta_k(3) - 1.5 / math.sqrt(math.pi)) < 1e-10
    # grows like sqrt(2 ln k): strictly increasing and about 3.24 at k = 1000
    vals = [delta_k(k) for k in (1, 2, 5, 10, 100, 1000, 10**6)]
    assert all(a < b for a, b in zip(vals, vals[1:]))
    assert 3.2 < delta_k(1000) < 3.3


@pytest.mark.parametrize("fmt,mult", [("e4m3fn", 10), ("e5m2", 17), ("e4m3fnuz", 11), ("e5m2fnuz", 18)])
def test_log_threshold(fmt, mult):
    assert log_threshold(fmt) == pytest.approx(mult * LN2, abs=1e-12)
    # half the smallest subnormal rounds to zero: it is the threshold itself
    f = get_format(fmt)
    assert math.exp(-log_threshold(fmt)) == pytest.approx(f.min_subnormal / 2, rel=1e-12)


def test_log_threshold_e4m3fn_is_6_93():
    assert abs(log_threshold() - 6.93) < 0.005


def test_critical_delta():
    assert abs(critical_delta(1) - 5.902) < 1e-3
    assert abs(critical_delta(256) - 11.447) < 1e-3
    assert critical_delta(256) - critical_delta(1) == pytest.approx(8 * LN2, abs=1e-12)
    assert critical_delta(1, k=1) == pytest.approx(10 * LN2, abs=1e-12)
    assert critical_delta(1, k=16, fmt="e5m2") == pytest.approx(17 * LN2 - 1.7660, abs=1e-4)


def test_dp_values():
    assert dp(255) == 16 / 255
    assert dp(256) == 2.0**-4
    assert dp(300) == 32 / 300
    assert dp(448) == 32 / 448
    assert dp(1) == 2.0**-4 and dp(1.5) == 0.125 / 1.5
    # beyond max_finite: the top binade's spacing (32)
    assert dp(500) == 32 / 500 and dp(4096) == 32 / 4096
    # below the normal range: the subnormal step 2^-9
    assert dp(2.0**-6) == 2.0**-9 / 2.0**-6 and dp(2.0**-8) == 2.0**-9 / 2.0**-8
    # other formats: the envelope is 2^-(man_bits + 1)
    assert dp(1024, "e5m2") == 2.0**-3 and dp(1000, "e5m2") == 2.0**(9 - 2) / 1000
    assert dp(128, "e4m3fnuz") == 2.0**-4 and dp(200, "e4m3fnuz") == 16 / 200


def test_dp_vectorised():
    S = np.array([[255.0, 256.0], [300.0, 448.0]])
    out = dp(S)
    assert out.shape == (2, 2)
    assert np.array_equal(out, np.array([[16 / 255, 2.0**-4], [32 / 300, 32 / 448]]))


def test_coverage_values():
    assert coverage(256) == pytest.approx(14.0, abs=1e-12)
    assert coverage(1) == pytest.approx(6.0, abs=1e-12)
    assert coverage(448) == pytest.approx(6 + math.log2(448), abs=1e-12)
    assert coverage(448) > coverage(256)  # C3: the non-bit-exact 448 covers slightly more
    assert coverage(10_000) == coverage(448)  # saturates beyond max finite
    assert coverage(2.0**-6) == 0.0 and coverage(2.0**-9) == 0.0
    assert coverage(256, "e4m3fnuz") == pytest.approx(math.log2(240 / 2.0**-7), abs=1e-12)
    assert coverage(2.0**15, "e5m2") == pytest.approx(15 + 14, abs=1e-12)


def test_optimal_scale():
    assert optimal_scale("e4m3fn") == 256.0
    assert optimal_scale("e5m2") == 32768.0
    assert optimal_scale("e4m3fnuz") == 128.0
    assert optimal_scale("e5m2fnuz") == 32768.0
    for name in FORMATS:
        s = optimal_scale(name)
        f = get_format(name)
        assert bit_exact(s) and s <= f.max_finite < 2 * s


@pytest.mark.parametrize("name", list(FORMATS))
def test_optimal_scale_is_best_bit_exact_scale(name):
    # C3 for every format: among bit-exact scales up to max_finite, the optimal one has the most
    # coverage and sits on the dp lower envelope.
    f = get_format(name)
    s_opt = optimal_scale(name)
    pows = [2.0**j for j in range(-3, 20) if 2.0**j <= f.max_finite]
    assert max(pows, key=lambda s: coverage(s, name)) == s_opt
    assert dp(s_opt, name) == 2.0 ** -(f.man_bits + 1)


def test_bit_exact_values():
    for j in range(-20, 31):
        assert bit_exact(2.0**j)
    for s in (448, 100, 300, 384, 255, 3, 0.1, 257):
        assert not bit_exact(s)


@pytest.mark.parametrize("S", [1.0, 2.0, 64.0, 256.0, 2.0**-5, 448.0, 100.0, 300.0, 384.0, 255.0, 3.0])
def test_bit_exact_matches_float32_arithmetic(S):
    # Independent check: multiply 200k random float32 P in (0, 1] (plus 1 - 2^-24) by S in float32
    # and compare with the exact (float64) product; every such product of two 24-bit
    # significands fits in float64's 53 bits, so float64 is the exact result.
    rng = np.random.default_rng(1)
    P = rng.random(200_000).astype(np.float32)
    P = np.concatenate([P[P > 0], np.float32([1.0, 1.0 - 2.0**-24])])
    prod32 = (P * np.float32(S)).astype(np.float64)
    exact = P.astype(np.float64) * S
    assert bit_exact(S) == bool(np.all(prod32 == exact))


# ---------------------------------------------------------------------------------------------
# properties of dp and coverage


POW2_IN_RANGE = [2.0**j for j in range(0, 9)]  # 1 .. 256


def test_dp_dense_lower_envelope_only_at_powers_of_two():
    S = np.unique(np.concatenate([np.linspace(1.0, 448.0, 200_001), POW2_IN_RANGE,
                                  np.nextafter(POW2_IN_RANGE, np.inf), np.nextafter(POW2_IN_RANGE, 0)]))
    S = S[(S >= 1.0) & (S <= 448.0)]
    vals = dp(S)
    assert np.all(vals >= 2.0**-4)
    at_min = S[vals == 2.0**-4]
    assert sorted(at_min.tolist()) == POW2_IN_RANGE
    # sawtooth: just above a power of two the relative step jumps to ~2^-3
    for s in POW2_IN_RANGE[:-1]:
        assert dp(float(np.nextafter(s, np.inf))) == pytest.approx(2.0**-3, rel=1e-12)


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=1.0, max_value=448.0, allow_nan=False, allow_infinity=False))
def test_dp_property(S):
    v = dp(S)
    assert 2.0**-4 <= v <= 2.0**-3
    is_pow2 = math.frexp(S)[0] == 0.5
    assert (v == 2.0**-4) == is_pow2
    assert (v == 2.0**-4) == bit_exact(S)


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=2.0**-6, max_value=448.0), st.floats(min_value=2.0**-6, max_value=448.0))
@example(448.0, 447.99999999999994)  # adjacent doubles: their log2 differ by less than one ulp of 14.8
def test_coverage_monotone_up_to_max(a, b):
    lo, hi = min(a, b), max(a, b)
    # In float64, log2 cannot separate S values closer than about one ulp of the result (2^-49
    # near 14.8, i.e. a relative step in S of ~1e-15): there coverage is only non-decreasing.
    assert coverage(lo) <= coverage(hi)
    if hi > lo * (1 + 1e-12):
        assert coverage(lo) < coverage(hi)
    assert coverage(hi) == pytest.approx(6 + math.log2(hi), abs=1e-12)


def test_coverage_dense_monotone_and_flat_beyond_max():
    S = np.linspace(2.0**-6, 448.0, 50_001)
    c = coverage(S)
    assert np.all(np.diff(c) > 0)
    beyond = coverage(np.linspace(448.0, 1e6, 1001))
    assert np.all(beyond == coverage(448.0))


# ---------------------------------------------------------------------------------------------
# underflow_fraction


@pytest.mark.parametrize("delta,expected", [(5.0, 0.184), (6.0, 0.539), (7.0, 0.864)])
def test_leading_forward_values(delta, expected):
    assert abs(underflow_fraction(delta, 1.0, method="leading") - expected) < 1e-3


def test_leading_formula_and_reverse_factor():
    for delta, S, k, sigma, fmt in [(5.0, 1.0, 4, 1.0, "e4m3fn"), (12.0, 256.0, 8, 1.5, "e4m3fn"),
                                    (14.0, 4.0, 2, 0.8, "e5m2")]:
        arg = (delta + sigma * delta_k(k) - log_threshold(fmt) - math.log(S)) / sigma
        fwd = underflow_fraction(delta, S, k=k, fmt=fmt, sigma=sigma, method="leading")
        assert fwd == pytest.approx(norm.cdf(arg), rel=1e-12)
        rev = underflow_fraction(delta, S, k=k, fmt=fmt, sigma=sigma, order="reverse", method="leading")
        assert rev == pytest.approx((64 - k) / (1024 - k) * norm.cdf(arg), rel=1e-12)
    # one block only: reverse is forward
    assert underflow_fraction(6.0, 1.0, n=64, order="reverse", method="leading") == pytest.approx(
        underflow_fraction(6.0, 1.0, n=64, method="leading"))


@pytest.mark.parametrize("delta,reference", [(5.0, 0.229), (6.0, 0.529), (7.0, 0.816)])
def test_exact_forward_vs_sink_max_average(delta, reference):
    # The team's "Phi averaged over the sink maximum" numbers. The exact answer can only be
    # larger (the running max is at least the sink max), and at these Δ the non-sink keys
    # (max ~3.2 over 1020 keys, far below Δ + M_4) add almost nothing.
    avg = sink_max_average(delta, 1.0)
    assert abs(avg - reference) < 1e-3
    ex = underflow_fraction(delta, 1.0, method="exact")
    assert avg <= ex <= avg + 2e-3


@pytest.mark.parametrize("x", [-15.0, -8.0, -3.0, 0.0, 2.5, 8.0])
@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_exact_closed_form_one_sink_one_key(x, order):
    # n = 2, k = 1: the non-sink key underflows iff X <= Δ + Z - c, X, Z iid N(0, sigma^2):
    # P = Phi((Δ - c) / (sigma sqrt 2)), for every Δ, down to 1e-26 (relative accuracy).
    sigma = 1.3
    c = log_threshold() + math.log(2.0)
    delta = c + x * sigma * math.sqrt(2)
    got = underflow_fraction(delta, 2.0, k=1, sigma=sigma, n=2, block_n=16, order=order, method="exact")
    assert got == pytest.approx(norm.cdf(x), rel=1e-8, abs=1e-300)


def test_exact_closed_form_no_sink_two_keys():
    # k = 0, two non-sink keys in one block: each underflows iff X <= X' - c: Phi(-c / (sigma sqrt 2)).
    c = log_threshold("e5m2") + math.log(0.5)
    got = underflow_fraction(0.0, 0.5, k=0, fmt="e5m2", n=2, block_n=2, method="exact")
    assert got == pytest.approx(norm.cdf(-c / math.sqrt(2)), rel=1e-8)


MC_CASES = [
    # (delta, S, k, fmt, sigma, order, n, block_n)
    (5.0, 1.0, 4, "e4m3fn", 1.0, "forward", 1024, 64),
    (7.0, 1.0, 4, "e4m3fn", 1.0, "forward", 1024, 64),
    (4.0, 1.0, 4, "e4m3fn", 1.0, "reverse", 1024, 64),  # mostly the Δ-free rate of the early blocks
    (8.0, 1.0, 4, "e4m3fn", 1.0, "reverse", 1024, 64),
    (12.0, 256.0, 4, "e4m3fn", 1.0, "reverse", 1024, 64),
    (9.0, 256.0, 4, "e4m3fn", 1.0, "reverse", 1024, 64),
    (10.0, 16.0, 1, "e4m3fn", 1.5, "forward", 1000, 64),  # ragged last block, one sink
    (6.0, 1.0, 16, "e4m3fn", 0.7, "forward", 300, 32),
    (14.0, 1.0, 4, "e5m2", 1.0, "forward", 512, 128),
    (0.0, 1.0, 4, "e4m3fn", 2.0, "forward", 1024, 64),  # no sink effect: the non-sink maxima alone
    (0.0, 1.0, 4, "e4m3fn", 1.0, "reverse", 1024, 64),  # the Δ-free rate ~1.9e-4 of the early blocks
    (7.0, 1.0, 4, "e4m3fn", 1.0, "forward", 1000, 96),  # tiles no power of two: decode 96, FA3's 160, prefill 192
    (8.0, 1.0, 4, "e4m3fn", 1.0, "reverse", 1000, 160),
    (9.0, 256.0, 4, "e4m3fn", 1.0, "reverse", 1000, 192),
]


@pytest.mark.parametrize("case", MC_CASES, ids=lambda c: f"{c[5]}-d{c[0]}-S{c[1]:g}-k{c[2]}-{c[3]}-s{c[4]}-n{c[6]}")
def test_exact_matches_monte_carlo(case):
    delta, S, k, fmt, sigma, order, n, block_n = case
    ex = underflow_fraction(delta, S, k=k, fmt=fmt, sigma=sigma, order=order, n=n, block_n=block_n,
                            method="exact")
    mc, se = simulate_underflow_fraction(delta, S, k=k, fmt=fmt, sigma=sigma, order=order, n=n,
                                         block_n=block_n, rows=4000, seed=17)
    # 4000 independent rows: the row-mean is close to normal; 5 SE (plus 1e-12 for a zero SE).
    assert abs(mc - ex) <= 5 * se + 1e-12, (mc, ex, se)
    assert se < 0.01  # the check has teeth: the SE is small against the fractions compared


def test_exact_limits_and_monotonicity():
    deltas = np.linspace(0, 30, 31)
    fwd = underflow_fraction(deltas, 1.0, method="exact")
    assert isinstance(fwd, np.ndarray) and fwd.shape == deltas.shape
    assert np.all(np.diff(fwd) >= 0) and fwd[-1] > 1 - 1e-9
    # vectorised result equals the scalar calls
    assert fwd[5] == underflow_fraction(5.0, 1.0, method="exact")
    # larger S, less underflow
    assert underflow_fraction(8.0, 256.0, method="exact") < underflow_fraction(8.0, 16.0, method="exact") < fwd[8]
    # reverse: once Δ is huge, exactly the sink block's 60 non-sink keys of 1020, plus the Δ-free rest
    rev = underflow_fraction(30.0, 256.0, order="reverse", method="exact")
    assert rev == pytest.approx(60 / 1020, rel=1e-9)
    rev1 = underflow_fraction(30.0, 1.0, order="reverse", method="exact")
    free = underflow_fraction(0.0, 1.0, k=0, order="reverse", method="exact", n=1020)  # no sinks at all
    assert 60 / 1020 < rev1 < 60 / 1020 + free
    # S below the underflow threshold: everything rounds to zero
    assert underflow_fraction(3.0, 2.0**-11, method="exact") == 1.0
    assert underflow_fraction(3.0, 2.0**-10, method="leading") == 1.0


@pytest.mark.parametrize("kwargs,argname", [
    (dict(method="mean"), "method"),
    (dict(order="backward"), "order"),
    (dict(scale=0.0), "scale"),
    (dict(scale=float("inf")), "scale"),
    (dict(sigma=-1.0), "sigma"),
    (dict(n=1), "n"),
    (dict(block_n=0), "block_n"),
    (dict(k=65), "k"),
    (dict(k=1024), "k"),
    (dict(k=0, method="leading"), "k"),
    (dict(k=2.5), "k"),
    (dict(delta=float("nan")), "delta"),
    (dict(delta=[1.0, float("inf")]), "delta"),
    (dict(delta="x"), "delta"),
    (dict(fmt="e3m4"), "fmt"),
])
def test_underflow_fraction_value_errors(kwargs, argname):
    kw = dict(delta=6.0, scale=1.0)
    kw.update(kwargs)
    with pytest.raises(ValueError, match=argname):
        underflow_fraction(**kw)


@pytest.mark.parametrize("call,argname", [
    (lambda: delta_k(0), "k"),
    (lambda: delta_k(2.0), "k"),
    (lambda: delta_k(True), "k"),
    (lambda: critical_delta(0.0), "scale"),
    (lambda: critical_delta(-1.0), "scale"),
    (lambda: critical_delta(1.0, fmt="fp8"), "fmt"),
    (lambda: log_threshold("bf16"), "fmt"),
    (lambda: dp(0.0), "scale"),
    (lambda: dp(float("nan")), "scale"),
    (lambda: dp([1.0, -2.0]), "scale"),
    (lambda: dp(float("inf")), "scale"),
    (lambda: coverage(-3.0), "scale"),
    (lambda: coverage(float("inf")), "scale"),
    (lambda: bit_exact(0.0), "scale"),
    (lambda: bit_exact(float("nan")), "scale"),
    (lambda: optimal_scale("e4m3"), "fmt"),
])
def test_value_errors(call, argname):
    with pytest.raises(ValueError, match=argname):
        call()


# ---------------------------------------------------------------------------------------------
# Statistical comparison with the emulator of the kernel contract.
#
# Independent units: (seed, head) slices. Rows of one slice share the keys, so they are not
# independent; slices are. The measured fraction is the mean of the U unit fractions (every row
# has the same number of non-sink terms), and its SE is sd(unit fractions) / sqrt(U). Each
# row's expected fraction is exactly the model's (the generator makes a fixed query's scores iid
# over keys), so the mean of the units is an unbiased estimate of method="exact".


def run_emulator(delta, *, order, S, seeds, heads, n=1024):
    units = []
    for seed in seeds:
        q, k, v = make_inputs(seed, heads=heads, n=n, d=64, ksink=4, delta=float(delta))
        r = kernels_attention(q, k, v, order=order, scale=S, fmt="e4m3fn", ksink=4, block_n=64,
                              backend="emulator")
        assert r.backend == "emulator"
        terms = r.terms[0].sum(-1).numpy()
        assert np.all(r.terms[0].numpy() == n - 4)  # every non-sink key has p > 0 in float32
        units.extend((r.underflow[0].sum(-1).numpy() / terms).tolist())
    return np.array(units)


def kernels_attention(*args, **kwargs):
    import pcast

    return pcast.attention(*args, **kwargs)


# t quantile for a two-sided false-alarm rate of 1e-4 with U - 1 degrees of freedom
def t_crit(U):
    return stats.t.ppf(1 - 1e-4 / 2, U - 1)


@pytest.mark.parametrize("delta", [5.0, 6.0, 7.0, 8.0])
def test_emulator_forward_S1_matches_exact(delta, one_thread):
    units = run_emulator(delta, order="forward", S=1.0, seeds=(0, 1, 2, 3), heads=8)  # U = 32, N = 1024
    U = units.size
    measured, se = units.mean(), units.std(ddof=1) / math.sqrt(U)
    ex = underflow_fraction(delta, 1.0, method="exact")
    assert abs(measured - ex) < 0.03, (measured, ex)
    assert abs(measured - ex) <= t_crit(U) * se, (measured, ex, se)


def test_emulator_reverse_S256_zero_at_moderate_delta(one_thread):
    # The exact prediction times the number of sampled non-sink terms is the expected number of
    # underflows E; P(count > 0) <= E (Markov). We check E is below 1e-2 in total, so a wrong
    # non-zero count is what the test catches, not chance. (At Δ = 6 E is no longer small:
    # 5.4e-7 of all terms, ~0.6 underflows per 1024-row head, so it is not in this list.)
    n, seeds, heads = 1024, (0, 1), 4
    total_terms = len(seeds) * heads * n * (n - 4)
    expected = 0.0
    for delta in (0.0, 2.0, 4.0):
        expected += underflow_fraction(delta, 256.0, order="reverse", method="exact") * total_terms
        units = run_emulator(delta, order="reverse", S=256.0, seeds=seeds, heads=heads, n=n)
        assert np.all(units == 0.0), (delta, units)
    assert expected < 1e-2


@pytest.mark.parametrize("delta", [8.0, 10.0, 12.0])
def test_emulator_reverse_S256_residual_matches_exact(delta, one_thread):
    seeds, heads, n = (0, 1, 2, 3), 8, 1024
    units = run_emulator(delta, order="reverse", S=256.0, seeds=seeds, heads=heads, n=n)
    U = units.size
    ex = underflow_fraction(delta, 256.0, order="reverse", method="exact")
    measured = units.mean()
    # Two standard errors; the larger one is used:
    # * between units: sd(unit fractions) / sqrt(U);
    # * binomial floor from the number of sink-block keys sampled, m = U * n * 60: the
    #   sink-block rate is p = ex * 1020 / 60, and if the m keys were independent the fraction's
    #   SE would be (60/1020) sqrt(p (1 - p) / m). Correlation only inflates it.
    m = U * n * 60
    p = ex * (n - 4) / 60
    se_binom = (60 / (n - 4)) * math.sqrt(p * (1 - p) / m)
    se = max(units.std(ddof=1) / math.sqrt(U), se_binom)
    assert abs(measured - ex) <= t_crit(U) * se, (measured, ex, se)
    # and the residual is the sink block's: it never exceeds its 60 of 1020 keys
    assert measured <= 60 / (n - 4)


def test_S_is_a_deprecated_alias_of_scale():
    """One name for S everywhere (pcast.attention, Policy, pcast-audit: scale); theory's old S= still works."""
    import warnings

    from pcast.theory.lazy import saturation_fraction
    from pcast.theory.policy import max_safe_tau

    for fn, args, kw in ((critical_delta, (), dict(k=4)), (underflow_fraction, (6.0,), {}), (max_safe_tau, (), {}),
                         (saturation_fraction, (8.0,), {})):
        new = fn(*args, scale=256.0, **kw)
        with pytest.warns(DeprecationWarning, match=rf"{fn.__name__}\(S=...\) is deprecated; pass scale="):
            old = fn(*args, S=256.0, **kw)
        assert np.all(old == new)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert np.all(fn(*args, 256.0, **kw) == new)  # positional: no warning
        with pytest.raises(TypeError, match="both scale= and its deprecated alias S="):
            fn(*args, S=1.0, scale=1.0, **kw)
