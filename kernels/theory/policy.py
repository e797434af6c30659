"""Theory of the P-policy options of :func:`pcast.attention` (docs/interfaces.md, "P policies of deployed kernels").

Beside :mod:`pcast.theory` (sink keys, eager max, S multiplied after exp), and in its model:
the scores of one query row are iid ``N(0, sigma^2)``; keys are visited in blocks of ``block_n``,
first to last (``order="forward"``) or last to first (``"reverse"``); a key's ``x = S·exp(s - m)``
rounds to zero iff ``s <= m - c`` with ``c = log_threshold(fmt) + ln S``
(:func:`pcast.theory.log_threshold`) and saturates iff ``x > max_finite``.

* :func:`underflow_fraction_init`: a learned sink logit Δ seeds the running max
  (``sink_mode="init"``, no sink keys).
* :func:`saturation_fraction`: lazy rescaling with threshold τ (in :mod:`pcast.theory.lazy`).
* :func:`best_lazy_scale`, :func:`max_safe_tau`: the scales that lazy rescaling cannot saturate.
* :func:`exp2_offset_scale`: the S that ``scale_mode="exp2_offset"`` really applies.
* :func:`critical_delta_policy`: Δc of a policy, lazy and exp2-offset ones included.
* :func:`v_cast_floor`: the relative MSE that an FP8 V costs (in :mod:`pcast.theory.vcast`).

Argument checks reuse :mod:`pcast.theory`'s helpers; every bad argument raises a ValueError
naming it and what is allowed.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import integrate, optimize
from scipy.stats import norm

from pcast.contract import ORDERS, scale_keyword
from pcast.formats import FP8Format
from pcast.theory.lazy import tau_arg, exp2_offset_scale, saturation_fraction
from pcast.theory.collapse import (METHODS, ZLIM, fmt_arg, int_arg, log_Phi, log_phi, pos_real, real_array,
                                   critical_delta)
from pcast.theory.vcast import v_cast_floor, v_rounding_mse

__all__ = ["underflow_fraction_init", "saturation_fraction", "best_lazy_scale", "max_safe_tau", "critical_delta_policy",
           "exp2_offset_scale", "v_cast_floor", "v_rounding_mse"]


# ---------------------------------------------------------------------------------------------
# a learned sink logit that seeds the running max


@functools.lru_cache(maxsize=65536)
def _p_under_init(u: float, D: float, r: int) -> float:
    """P(Z0 <= max(D, W_r) - u) for Z0 and the max W_r of r more iid N(0,1); u > 0.

    A key (score sigma*Z0) meets the max ``max(Δ, the r other keys it has met, itself)``; for
    u = c/sigma > 0 a key that is itself that max has p = 1 and never underflows, so it underflows
    iff ``Z0 <= max(D, W_r) - u``. With ``F(w) = 1{w >= D} Phi(w)^r``, the CDF of max(D, W_r):

        P = int phi(z) [1 - F(z + u)] dz = Phi(D - u) + int_{D-u}^inf phi(z) [1 - Phi(z + u)^r] dz,

    the tail integrand written ``-expm1(r log Phi)`` so small probabilities keep their accuracy.
    """
    a = D - u
    head = float(norm.cdf(a))
    if r == 0 or a >= ZLIM:
        return head

    def integrand(z: float) -> float:
        return math.exp(log_phi(z)) * -math.expm1(r * log_Phi(z + u))

    lo = max(a, -ZLIM)
    # 1 - Phi(z + u)^r falls from 1 to 0 around r log Phi(z + u) = -ln 2: break points there.
    g = lambda z: r * log_Phi(z + u) + math.log(2.0)  # noqa: E731 (increasing in z)
    zt = lo if g(lo) >= 0 else optimize.brentq(g, lo, ZLIM, xtol=1e-10)
    points = sorted({p for p in (zt - 2.0, zt - 0.5, zt, zt + 0.5, zt + 2.0, 0.0) if lo < p < ZLIM})
    tail, _ = integrate.quad(integrand, lo, ZLIM, points=points or None, limit=400, epsabs=0.0, epsrel=1e-10)
    return min(max(head + float(tail), 0.0), 1.0)


def _init_blocks(n: int, block_n: int, order: str):
    """(keys in the block, other keys each of them has met) for every block of the walk."""
    out = []
    for lo in range(0, n, block_n):
        hi = min(lo + block_n, n)
        # forward: blocks 0..j visited, everything before hi; reverse: blocks j..last, everything from lo
        out.append((hi - lo, hi - 1 if order == "forward" else n - lo - 1))
    return out


@scale_keyword
def underflow_fraction_init(delta, scale: float, fmt: str | FP8Format = "e4m3fn", sigma: float = 1.0, *,
                            n: int = 1024, block_n: int = 64, order: str = "forward", method: str = "leading"):
    """Expected fraction of a row's keys whose ``p_q == 0`` when a learned sink logit Δ seeds the max.

    Model: ``sink_mode="init"``, no sink keys (inputs of ``make_inputs(..., ksink=0)`` or
    ``make_base``), the n keys' scores iid ``N(0, sigma^2)``, the eager max (τ = 0). The row starts
    with ``m = Δ``, so every key meets a max of at least Δ, in either order: that is the collapse of
    forward order even when the real keys are walked in reverse.

    method="leading": ``Phi((Δ - c) / sigma)``, the probability that a key's score is at most
        ``Δ - c``: the max each key meets is replaced by Δ itself (the logit is deterministic, so
        there is no ``delta_k`` term). It is a lower bound of the exact answer.
    method="exact": a key underflows iff ``s <= max(Δ, W) - c`` with W the max of the other keys it
        has met (forward: every key of blocks 0..j, its own block included; reverse: blocks j..last);
        a key that is itself the max has p = 1 and never underflows. Per block the probability is
        the 1-D integral of :func:`_p_under_init`; the fraction is the key-count weighted mean over
        blocks. Exact under the model up to quadrature error (relative 1e-10).

    If ``S <= u_f`` (``c <= 0``) every ``x <= S`` rounds to zero and both methods give 1.
    ``scale_mode="exp2_offset"`` applies :func:`exp2_offset_scale` (S within 2e-7 relative), so
    the same law holds with that S.

    Args:
        delta: Δ, the sink logit (a real, or an array-like; the result has its shape).
        S: the scale on P, > 0. fmt: FP8 format name. sigma: score standard deviation, > 0.
        n: keys (>= 1); block_n: keys per block (>= 1); order: "forward" or "reverse".
        method: "leading" or "exact".

    Returns:
        a float, or a float64 ndarray shaped like ``delta``.

    Raises:
        ValueError: naming the argument and what is allowed.
    """
    S = scale  # the S of the formulas
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not allowed; allowed: {', '.join(METHODS)}")
    if order not in ORDERS:
        raise ValueError(f"order={order!r} is not allowed; allowed: {', '.join(ORDERS)}")
    f, S, sigma = fmt_arg(fmt), pos_real(S, "scale"), pos_real(sigma, "sigma")
    n, block_n = int_arg(n, "n", 1), int_arg(block_n, "block_n", 1)
    d_arr = real_array(delta, "delta")
    c = f.log_threshold + math.log(S)
    if c <= 0:
        res = np.ones_like(d_arr)
    elif method == "leading":
        res = norm.cdf((d_arr - c) / sigma)
    else:
        blocks = _init_blocks(n, block_n, order)
        res = np.empty_like(d_arr)
        for idx, dv in np.ndenumerate(d_arr):
            res[idx] = sum(cnt * _p_under_init(c / sigma, float(dv) / sigma, r) for cnt, r in blocks) / n
    return float(res) if res.ndim == 0 else res


# ---------------------------------------------------------------------------------------------
# scales


def best_lazy_scale(tau: float, fmt: str | FP8Format = "e4m3fn") -> float:
    """The largest power of two S with ``S·2^τ <= max_finite``: the scale lazy rescaling cannot saturate.

    With lazy rescaling the max in force may stay up to ``τ·ln 2`` below a block's max, so
    ``x = S·exp(s - m) <= S·2^τ`` (:func:`saturation_fraction`); keeping that <= max_finite asks
    ``log2 S <= log2(max_finite) - τ``, and the largest power of two is
    ``2^floor(log2(max_finite) - τ)``; a τ within 1e-12 of the boundary ``log2(max_finite/S)``
    (:func:`max_safe_tau`) keeps that S, whatever the float rounding of the logarithms. A power
    of two keeps ``p·S`` exact (:func:`pcast.theory.bit_exact`).

    e4m3fn (max 448 = 1.75·2^8): τ = 0 gives 256 (:func:`pcast.theory.optimal_scale`), τ = 8
    (FA4) gives 1 (256·2^8 = 65536 > 448, 1·2^8 = 256 <= 448), τ = 9 gives 0.5.

    Raises:
        ValueError: unless τ is a finite real >= 0 and fmt a known format.
    """
    tau = tau_arg(tau)
    f = fmt_arg(fmt)
    # floor(log2(max_finite) - τ), with the boundary itself (within 1e-12, float rounding) counted as safe
    e = math.floor(math.log2(f.max_finite) - tau + 1e-12)
    return math.ldexp(1.0, e)


@scale_keyword
def max_safe_tau(scale: float, fmt: str | FP8Format = "e4m3fn") -> float:
    """``log2(max_finite / S)``: the largest τ with ``S·2^τ <= max_finite``.

    e4m3fn: S = 256 gives log2 1.75 = 0.807 (FA4's τ = 8 needs S <= 1.75, see
    :func:`best_lazy_scale`), S = 1 gives 8.807. Negative when ``S > max_finite``: then even the
    eager rule (τ = 0) saturates the key at the max. For ``scale_mode="exp2_offset"`` pass
    :func:`exp2_offset_scale` of S.

    Raises:
        ValueError: unless S is a finite real > 0 and fmt a known format.
    """
    S = pos_real(scale, "scale")
    return math.log2(fmt_arg(fmt).max_finite / S)


def critical_delta_policy(scale: float, k: int = 4, fmt: str | FP8Format = "e4m3fn", *, order: str = "forward",
                          scale_mode: str = "multiply", rescale_threshold: float = 0.0):
    """Δc of a policy: the sink strength (sigma units) at which half its non-sink P round to zero, to leading
    order; None for ``order="reverse"`` (the sink's block comes last, so sink keys do not collapse the rest).

    Forward order meets the sink block first, so the running max is the sinks' max ``Δ + delta_k(k)`` (to
    leading order) before any non-sink key of a later block. Eager (τ = 0): a later block moves the max only
    to a larger score, and the non-sink keys lie below the sinks. Lazy (τ > 0): a later block moves it only when
    its max exceeds the one in force by more than ``τ·ln 2``, which keys below the sinks never do. Either way
    every non-sink key gets ``x = S·exp(s - (Δ + delta_k))`` and rounds to zero iff
    ``s <= Δ + delta_k - c`` with ``c = log_threshold(fmt) + ln S``: half of them (s ~ N(0, 1), median 0) when
    ``Δ = c - delta_k(k)``, :func:`pcast.theory.critical_delta`. τ changes the saturation, not the underflow.
    ``scale_mode="exp2_offset"`` computes ``x = exp2(s·log2 e - (m·log2 e - log2 S)) = S·exp(s - m)``, the same
    law with the S it really applies (:func:`exp2_offset_scale`).

    Raises:
        ValueError: naming a bad argument (scale, k, fmt, order, scale_mode or rescale_threshold).
    """
    if order not in ORDERS:
        raise ValueError(f"order={order!r} is not allowed; allowed: {', '.join(ORDERS)}")
    if scale_mode not in ("multiply", "exp2_offset"):
        raise ValueError(f"scale_mode={scale_mode!r} is not allowed; allowed: multiply, exp2_offset")
    tau_arg(rescale_threshold)
    if order == "reverse":
        return None
    S = exp2_offset_scale(scale) if scale_mode == "exp2_offset" else pos_real(scale, "scale")
    return critical_delta(S, k=k, fmt=fmt)
