"""Theory of P in microscaled FP4 (NVFP4, MXFP4) under sink keys (docs/interfaces.md, "P in FP4").

Model (:mod:`pcast.theory`'s, exactly what :func:`pcast.models.sinks.make_inputs` draws): per query row the
``n - k`` non-sink scores are iid ``N(0, sigma^2)`` and the ``k`` sink keys (positions ``0 .. k-1``)
score ``Δ + N(0, sigma^2)``. Blocks of ``block_n`` keys are visited forward or in reverse; a block's
running max ``m`` is raised to its own max first; ``x = S1·exp(s - m)`` (``scale_mode="multiply"``, static
first-level scale S1). Groups of ``group`` keys of a block share a scale ``q``: NVFP4 (16) ``q =
E4M3(amax/6)``, MXFP4 (32) ``q = 2^(floor(log2 amax) - 2)``; an element rounds to 0 iff ``x/q <= 1/4``.

Write ``t = m - M_G >= 0`` for a group's depth (M_G its max score): ``amax = S1·e^-t``. Two mechanisms:

* **Group flush** (NVFP4 only): ``q = 0`` iff ``amax/6 <= 2^-10`` iff ``t >= c_g``,
  ``c_g(S1) = 10 ln 2 - ln 6 + ln S1 ≈ 5.140 + ln S1`` (:func:`flush_threshold`). A group flushes iff
  its max is ``c_g`` below the max V of the *other* keys met: ``P = ∫ F_G(v - c_g) dF_V(v)``, with
  ``F_G``, ``F_V`` the CDFs of the maxima (products of ``Φ`` powers, one per sink/non-sink count).
* **Element grid** (both): a key underflows iff ``x <= q(t)/4``, i.e. ``s <= max(V, W) - ℓ(t)`` with
  W the max of its group's other keys and ``ℓ(t) = ln(4·S1/q(t))``. For a normal E4M3 scale
  ``q ≈ amax/6`` this is ``s <= W - ln 24`` (``x <= amax/24``) up to the scale's rounding ratio
  ``q/(amax/6)`` in ``[16/17, 18/17]``; subnormal scales (``q < 2^-6``, t beyond
  ``ln S1 + ln(2^6/6)``) round coarsely (ratio up to 2). MXFP4: ``x <= amax/2^(4 + frac(log2 amax))``,
  between amax/32 and amax/16. ``q(t)`` is piecewise constant in t, so the probability is a sum over
  the scale values of 1-D integrals (:func:`element_underflow_fraction`).

Order. Forward: the sink block comes first, so every later block's running max contains the sink
max ``≈ Δ + sigma·delta_k``: each non-sink group sits ``t ≈ Δ + sigma·delta_k - M_G`` deep and flushes
once ``Δ`` passes :func:`critical_delta_flush` -- P-collapse again, group by group; the element grid
is unaffected by the sink until the groups approach ``c_g`` (subnormal scales round coarser) and
then flush (their keys move from the element count to ``underflow_scale``). Reverse: the sink block
is met last, so the non-sink blocks are cast against their own running max (depth of a few sigma:
no flush for ``c_g >> sigma``, the Δ-free within-group rate on the grid); only the sink block's
groups see the sink, so at most ``block_n/group - 1`` groups of a row flush (3/64 for n = 1024):
no collapse. ``scale_mode="per_row"`` (``S_r = 2688 / block row max``) measures depth from the
*block's own* max instead (:func:`per_row_flush_threshold`, 13.04 nats), so it removes the forward
collapse the same way, in either order.

numpy/scipy only (``special.log_ndtr``, ``ndtr``, ``optimize.brentq``): integrals are Stieltjes sums on a
uniform grid of step 0.005 sigma (error ~1e-6).  Bad arguments raise ValueError naming them.
"""

from __future__ import annotations

import functools
import math
from collections import Counter

import numpy as np
from scipy import optimize, special
from scipy.stats import norm

from pcast.contract import ORDERS
from pcast.formats import FORMATS
from pcast.theory.collapse import int_arg, pos_real, real_array, bit_exact, delta_k

__all__ = ["flush_threshold", "group_flush_fraction", "critical_delta_flush", "element_underflow_fraction",
           "first_level_criteria", "optimal_first_level_scale", "per_row_flush_threshold", "FP4_FORMATS",
           "METHODS"]

_E4M3 = FORMATS["e4m3fn"]
_E2M1_MAX = 6.0  # E2M1's largest element (pcast.formats.microscaling.E2M1.max_finite); torch-free here
_E2M1_TOP_STEP = 2.0  # spacing of E2M1's top binade (4 -> 6)
_PER_ROW_TARGET = _E4M3.max_finite * _E2M1_MAX  # 2688 = pcast.formats.microscaling.PER_ROW_TARGET
FP4_FORMATS = {"nvfp4": 16, "mxfp4": 32}  # keys per group (pcast.formats.microscaling.MX_FORMATS)
METHODS = ("exact", "leading")
_H, _PAD = 0.005, 10.0  # grid step and margin, in units of sigma


def _e4m3_values() -> np.ndarray:
    """Every E4M3 value >= 0, ascending (0, the 7 subnormals, the normals up to 448): index = code."""
    f, m = _E4M3, 1 << _E4M3.man_bits
    normal = [(1 + i / m) * 2.0 ** e for e in range(f.emin, f.emax + 1) for i in range(m)]
    return np.array([i * f.min_subnormal for i in range(m)] + [v for v in normal if v <= f.max_finite])


# ---------------------------------------------------------------------------------------------
# thresholds


def flush_threshold(S1: float) -> float:
    """``c_g(S1) = 10 ln 2 - ln 6 + ln S1`` (≈ 5.1398 + ln S1): the depth, in nats below the running max,
    at or beyond which a whole NVFP4 group's E4M3 scale ``amax·S1/6`` rounds to 0.

    The group's ``amax = S1·e^-t`` (t its max's depth); the scale ``E4M3(float32(amax/6))`` is 0 iff
    ``float32(amax/6) <= 2^-10`` (half E4M3's smallest subnormal; the tie ``2^-10`` rounds to even 0, so
    "at or beyond"). Float32: the division moves nothing -- the float32 just above ``6·2^-10`` divided by
    6 lies ``2/3`` ulp above ``2^-10`` and rounds up -- so the rule is exactly ``amax <= 6·2^-10`` on the
    float32 amax; the only slack is the float32 rounding of ``exp(s - m)`` and of ``p·S1`` (S1 a power
    of two: exact), a few ulps, i.e. ~1e-7 nats in t. ``c_g <= 0`` (``S1 <= 6·2^-10``): every group flushes.
    """
    S1 = pos_real(S1, "S1")
    return -math.log(_E4M3.underflow_threshold) - math.log(_E2M1_MAX) + math.log(S1)


def per_row_flush_threshold() -> float:
    """``ln(448·2^10) ≈ 13.036``: under ``scale_mode="per_row"`` the depth below the BLOCK's own row max
    r at which a group flushes.

    ``S_r = 2688/r`` maps the block's max to ``x = 2688``; a group with max ``p_g`` has
    ``amax = 2688·p_g/r`` and flushes iff ``amax/6 <= 2^-10``, i.e. ``ln(r/p_g) >= ln(448·2^10)``. The
    running max (and so a sink in an earlier block) cancels: only groups of the sink's own block see
    the sink, so forward order loses at most ``block_n/group - 1`` groups per row (those of block 0,
    once ``Δ + sigma·delta_k - M_G >= 13.04``). ``float32(2688/r)·r`` may exceed 2688 by an ulp: the
    top element then clips to 6 (counted in ``saturated``), a rounding-level effect.
    """
    return math.log(_PER_ROW_TARGET / (_E2M1_MAX * _E4M3.underflow_threshold))


# ---------------------------------------------------------------------------------------------
# layout and integrals


def _group_types(n: int, block_n: int, group: int, k: int, order: str) -> Counter:
    """Counter of ``(g_s, g_ns, o_s, o_ns)`` over a row's groups: sink / non-sink keys in the group, and
    the other sink / non-sink keys met when its block is cast (forward: keys [0, hi); reverse: [lo, n))."""
    types = Counter()
    for lo in range(0, n, block_n):
        hi = min(lo + block_n, n)
        a, b = (0, hi) if order == "forward" else (lo, n)
        met_s = max(0, min(b, k) - a)
        for ga in range(lo, hi, group):
            gb = min(ga + group, hi)
            g_s = max(0, min(gb, k) - ga)
            types[(g_s, gb - ga - g_s, met_s - g_s, b - a - met_s - (gb - ga - g_s))] += 1
    return types


@functools.lru_cache(maxsize=256)
def _grid(D: float) -> tuple[np.ndarray, np.ndarray]:
    """Edges and midpoints of the standardised grid covering non-sink (0) and sink (D) maxima."""
    lo, hi = min(0.0, D) - _PAD, max(0.0, D) + _PAD
    edges = lo + _H * np.arange(int(math.ceil((hi - lo) / _H)) + 1)
    return edges, edges[:-1] + 0.5 * _H


def _cdf_max(z, ns: int, s: int, D: float):
    """CDF of the max of ``ns`` N(0,1) and ``s`` N(D,1) at z (1 for an empty set)."""
    return np.exp(ns * special.log_ndtr(z) + s * special.log_ndtr(z - D))


@functools.lru_cache(maxsize=65536)
def _flush_prob(u: float, D: float, g_s: int, g_ns: int, o_s: int, o_ns: int) -> float:
    """P(max of the group <= V - u), V the max of the others met: ``∫ F_G(v - u) dF_V(v)``."""
    if o_s + o_ns == 0:
        return 0.0
    edges, mids = _grid(D)
    dF = np.diff(_cdf_max(edges, o_ns, o_s, D))
    return float(np.dot(_cdf_max(mids - u, g_ns, g_s, D), dF))


@functools.lru_cache(maxsize=64)
def _pieces(S1: float, fmt: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The scale's pieces in depth t >= 0 (nats), shallowest first: ``(t_lo, t_hi, ℓ = ln(4·S1/q))`` for
    each non-zero q; none holds t = 0 when the top group's scale itself flushes."""
    if fmt == "nvfp4":
        vals = _e4m3_values()
        mid = 0.5 * (vals[:-1] + vals[1:])  # a/6 in (mid[j-1], mid[j]] rounds to vals[j]; mid[0] = 2^-10
        upper = np.append(mid[1:], np.inf)  # vals[-1] = 448 also takes everything above (satfinite)
        with np.errstate(divide="ignore"):
            t_lo = np.log(S1 / (_E2M1_MAX * upper))
        t_hi, q = np.log(S1 / (_E2M1_MAX * mid)), vals[1:]
    else:  # E8M0: amax in [2^e, 2^(e+1)) gives q = 2^(e-2); e down to -125 (below: float32 p is ~0)
        e = np.arange(math.floor(math.log2(S1)), -126, -1, dtype=np.float64)
        t_lo, t_hi, q = math.log(S1) - (e + 1) * math.log(2.0), math.log(S1) - e * math.log(2.0), 2.0 ** (e - 2)
    keep = t_hi > 0
    order = np.argsort(t_lo[keep])  # by depth: the piece holding t = 0 first
    return np.maximum(t_lo[keep][order], 0.0), t_hi[keep][order], np.log(4.0 * S1 / q[keep][order])


def _shifted(tab: np.ndarray, off: int, b: float, i0: int, i1: int) -> np.ndarray:
    """``F(mids[i0:i1] - b)`` for ``b >= 0``, by linear interpolation in ``tab[i] = F(mids[0] + (i - off)·h)``."""
    j = int(math.floor(b / _H))
    w = b / _H - j
    return (1.0 - w) * tab[off + i0 - j:off + i1 - j] + w * tab[off + i0 - j - 1:off + i1 - j - 1]


@functools.lru_cache(maxsize=65536)
def _elem_prob(D: float, sigma: float, S1: float, fmt: str, w_s: int, w_ns: int, o_s: int, o_ns: int) -> float:
    """P(a non-sink key rounds to 0 on the element grid, its group's scale > 0).

    W = the max of its group's other keys (``w_s``, ``w_ns``), V = the max of the other keys met
    (``o_s``, ``o_ns``), depth ``t = (V - W)+``: underflow iff ``Z <= max(V, W) - ℓ(t)/sigma``. Hence
    ``∫ dF_W(w) F_V(w) Φ(w - ℓ(0))`` (t = 0) plus, per piece ``[t_lo, t_hi)`` with constant ℓ,
    ``∫ dF_V(v) Φ(v - ℓ) [F_W(v - t_lo) - F_W(v - t_hi)]`` (all in units of sigma); the shifted
    ``F_W`` and ``Φ`` are read from tables on the grid (linear interpolation, error ~1e-6)."""
    t_lo, t_hi, ell = _pieces(S1, fmt)
    if w_s + w_ns == 0 or t_lo.size == 0 or t_lo[0] > 0:  # alone in its group, or every scale flushes
        return 0.0
    edges, mids = _grid(D)
    fv_mid = _cdf_max(mids, o_ns, o_s, D)
    p0 = float(np.dot(np.diff(_cdf_max(edges, w_ns, w_s, D)), fv_mid * special.ndtr(mids - ell[0] / sigma)))
    if o_s + o_ns == 0:
        return p0
    dfv = np.diff(_cdf_max(edges, o_ns, o_s, D))
    live = np.flatnonzero(dfv > 1e-16)
    i0, i1 = int(live[0]), int(live[-1]) + 1
    span = mids[i1 - 1] - edges[0]  # deeper pieces put W below the grid: F_W = 0 there
    use = t_lo / sigma < span
    t_lo, t_hi, ell = t_lo[use] / sigma, np.minimum(t_hi[use] / sigma, span + 1.0), ell[use] / sigma
    off = int(math.ceil(max(ell.max(), t_hi.max()) / _H)) + 2
    z = mids[0] + _H * np.arange(-off, mids.size)
    fw, phi = _cdf_max(z, w_ns, w_s, D), special.ndtr(z)
    inner, prev, f_prev = np.zeros(i1 - i0), None, None
    for lo_, hi_, l_ in zip(t_lo, t_hi, ell):  # contiguous pieces: one piece's t_hi is the next one's t_lo
        f_lo = f_prev if lo_ == prev else _shifted(fw, off, lo_, i0, i1)
        prev, f_prev = hi_, _shifted(fw, off, hi_, i0, i1)
        inner += _shifted(phi, off, l_, i0, i1) * (f_lo - f_prev)
    return p0 + float(np.dot(inner, dfv[i0:i1]))


# ---------------------------------------------------------------------------------------------
# fractions


def _shape_args(S1, k, sigma, n, block_n, group, order, k_min: int = 0):
    if order not in ORDERS:
        raise ValueError(f"order={order!r} is not allowed; allowed: {', '.join(ORDERS)}")
    S1, sigma = pos_real(S1, "S1"), pos_real(sigma, "sigma")
    n, block_n, group = int_arg(n, "n", 2), int_arg(block_n, "block_n", 1), int_arg(group, "group", 1)
    if block_n % group:
        raise ValueError(f"group={group} is not allowed with block_n={block_n}; allowed: a divisor of block_n")
    k = int_arg(k, "k", k_min)
    if k >= n:
        raise ValueError(f"k={k} is not allowed; allowed: k < n ({n}) (at least one non-sink key)")
    return S1, k, sigma, n, block_n, group


def group_flush_fraction(delta, S1: float, k: int = 4, sigma: float = 1.0, n: int = 1024, block_n: int = 64,
                         group: int = 16, order: str = "forward"):
    """Expected fraction of ALL ``n/group`` groups of a row whose NVFP4 scale flushes (static S1).

    The pipeline's ``groups_flushed / (n/group)`` averaged over rows; the group(s) holding the k sinks
    count in the denominator (they flush only when Δ is very negative). A group G flushes iff
    ``max_G <= V - c_g`` (:func:`flush_threshold`), V the max of the other keys met (forward: every key
    of blocks 0..j; reverse: of blocks j..last), so exactly, under the model,

        ``Σ_G ∫ F_G(v - c_g/sigma) dF_V(v) / (n/group)``,  ``F(z) = Φ(z)^a Φ(z - Δ/sigma)^b``,

    a, b the non-sink and sink counts of each set (groups with equal counts share one integral); ``c_g <= 0``:
    all flush. Forward, strong sink: ``≈ (1 - group/n)·Φ((Δ + sigma·delta_k - c_g)/sigma)^group``.

    Args: delta (real or array-like; the result has its shape), S1 > 0, k sink keys (0 <= k < n),
    sigma > 0, n >= 2 keys, block_n, group (a divisor of block_n), order "forward" or "reverse".
    Raises ValueError naming the argument and what is allowed.
    """
    S1, k, sigma, n, block_n, group = _shape_args(S1, k, sigma, n, block_n, group, order)
    d_arr = real_array(delta, "delta")
    c, types = flush_threshold(S1), _group_types(n, block_n, group, k, order)
    res = np.empty_like(d_arr)
    for idx, dv in np.ndenumerate(d_arr):
        D = float(dv) / sigma if k else 0.0
        res[idx] = sum(types.values()) if c <= 0 else sum(
            cnt * _flush_prob(c / sigma, D if (key[0] or key[2]) else 0.0, *key) for key, cnt in types.items())
    res = res / (n / group)
    return float(res) if res.ndim == 0 else res


def element_underflow_fraction(delta, S1: float, k: int = 4, sigma: float = 1.0, n: int = 1024, block_n: int = 64,
                               group: int | None = None, order: str = "forward", fmt: str = "nvfp4"):
    """Expected fraction of a row's non-sink keys rounded to 0 by the ELEMENT grid in groups whose
    scale did not flush: the pipeline's ``(underflow - underflow_scale) / terms``.

    A non-sink key in a group with other-keys max W, meeting the other keys' max V, depth ``t = (V - W)+``,
    underflows iff ``x <= q(t)/4``, i.e. ``s <= max(V, W) - ℓ(t)``, ``ℓ(t) = ln(4·S1/q(t))``, q the
    group's scale (0 = flushed: excluded). nvfp4: ``q = E4M3(S1·e^-t/6)``, so ``ℓ ≈ t + ln 24`` (x below
    about amax/24, ratio ``q·6/amax`` in [16/17, 18/17] for a normal scale, up to 2 for a subnormal one).
    mxfp4: ``q = 2^(floor(log2 amax) - 2)`` (E8M0), ``ℓ = t + ln 16 + frac(log2 amax)·ln 2``; no flush.
    The sum over q's constant pieces of 1-D integrals is exact under the model (``_elem_prob``). Without
    a sink the rate is Δ-free: 0.1041 (nvfp4), 0.1594 (mxfp4) at sigma = 1 (the mean substitution
    ``Φ(delta_15 - ln 24) = 0.075`` underestimates it); forward order loses it to ``underflow_scale`` as
    groups flush. The denominator is ``n - k`` (a non-sink p is 0 in float32 only ~103 nats deep).

    Args: as :func:`group_flush_fraction`; ``group`` None: the format's (16 nvfp4, 32 mxfp4, as the
    contract fixes them; another value models that group size); fmt "nvfp4" or "mxfp4".
    Raises ValueError naming the argument and what is allowed.
    """
    if fmt not in FP4_FORMATS:
        raise ValueError(f"fmt={fmt!r} is not allowed; allowed: {', '.join(FP4_FORMATS)}")
    group = FP4_FORMATS[fmt] if group is None else group
    S1, k, sigma, n, block_n, group = _shape_args(S1, k, sigma, n, block_n, group, order)
    d_arr = real_array(delta, "delta")
    types = _group_types(n, block_n, group, k, order)
    res = np.empty_like(d_arr)
    for idx, dv in np.ndenumerate(d_arr):
        D = float(dv) / sigma if k else 0.0
        res[idx] = sum(cnt * g_ns * _elem_prob(D if (g_s or o_s) else 0.0, sigma, S1, fmt, g_s, g_ns - 1, o_s, o_ns)
                       for (g_s, g_ns, o_s, o_ns), cnt in types.items() if g_ns)
    res = res / (n - k)
    return float(res) if res.ndim == 0 else res


# ---------------------------------------------------------------------------------------------
# critical delta, first-level scale


def critical_delta_flush(S1: float, k: int = 4, sigma: float = 1.0, n: int = 1024, block_n: int = 64,
                         group: int = 16, method: str = "exact") -> float:
    """Forward order: the Δ at which :func:`group_flush_fraction` crosses 1/2 (static S1, NVFP4).

    method="exact" (default): ``scipy.optimize.brentq`` on the exact model fraction (monotone in Δ), to 1e-6.
    method="leading", the closed form: once the sink dominates, every group without a sink meets the
    sink max ``≈ Δ + sigma·delta_k`` (its mean; the other non-sink keys ignored) and flushes iff all
    ``group`` of its keys (16 terms, not 15: no key of the group is the running max) lie ``c_g`` below it;
    groups holding a sink never flush. With ``f_ns`` the share of the ``n/group`` groups that hold no
    sink (``1 - group/n`` for ``k <= group``), ``f_ns·Φ((Δ + sigma·delta_k - c_g)/sigma)^group = 1/2`` gives

        ``Δc ≈ c_g(S1) - sigma·delta_k + sigma·Φ⁻¹((2·f_ns)^(-1/group))``,

    ``Φ⁻¹(2^(-1/16)) = 1.7235`` for n -> ∞, ``1.7341`` for n = 1024: with k = 4, sigma = 1,
    ``Δc ≈ ln S1 + 5.844`` (S1 = 1: 5.844, 256: 11.39, 2048: 13.47); the exact crossing lies 0.053 above
    (Jensen: the sink max's spread, sd ≈ 0.70 sigma for k = 4, flattens ``Φ^16``).

    Raises ValueError naming the argument: k < 1, c_g <= 0 or no crossing of 1/2 (S1), too few sink-free
    groups to reach 1/2 (n), and the checks of :func:`group_flush_fraction`.
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not allowed; allowed: {', '.join(METHODS)}")
    S1, k, sigma, n, block_n, group = _shape_args(S1, k, sigma, n, block_n, group, "forward", k_min=1)
    c = flush_threshold(S1)
    if c <= 0:
        raise ValueError(f"S1={S1!r} is not allowed; allowed: S1 > 6·2^-10 (below, every group flushes at any Δ)")
    types = _group_types(n, block_n, group, k, "forward")
    f_ns = sum(cnt for (g_s, *_), cnt in types.items() if g_s == 0) / (n / group)
    if 2 * f_ns <= 1:
        raise ValueError(f"n={n} is not allowed with group={group}, k={k}: at most {f_ns:.3f} of the groups can "
                         "flush; allowed: more than half of the groups free of sinks")
    lead = c - sigma * delta_k(k) + sigma * float(norm.ppf((2.0 * f_ns) ** (-1.0 / group)))
    if method == "leading":
        return lead

    def excess(d: float) -> float:
        return group_flush_fraction(d, S1, k, sigma, n, block_n, group, "forward") - 0.5

    lo, hi = lead - 20.0 * sigma, lead + 20.0 * sigma
    if excess(lo) >= 0 or excess(hi) <= 0:
        raise ValueError(f"S1={S1!r} is not allowed: the flushed fraction does not cross 1/2 (c_g = {c:.3f} is "
                         "too small against the non-sink keys); allowed: a larger S1")
    return float(optimize.brentq(excess, lo, hi, xtol=1e-6))


def _e4m3_round(y: float) -> float:
    """E4M3 RNE of y >= 0, saturating at 448 (the group-scale rule; a tie goes to the even code)."""
    vals = _e4m3_values()
    dist = np.abs(vals - min(y, vals[-1]))
    best = np.flatnonzero(dist == dist.min())  # index = code; two at a tie
    return float(vals[best[best % 2 == 0][0] if best.size > 1 else best[0]])


def first_level_criteria(S1: float) -> dict:
    """The paper's three criteria for the static first-level scale S1 of NVFP4 P.

    * ``bit_exact`` (:func:`pcast.theory.bit_exact`): S1 a power of two, so ``x = p·S1`` is exact.
    * worst-case step: the cast's relative step near a group max is ``2q/amax = (1/3)·ρ`` (E2M1's top step
      4 -> 6 is 1/3 of the max 6, times the scale's rounding ratio ``ρ = q/(amax/6)``). ``step_top``: the
      group holding p = 1 (``amax = S1``), and when ``saturates`` (``S1/6 > 448``: q clips at 448, the top
      elements clip at 6) the larger of that step and the clip error ``1 - 2688/S1``; ``(1/3)(33/32) =
      0.34375`` for every power of two 2^-3..2^11 (``S1/6 = (4/3)·2^(j-3)`` rounds to ``1.375·2^(j-3)``).
      Deeper groups see every mantissa, so the sup over normal scales is ``(1/3)(18/17) = 0.353``
      whatever S1; past ``fine_depth = ln(S1/(6·2^-6))`` nats below the running max the scale is
      E4M3-subnormal (< 2^-6) and ρ, hence the step, grows to 2 (2/3) just before the flush.
    * ``coverage``: ``c_g(S1)`` (:func:`flush_threshold`), the nats of p below the running max that
      survive before a group scale flushes; ``coverage_octaves`` = the same in octaves.

    Returns a dict with keys ``S1, bit_exact, saturates, step_top, fine_depth, coverage, coverage_octaves``.
    """
    S1 = pos_real(S1, "S1")
    q0 = _e4m3_round(S1 / _E2M1_MAX)
    saturates = S1 / _E2M1_MAX > _E4M3.max_finite  # then also the clip error of the top elements counts
    step = max(_E2M1_TOP_STEP * q0 / S1, 1.0 - _E2M1_MAX * q0 / S1 if saturates else 0.0)
    c = flush_threshold(S1)
    return {"S1": S1, "bit_exact": bit_exact(S1), "saturates": bool(saturates), "step_top": step,
            "fine_depth": max(0.0, math.log(S1 / (_E2M1_MAX * _E4M3.min_normal))), "coverage": c,
            "coverage_octaves": c / math.log(2.0)}


def optimal_first_level_scale(fmt: str = "nvfp4") -> float:
    """The optimal static first-level scale S1 of P in ``fmt``.

    nvfp4: among bit-exact S1 (powers of two), coverage ``c_g = 5.14 + ln S1`` and ``fine_depth =
    2.37 + ln S1`` grow with S1 and ``step_top`` is the same 0.34375 from 2^-3 to 2^11, while S1 > 448·6
    = 2688 saturates the top group (its scale clips at 448; ``step_top`` jumps to ``1 - 2688/S1`` =
    0.344 at 4096, 0.672 at 8192). So the optimum is the largest power of two <= 2688: **2^11 = 2048**,
    found here by scanning 2^-20..2^20 with :func:`first_level_criteria` (admissible: bit-exact, not
    saturating; best: most coverage). Its coverage is 12.76 nats (18.42 octaves), its forward group-flush
    Δc (k = 4, sigma = 1, n = 1024) 13.47 (closed form) / 13.52 (exact), against 11.45 for E4M3 P at S = 256.

    mxfp4: 1.0. An E8M0 scale follows amax by a power of two, so for S1 = 2^j the cast of ``p·2^j`` is
    exactly ``2^j`` times that of p (no flush, no saturation inside E8M0's 2^±127): every bit-exact S1
    gives the same P; 1 is the canonical one.

    Raises ValueError for fmt other than "nvfp4" / "mxfp4".
    """
    if fmt not in FP4_FORMATS:
        raise ValueError(f"fmt={fmt!r} is not allowed; allowed: {', '.join(FP4_FORMATS)}")
    if fmt == "mxfp4":
        return 1.0
    ok = [first_level_criteria(2.0 ** j) for j in range(-20, 21)]
    ok = [c for c in ok if c["bit_exact"] and not c["saturates"]]
    return max(ok, key=lambda c: c["coverage"])["S1"]
