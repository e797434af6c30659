"""Saturation of ``x = S·exp(s - m)`` under lazy rescaling (``rescale_threshold`` τ > 0).

Re-exported by :mod:`pcast.theory.policy`; the model is :mod:`pcast.theory`'s (scores iid
``N(0, sigma^2)``, keys visited in blocks of ``block_n``). The lazy rule of step 2: a block of
max ``B`` moves the running max, ``m = B``, iff ``m == -inf`` or ``B - m > T`` with
``T = τ·ln 2`` (the kernel compares ``(B - m)·LOG2E > τ`` in float32); otherwise ``m`` stays
(stale). Every key of the block then gets ``x = S·exp(s - m)`` with that m; it saturates iff
``s > m + h`` with ``h = ln(max_finite / S)``. A stale block has all its scores ``<= m + T``,
so ``x <= S·2^τ``: nothing saturates when ``S·2^τ <= max_finite`` (``h >= T``).

The walk is a Markov chain on the running max ``M_j`` after block j (sigma units from here on).
For a block whose keys form groups ``(count c_g, mean mu_g)`` (non-sink keys mu = 0, sink keys
mu = Δ/sigma), ``F_B(y) = prod_g Phi(y - mu_g)^c_g`` is the CDF of its max and ``f_B`` the density.
Given ``M_{j-1} = x``:

* stale with probability ``F_B(x + T)``; the expected number of saturated keys and stale block is
  ``sum_g c_g [Phi(x + T - mu_g) - Phi(x + h - mu_g)]^+ F_B(x + T) / Phi(x + T - mu_g)``;
* otherwise ``M_j = B``; a key saturates iff ``s > B + h``, possible only for ``h < 0``
  (``S > max_finite``: even the eager rule saturates the keys within ``|h|`` of the max):
  ``G(x + T) = int_{x+T}^inf sum_g f_g(t) [1 + sum_g' c_g' q_g'(t) - q_g(t)] dt`` with ``f_g`` the
  density that the max is a key of group g at t and ``q_g(t) = 1 - Phi(t + h - mu_g)/Phi(t - mu_g)``
  the chance that another key of group g, below t, lies within ``|h|`` of it.

So the density of ``M_j`` is ``f_j(y) = f_{j-1}(y) F_B(y + T) + f_B(y) P(M_{j-1} < y - T)``. It is
carried on a grid of step 2e-3 (trapezoid rule), plus a point mass where the walk starts: at
``-inf`` (no sink: the first block always moves) or at Δ (a learned sink logit seeding the max,
``sink_mode="init"``). The expected saturated count of each block is integrated against the
state before it; their sum over n is the fraction. Exact under the model up to the grid's
quadrature error (a few 1e-6 relative against a grid 8 times finer; the tests check 1e-4).

exp2_offset adds a float32 effect the law above cannot see (:func:`offset_overshoot`): the key AT
a new max m gets ``x = exp2(a - (a - c))`` with ``a = float32(m·LOG2E)`` and ``c = log2_scale(S)``.
For an integer c (S a power of two) ``a - c`` is exact and x = S. For S = 448, c = 8.807354927...
is an odd multiple of 2^-20; for maxima from about 1 up to 17.19, ``a - c`` is exact and x = 448;
from 17.19 (``a - c >= 16``, float32 grid 2^-19) to 22.18 (a = 32) the subtraction is a tie, rounded to
even, and in half the cases ``a - (a - c) = c + 2^-20``: x = 448.0003 > 448, saturated (clamped to
448 by the cast: a 7e-7 relative error); small and negative maxima overshoot at other rates
(:func:`offset_overshoot` gives them all, bit for bit). Each move of
the max to t therefore adds ``rate(t)`` saturated keys, ``rate`` the local mean of the overshoot
over consecutive float32 values of m (:func:`~pcast.theory.lazy.overshoot_rate`), integrated against the density of
the moves in the same walk.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special
from scipy.integrate import cumulative_trapezoid, trapezoid

from functools import lru_cache

from pcast.contract import LOG2E, ORDERS, SCALE_MODES, SINK_KINDS, float32, log2_scale, scale_keyword
from pcast.formats import FP8Format
from pcast.theory.collapse import fmt_arg, int_arg, pos_real, real_array

__all__ = ["saturation_fraction", "offset_overshoot", "overshoot_rate", "exp2_offset_scale"]

_STEP = 2e-3  # grid step of the running max's density, sigma units
_PAD = 12.0  # grid margin, sigma units: Phi(-12) = 2e-33 per key


def tau_arg(tau) -> float:
    """τ, checked: a finite real >= 0 (log2 units)."""
    if isinstance(tau, bool) or not isinstance(tau, (int, float, np.integer, np.floating)) \
            or not math.isfinite(tau) or tau < 0:
        raise ValueError(f"tau={tau!r} is not allowed; allowed: a finite real number >= 0 (log2 units)")
    return float(tau)


class _Block:
    """One block's keys, groups ``[(count, mean)]`` in sigma units, under threshold T and margin h."""

    def __init__(self, groups, T: float, h: float):
        self.groups, self.T, self.h = [(c, mu) for c, mu in groups if c > 0], T, h

    def _log_cdf(self, y):
        return sum(c * special.log_ndtr(y - mu) for c, mu in self.groups)

    def _f_groups(self, t):
        """Density that the block's max is at t and is a key of group g, for each group."""
        lf = self._log_cdf(t)
        return [c * np.exp(-0.5 * (t - mu) ** 2 - 0.5 * math.log(2 * math.pi) - special.log_ndtr(t - mu) + lf)
                for c, mu in self.groups]

    def stay(self, x):
        """P(the block leaves a max x stale) = F_B(x + T)."""
        return np.exp(self._log_cdf(np.asarray(x, dtype=float) + self.T))

    def density(self, y):
        return sum(self._f_groups(np.asarray(y, dtype=float)))

    def stale(self, x):
        """E[saturated keys; the block is stale] given the max x before it."""
        x = np.asarray(x, dtype=float)
        if self.h >= self.T:
            return np.zeros_like(x)
        a = x + self.T
        lf = self._log_cdf(a)
        return sum(c * (special.ndtr(mu - x - self.h) - special.ndtr(mu - a))
                   * np.exp(lf - special.log_ndtr(a - mu)) for c, mu in self.groups)

    def moved(self, t):
        """Integrand of G: E[saturated keys] density over the new max t (only for h < 0)."""
        q = [-np.expm1(special.log_ndtr(t + self.h - mu) - special.log_ndtr(t - mu)) for _, mu in self.groups]
        others = sum(c * qg for (c, _), qg in zip(self.groups, q))
        return sum(fg * (1.0 + others - qg) for fg, qg in zip(self._f_groups(t), q))


def _block_arrays(groups, T: float, h: float, y: np.ndarray, start: float) -> dict:
    """What the walk needs of one block, on the grid ``y`` and at the starting point ``start``."""
    blk = _Block(groups, T, h)
    fin = math.isfinite(start)
    out = {"stay": blk.stay(y), "density": blk.density(y), "stale": blk.stale(y),
           "stay_start": float(blk.stay(start)) if fin else 0.0,
           "sat_start": float(blk.stale(start)) if fin else 0.0}
    if h < 0:  # keys within |h| of a new max saturate too: G on the grid, then at x + T
        tail = cumulative_trapezoid(blk.moved(y)[::-1], -y[::-1], initial=0.0)[::-1]
        out["moved"] = np.interp(y + T, y, tail, right=0.0)
        out["sat_start"] += float(np.interp(start + T, y, tail, right=0.0)) if fin else float(tail[0])
    return out


@scale_keyword
def offset_overshoot(m, scale: float, fmt: str | FP8Format = "e4m3fn") -> np.ndarray:
    """True where the key AT the max m saturates under ``scale_mode="exp2_offset"``: float32
    ``a = m·LOG2E``, ``b = a - log2_scale(S)``, ``x = exp2(a - b) > max_finite`` (step 2's x at s = m,
    in float32 in the contract's order). ``m`` is rounded to float32 first; any shape."""
    S = scale  # the S of the formulas
    m32 = np.asarray(m, dtype=np.float64).astype(np.float32)
    a = m32 * np.float32(LOG2E)
    x = np.exp2(a - (a - np.float32(log2_scale(S))))
    return x > np.float32(fmt_arg(fmt).max_finite)


_RATE_STEP, _RATE_SPAN, _RATE_WIDTH = 0.05, 128.0, 4096  # rate grid (score units), its half-span, floats averaged


@lru_cache(maxsize=32)
def _rate_table(S: float, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    m = np.arange(-_RATE_SPAN, _RATE_SPAN + _RATE_STEP / 2, _RATE_STEP).astype(np.float32)
    bits = m.view(np.int32)[:, None] + np.arange(_RATE_WIDTH, dtype=np.int32)  # consecutive float32 from m
    return m.astype(np.float64), offset_overshoot(bits.view(np.float32), S, fmt).mean(axis=1)


@scale_keyword
def overshoot_rate(m, scale: float, fmt: str | FP8Format = "e4m3fn") -> np.ndarray:
    """The local rate of :func:`offset_overshoot` at scores ``m``: its mean over 4096 consecutive float32
    values, tabulated every 0.05 on ``|m| <= 128`` and interpolated (0 outside: far beyond any score here).
    All zeros when ``log2 S`` is an integer (S a power of two: x at the max is S exactly)."""
    S = scale  # the S of the formulas
    f = fmt_arg(fmt)
    if float(log2_scale(S)).is_integer():
        return np.zeros(np.shape(m))
    grid, rate = _rate_table(float(S), f.name)
    return np.interp(np.asarray(m, dtype=float), grid, rate, left=0.0, right=0.0)


def _walk(blocks, T: float, h: float, start: float, rate=None) -> float:
    """Expected saturated keys of the whole walk; ``start``: the max before the first block (-inf or D);
    ``rate``: None, or a function of the grid y giving the saturated keys a move of the max to y adds."""
    means = [mu for groups in blocks for _, mu in groups] + ([start] if math.isfinite(start) else [])
    y = np.arange(min(0.0, *means) - _PAD, max(0.0, *means) + _PAD + _STEP, _STEP)
    r = None if rate is None else rate(y)
    cache = {}  # most blocks are alike: compute each kind once
    f, w, total = np.zeros_like(y), 1.0, 0.0  # density of the max, and the point mass at start
    for groups in blocks:
        key = tuple(groups)
        if key not in cache:
            cache[key] = _block_arrays(groups, T, h, y, start)
        b = cache[key]
        total += trapezoid(f * (b["stale"] + b.get("moved", 0.0)), y) + w * b["sat_start"]
        # P(M < y - T): the density's part, then the point mass's
        below = np.interp(y - T, y, cumulative_trapezoid(f, y, initial=0.0), left=0.0)
        moves = b["density"] * (below + w * (y - T > start))  # density of a move of the max to y
        if r is not None:
            total += trapezoid(moves * r, y)
        f = f * b["stay"] + moves
        w *= b["stay_start"]
    return total


def _walk_blocks(n: int, block_n: int, order: str, k: int, D: float):
    """The groups ``[(count, mean)]`` of every block in visiting order; k sink keys at mean D in block 0."""
    blocks = []
    for lo in range(0, n, block_n):
        cnt = min(lo + block_n, n) - lo
        blocks.append([(cnt - k, 0.0), (k, D)] if lo == 0 and k else [(cnt, 0.0)])
    return blocks if order == "forward" else blocks[::-1]


def _walk_terms(tau: float, S: float, f: FP8Format, sigma: float, scale_mode: str):
    """``(T, h, rate)`` of the walk, in sigma units: the threshold, the margin ``ln(max_finite / x)``
    of x at the max (float32, exp2_offset's applied S) and exp2_offset's float32 overshoot at each new
    max (None when it cannot happen: integer log2 S, or h < 0, where that key is counted already)."""
    S_applied = S
    if scale_mode == "exp2_offset":
        S_applied = exp2_offset_scale(S)
    x_max = float32(S_applied) if S_applied < 3.4e38 else S_applied  # x of the key at the max, in float32
    T, h = tau * math.log(2.0) / sigma, math.log(f.max_finite / x_max) / sigma
    rate = None
    if scale_mode == "exp2_offset" and h >= 0 and not float(log2_scale(S)).is_integer():
        rate = lambda y: overshoot_rate(y * sigma, S, f)  # noqa: E731
    return T, h, rate


@scale_keyword
def saturation_fraction(tau: float, scale: float, fmt: str | FP8Format = "e4m3fn", sigma: float = 1.0, *,
                        n: int = 1024, block_n: int = 64, order: str = "forward", delta=None,
                        scale_mode: str = "multiply", sink_kind: str = "keys", ksink: int = 4):
    """Expected fraction of a row's keys (sink keys included) whose ``x > max_finite``, τ in log2 units.

    The model and the recursion are the module docstring's. ``x`` of the key at the max is
    ``float32(S)`` (multiply) or ``float32(exp2_offset_scale(S))`` (exp2_offset: the float32 exp2
    of ``log2_scale(S)``; 448.0 for S = 448), and that S is the one used.

    The sink, with ``delta`` = Δ (None: no sink; use None for a learned logit with
    ``sink_mode="final"``, which never enters the walk):

    * ``sink_kind="keys"``: ``ksink`` keys at positions ``0..ksink-1`` (block 0) score
      ``Δ + N(0, sigma^2)``. Forward, they fix m at block 0, so later keys saturate only beyond
      ``m + h`` with m near Δ (a large Δ stops saturation); in reverse they come last and, if
      their block is stale, themselves saturate.
    * ``sink_kind="logit"``: a learned logit Δ seeds the max (``sink_mode="init"``): the walk
      starts at ``m = Δ`` instead of ``-inf``, in either order.

    With ``S·2^τ <= max_finite`` the answer is 0 (see :func:`pcast.theory.policy.best_lazy_scale`),
    and with τ = 0 (eager) unless ``S > max_finite``, except for exp2_offset with a non-integer
    ``log2 S``: the key at each new max may overshoot in float32 (:func:`~pcast.theory.lazy.overshoot_rate`, the module
    docstring); for S = 448 maxima between about 1 and 17.19 never overshoot, maxima from 17.19
    to 22.18 do half the time.

    Args:
        tau: τ >= 0. S: the scale, > 0. fmt: FP8 format. sigma: score standard deviation, > 0.
        n, block_n: keys and keys per block (>= 1). order: "forward" or "reverse".
        delta: None, a real, or an array-like of reals (the result has its shape).
        scale_mode: "multiply" or "exp2_offset". sink_kind: "keys" or "logit".
        ksink: sink keys for ``sink_kind="keys"`` with a delta, ``1 <= ksink <= min(block_n, n)``.

    Raises:
        ValueError: naming the argument and what is allowed.
    """
    S = scale  # the S of the formulas
    tau, f, S, sigma = tau_arg(tau), fmt_arg(fmt), pos_real(S, "scale"), pos_real(sigma, "sigma")
    n, block_n = int_arg(n, "n", 1), int_arg(block_n, "block_n", 1)
    for name, val, allowed in (("order", order, ORDERS), ("scale_mode", scale_mode, SCALE_MODES),
                               ("sink_kind", sink_kind, SINK_KINDS)):
        if val not in allowed:
            raise ValueError(f"{name}={val!r} is not allowed; allowed: {', '.join(allowed)}")
    d_arr = None if delta is None else real_array(delta, "delta")
    k = int_arg(ksink, "ksink", 1) if sink_kind == "keys" and d_arr is not None else 0
    if k > min(block_n, n):
        raise ValueError(f"ksink={ksink!r} is not allowed; allowed: an integer, 1 <= ksink <= min(block_n, n) "
                         f"= {min(block_n, n)}")
    T, h, rate = _walk_terms(tau, S, f, sigma, scale_mode)
    walk = h < T or rate is not None
    if d_arr is None:
        return min(_walk(_walk_blocks(n, block_n, order, 0, 0.0), T, h, -math.inf, rate) / n, 1.0) if walk else 0.0
    res = np.zeros_like(d_arr)
    for idx, dv in np.ndenumerate(d_arr):
        D = float(dv) / sigma
        if walk:
            blocks = _walk_blocks(n, block_n, order, k, D)
            res[idx] = min(_walk(blocks, T, h, D if sink_kind == "logit" else -math.inf, rate) / n, 1.0)
    return float(res) if res.ndim == 0 else res


@scale_keyword
def exp2_offset_scale(scale) -> float:
    """The S that ``scale_mode="exp2_offset"`` really applies: ``2**log2_scale(S)`` in float64.

    exp2_offset computes ``x = exp2(s·LOG2E - (m·LOG2E - log2_scale(S)))``, so at ``s = m`` the
    factor is ``2^log2_scale(S)``, where ``log2_scale(S)`` is float64 ``log2 S`` rounded once to
    float32 (:func:`pcast.contract.log2_scale`). For a power of two ``log2 S`` is an integer,
    exact in float32, and the result is exactly S. Otherwise it differs by the float32 rounding
    of the exponent, at most ``2^-24·|log2 S|·ln 2`` relative: for S = 448,
    ``log2_scale(448) = 8.807354927062988`` (float64 log2: 8.807354922057604) and the applied S is
    ``448.0000015543216``, 3.47e-9 relative above 448; rounded to float32 it is 448.0 again.

    Accepts a scalar (returns a float) or an array-like (returns an ndarray).

    Raises:
        ValueError: unless every S is a finite real > 0.
    """
    S = scale  # the S of the formulas
    arr = real_array(S, "scale", positive=True)
    out = np.vectorize(lambda s: 2.0 ** log2_scale(float(s)), otypes=[np.float64])(arr)
    return float(out) if out.ndim == 0 else out
