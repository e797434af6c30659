"""Closed-form and numerically exact predictions for the P cast in FP8 attention.

Model (one query row, the contract of :func:`pcast.attention`): scores of the ``n - k``
non-sink keys are iid ``N(0, sigma^2)``; the ``k`` sink keys sit at positions ``0 .. k-1`` (all in
KV block 0, which needs ``k <= block_n``) with scores ``delta + N(0, sigma^2)``. Keys are visited
in blocks of ``block_n``; for each block the running max ``m`` is first raised to the block's max,
then ``p = exp(s - m)`` is taken, scaled by ``S`` and rounded to the FP8 grid. ``p*S`` becomes 0
iff ``p*S <= u_f``, where ``u_f`` = half the smallest subnormal (the tie rounds to even = 0), i.e.
iff ``s <= m - c`` with ``c = log_threshold(fmt) + ln S``.

Everything here is a float computation with :mod:`scipy` (``scipy.stats.norm``,
``scipy.integrate.quad``); nothing needs torch.
"""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np
from scipy import integrate, optimize, special
from scipy.stats import norm

from pcast.contract import ORDERS, scale_keyword
from pcast.formats import FP8Format, get_format

__all__ = ["delta_k", "log_threshold", "critical_delta", "underflow_fraction", "dp", "coverage",
           "bit_exact", "optimal_scale", "ORDERS", "METHODS"]

METHODS = ("leading", "exact")

# |z| beyond this carries less than phi(40) ~ 1e-348 (0 in float64) of any integrand below.
ZLIM = 40.0
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)

# Inside quad the integrands are called hundreds of times per integral, and the scalar
# scipy.stats.norm methods cost ~30 us a call, so the integrands use the same functions
# norm uses underneath: log Phi = scipy.special.log_ndtr, and log phi(z) = -z^2/2 - ln sqrt(2 pi).
log_Phi = special.log_ndtr


def log_phi(z: float) -> float:
    return -0.5 * z * z - _LOG_SQRT_2PI


# ---------------------------------------------------------------------------------------------
# argument checks


def int_arg(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name}={value!r} is not allowed; allowed: an integer >= {minimum}")
    return int(value)


def pos_real(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}={value!r} is not allowed; allowed: a finite real number > 0")
    return float(value)


def real_array(value, name: str, *, positive: bool = False) -> np.ndarray:
    """A finite scalar or array-like (non-empty and > 0 when ``positive``), as a float64 array."""
    allowed = "finite real number(s)" + (" > 0" if positive else "")
    try:
        if isinstance(value, (bool, np.bool_)):
            raise TypeError
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is not allowed; allowed: {allowed}") from None
    if not np.all(np.isfinite(arr)) or (positive and (arr.size == 0 or not np.all(arr > 0))):
        raise ValueError(f"{name}={value!r} is not allowed; allowed: {allowed}")
    return arr


def fmt_arg(fmt) -> FP8Format:
    return get_format(fmt, argname="fmt")


# ---------------------------------------------------------------------------------------------
# delta_k, thresholds


@functools.lru_cache(maxsize=None)
def _delta_k_cached(k: int) -> float:
    logk = math.log(k)

    def integrand(x: float) -> float:
        # x * k * phi(x) * Phi(x)^(k-1), evaluated in log space so large k cannot underflow early
        return x * math.exp(logk + log_phi(x) + (k - 1) * log_Phi(x))

    peak = float(norm.ppf(1.0 - 1.0 / (k + 1.0)))  # near the mode of the max's density
    points = sorted({0.0, peak - 1.0, peak, peak + 1.0})
    val, _ = integrate.quad(integrand, -ZLIM, ZLIM, points=points, limit=400, epsabs=1e-14, epsrel=1e-12)
    return float(val)


def delta_k(k: int) -> float:
    """E[max of k iid N(0,1)], by ``scipy.integrate.quad`` of ``x k phi(x) Phi(x)^(k-1)``.

    delta_1 = 0, delta_2 = 0.5642 (= 1/sqrt(pi)), delta_4 = 1.0294, delta_8 = 1.4236, delta_16 = 1.7660.

    Raises:
        ValueError: unless k is an integer >= 1.
    """
    return _delta_k_cached(int_arg(k, "k", 1))


def log_threshold(fmt: str | FP8Format = "e4m3fn") -> float:
    """``ln(1/u_f)`` with ``u_f`` half the smallest subnormal of ``fmt`` (values <= u_f round to 0).

    e4m3fn: 10 ln 2 = 6.931; e5m2: 17 ln 2; e4m3fnuz: 11 ln 2; e5m2fnuz: 18 ln 2.
    """
    return fmt_arg(fmt).log_threshold


@scale_keyword
def critical_delta(scale: float, k: int = 4, fmt: str | FP8Format = "e4m3fn") -> float:
    """The sink strength at which half the non-sink P values underflow, to leading order:
    ``Δc = log_threshold(fmt) + ln S - delta_k(k)`` (in units of sigma = 1).

    e4m3fn, k = 4: S = 1 gives 5.902, S = 256 gives 11.447.
    """
    S = pos_real(scale, "scale")
    return log_threshold(fmt) + math.log(S) - delta_k(k)


# ---------------------------------------------------------------------------------------------
# underflow fraction


@functools.lru_cache(maxsize=65536)
def p_under(u: float, D: float, k: int, r: int) -> float:
    """P(Z0 <= max(D + max_{i<k} Z_i, max_{j<r} Z'_j) - u) for iid N(0,1) Z0, Z_i, Z'_j.

    This is the probability that one non-sink key (score sigma*Z0) underflows when the running
    max it meets is the max of k sinks (sigma*(D + Z_i)) and r other non-sink keys, with
    u = c/sigma. Since u > 0, a key that is itself the max gives p = 1 and never underflows, so
    the event is exactly ``Z0 <= W - u`` with W the max of the *other* keys, independent of Z0:

        P = int phi(z) [1 - F_W(z + u)] dz,  F_W(w) = Phi(w - D)^k Phi(w)^r,

    with ``1 - F_W`` computed as ``-expm1(k log Phi + r log Phi)`` (no cancellation, so tiny
    probabilities such as 1e-20 keep their relative accuracy).
    """
    if k == 0 and r == 0:
        return 0.0

    def log_fw(z: float) -> float:
        out = 0.0
        if k:
            out += k * log_Phi(z + u - D)
        if r:
            out += r * log_Phi(z + u)
        return out

    def integrand(z: float) -> float:
        return math.exp(log_phi(z)) * -math.expm1(log_fw(z))

    # Where 1 - F_W drops from 1 to 0: F_W(z + u) = 1/2. Put quadrature break points around it.
    g = lambda z: log_fw(z) + math.log(2.0)  # noqa: E731 (increasing in z)
    if g(-ZLIM) >= 0:
        zt = -ZLIM
    elif g(ZLIM) <= 0:
        zt = ZLIM
    else:
        zt = optimize.brentq(g, -ZLIM, ZLIM, xtol=1e-10)
    points = sorted({min(max(zt + off, -ZLIM + 1e-9), ZLIM - 1e-9) for off in (-6.0, -2.0, -0.5, 0.0, 0.5, 2.0)}
                    | {0.0})
    val, _ = integrate.quad(integrand, -ZLIM, ZLIM, points=points, limit=400, epsabs=0.0, epsrel=1e-10)
    return min(max(float(val), 0.0), 1.0)


def _blocks(n: int, block_n: int, k: int, order: str):
    """(number of non-sink keys, k sinks seen, r other non-sinks seen) for each block."""
    nblk = -(-n // block_n)
    out = []
    for j in range(nblk):
        lo, hi = j * block_n, min((j + 1) * block_n, n)
        count = hi - max(lo, k)
        if count <= 0:
            continue
        if order == "forward":  # blocks 0..j visited: the sinks plus every non-sink key before hi
            out.append((count, k, hi - k - 1))
        elif j == 0:  # reverse, the sink block is visited last: it sees everything
            out.append((count, k, n - k - 1))
        else:  # reverse, block j sees only blocks j..nblk-1, all non-sink
            out.append((count, 0, n - lo - 1))
    return out


@scale_keyword
def underflow_fraction(delta, scale: float, k: int = 4, fmt: str | FP8Format = "e4m3fn", sigma: float = 1.0,
                       order: str = "forward", n: int = 1024, block_n: int = 64, method: str = "leading"):
    """Expected fraction of the NON-SINK P values of one query row that round to zero.

    The model is the module's (non-sink scores iid ``N(0, sigma^2)``, ``k`` sinks at positions
    ``0..k-1`` with scores ``delta + N(0, sigma^2)``, ``c = log_threshold(fmt) + ln S``), in the
    kernel's block contract. ``k`` is both the number of sink keys and the ``k`` of ``delta_k``.

    method="leading":
        forward: ``Phi((delta + sigma*delta_k(k) - c) / sigma)``: every non-sink key meets the
        sink max, replaced by its mean ``delta + sigma*delta_k``, and nothing else.
        reverse: only the non-sink keys of the sink block (visited last) meet the sinks, so
        ``(min(block_n, n) - k) / (n - k) * Phi(same argument)``; the other blocks are taken to
        give 0 (their true, Δ-free rate, ~1e-4 at S = 1, is in the exact method).
    method="exact":
        the expectation of the fraction under the model, by numerical integration, with no
        approximation beyond quadrature error (relative 1e-10). A non-sink key in block j
        underflows iff its score is <= ``W - c`` where W is the max of the *other* keys it has
        met: in forward order the k sinks and every other non-sink key of blocks 0..j; in reverse
        order, for j >= 1, only the non-sink keys of blocks j..last, and for the sink block all
        keys; :func:`_exact_fraction` integrates that per block. The fraction's expectation is
        what this returns; the realised fraction of one row scatters around it.

    If ``S <= u_f`` (``c <= 0``) every p*S <= u_f and the answer is 1 for either method.

    Args:
        delta: sink strength Δ: a real number or an array-like of them (the result has its shape).
        S: the scale applied to P before the cast, > 0.
        k: number of sink keys (>= 1 for "leading"; 0 allowed for "exact"), ``k <= block_n``, ``k < n``.
        fmt: FP8 format name.
        sigma: score standard deviation, > 0.
        order: "forward" (sink block first) or "reverse" (sink block last).
        n: number of keys; block_n: keys per KV block.
        method: "leading" or "exact".

    Returns:
        a float, or a float64 ndarray shaped like ``delta``.

    Raises:
        ValueError: naming the argument and what is allowed.
    """
    S = scale  # the S of the formulas
    f, S, sigma, n, block_n, k, d_arr = _underflow_args(delta, S, k, fmt, sigma, order, n, block_n, method)
    c = f.log_threshold + math.log(S)
    if c <= 0:
        res = np.ones_like(d_arr)
    elif method == "leading":
        res = norm.cdf((d_arr + sigma * delta_k(k) - c) / sigma)
        if order == "reverse":
            res = res * ((min(block_n, n) - k) / (n - k))
    else:
        res = _exact_fraction(d_arr, c / sigma, sigma, n, block_n, k, order)
    return float(res) if res.ndim == 0 else res


def _underflow_args(delta, S, k, fmt, sigma, order, n, block_n, method):
    """Check :func:`underflow_fraction`'s arguments; return (format, S, sigma, n, block_n, k, delta array)."""
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not allowed; allowed: {', '.join(METHODS)}")
    if order not in ORDERS:
        raise ValueError(f"order={order!r} is not allowed; allowed: {', '.join(ORDERS)}")
    f = fmt_arg(fmt)
    S = pos_real(S, "scale")
    sigma = pos_real(sigma, "sigma")
    n = int_arg(n, "n", 2)
    block_n = int_arg(block_n, "block_n", 1)
    k = int_arg(k, "k", 1 if method == "leading" else 0)
    if k > block_n or k >= n:
        raise ValueError(f"k={k} is not allowed; allowed: k <= block_n ({block_n}) and k < n ({n}) "
                         "(the sinks must all sit in block 0 and at least one key must be a non-sink)")
    d_arr = real_array(delta, "delta")
    return f, S, sigma, n, block_n, k, d_arr


def _exact_fraction(d_arr, u: float, sigma: float, n: int, block_n: int, k: int, order: str):
    """method="exact" of :func:`underflow_fraction`, for ``u = c/sigma > 0``.

    A key that is itself the running max has p = 1 and never underflows for ``S > u_f``, so
    each key's probability is ``int phi(z) (1 - F_W(sigma z + c)) dz`` with
    ``F_W(w) = Phi((w - delta)/sigma)^k_sinks Phi(w/sigma)^r`` (:func:`p_under`); the fraction
    is the key-count-weighted mean over blocks (:func:`_blocks`).
    """
    blocks = _blocks(n, block_n, k, order)
    res = np.empty_like(d_arr)
    for idx, dv in np.ndenumerate(d_arr):
        D = float(dv) / sigma
        # blocks that see no sink do not depend on delta: cache with D = 0
        tot = sum(cnt * p_under(u, D if ks else 0.0, ks, r) for cnt, ks, r in blocks)
        res[idx] = tot / (n - k)
    return res


# ---------------------------------------------------------------------------------------------
# grid step, coverage, exactness, optimal scale


def _dp1(S: float, f: FP8Format) -> float:
    mant, e = math.frexp(S)  # S = mant * 2^e, mant in [0.5, 1)
    top = e - 1  # floor(log2 S)
    below = top - 1 if mant == 0.5 else top  # binade of the values just below S
    below = min(max(below, f.emin), f.emax)  # subnormals share the emin step; beyond max: top binade
    return 2.0 ** (below - f.man_bits) / S


@scale_keyword
def dp(scale, fmt: str | FP8Format = "e4m3fn"):
    """Worst-case grid step, relative to S, met by ``P*S`` for P in (0, 1).

    The values ``P*S`` fill (0, S); the widest grid spacing there is the spacing of the binade
    holding the values just below S: ``2^(floor(log2 S) - man_bits)`` when S is not a power of
    two, ``2^(log2 S - 1 - man_bits)`` when it is (values just below 2^e lie in the binade
    starting at 2^(e-1)). The exponent is clamped to ``[emin, emax]``: below the normal range the
    step is the subnormal step, and for S beyond ``max_finite`` the top binade's spacing is used
    (the values above max_finite saturate; their error is not a grid step and is not counted).
    ``dp = step / S`` is a sawtooth in S.

    e4m3fn: the lower envelope ``2^-(man_bits+1) = 2^-4`` is reached exactly at S = 2^j for
    -5 <= j <= 8 (and at 512, beyond max_finite, where the clamped formula keeps giving
    2^-4 and then falls below it, which means nothing: those P*S saturate).
    dp(255) = 16/255, dp(256) = 2^-4, dp(300) = 32/300, dp(448) = 32/448.

    Accepts a scalar (returns a float) or an array-like (returns an ndarray).
    """
    S = scale  # the S of the formulas
    f = fmt_arg(fmt)
    arr = real_array(S, "scale", positive=True)
    out = np.vectorize(lambda s: _dp1(float(s), f), otypes=[np.float64])(arr)
    return float(out) if out.ndim == 0 else out


@scale_keyword
def coverage(scale, fmt: str | FP8Format = "e4m3fn"):
    """Span, in octaves, of the P in (0, 1] whose ``P*S`` lies in the normal range
    ``[min_normal, max_finite]``.

    Those P form ``[min_normal/S, min(1, max_finite/S)]``, so the span is
    ``log2(min(S, max_finite) / min_normal)`` for ``S >= min_normal`` and 0 below it (no P lands
    in the normal range). It increases strictly with S up to ``S = max_finite`` and is constant,
    ``log2(max_finite/min_normal)``, beyond (larger P*S saturate instead). The condition is on the
    exact product; rounding at the two ends is ignored.

    e4m3fn (min_normal 2^-6, max 448): ``6 + log2 S`` for ``2^-6 <= S <= 448``; coverage(256) = 14,
    coverage(448) = 6 + log2 448 = 14.807.

    Accepts a scalar (returns a float) or an array-like (returns an ndarray).
    """
    S = scale  # the S of the formulas
    f = fmt_arg(fmt)
    arr = real_array(S, "scale", positive=True)
    out = np.maximum(np.log2(np.minimum(arr, f.max_finite) / f.min_normal), 0.0)
    return float(out) if out.ndim == 0 else out


@scale_keyword
def bit_exact(scale: float) -> bool:
    """True iff ``P*S`` is exact in float32 for every float32 P in (0, 1] whose product is normal.

    That holds iff S is a power of two (``math.frexp(S)[0] == 0.5``) representable as a float32
    normal number (``2^-126 <= S <= 2^127``): multiplying by 2^e only changes the exponent, while
    any other S = m 2^e with odd m > 1 needs more than 24 significant bits for P = 1 - 2^-24.
    """
    S = pos_real(scale, "scale")
    mant, e = math.frexp(S)
    return mant == 0.5 and -126 <= e - 1 <= 127


def optimal_scale(fmt: str | FP8Format = "e4m3fn") -> float:
    """The largest power of two <= ``max_finite``: the bit-exact scale with the most normal-range
    coverage (and on the dp lower envelope).

    e4m3fn: 256 (max 448); e5m2: 32768 (max 57344); e4m3fnuz: 128 (max 240);
    e5m2fnuz: 32768 (max 57344).
    """
    f = fmt_arg(fmt)
    _, e = math.frexp(f.max_finite)
    return 2.0 ** (e - 1)
