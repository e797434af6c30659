"""The V-cast floor: what an FP8 V costs the attention output (``v_fmt``), with P unrounded.

Re-exported by :mod:`pcast.theory.policy`. The operand cast of docs/interfaces.md:
``v' = quantize(v / s_v, v_fmt)·s_v`` with ``s_v = amax|v| / max_finite`` over one (batch, head)
(``v_scale="tensor"``) or a given ``s_v``. Model: the ``N = n·d`` entries of V are iid
``N(0, 1)``, independent of the softmax weights ``w_ij`` (which come from q and k only).

Derivation. The output error of row i, coordinate t, is ``sum_j w_ij e_jt`` with
``e = v' - v``. Flipping the sign of one entry flips its error and leaves ``s_v`` alone, so
``E[e_j e_j'] = 0`` for j != j', and the entries are exchangeable, so

    E (sum_j w_ij e_jt)^2 = E[e^2] · sum_j w_ij^2,        E (sum_j w_ij v_jt)^2 = sum_j w_ij^2.

``E[e^2]`` comes from the grid (:func:`v_rounding_mse`): for a fixed scale s every value of the
cell of grid point g (between the midpoints to its neighbours; beyond ``s·max_finite`` for
saturation) rounds to ``s·g``, and ``int_a^b (v - c)^2 phi(v) dv = [(1 + c^2) Phi(v) - (v - 2c) phi(v)]_a^b``,
summed over the cells of both signs. With ``"tensor"`` the scale is ``A / max_finite`` for the
amax A of the N entries: given A, the entry at the max is exact and the other ``N - 1`` are
``N(0, 1)`` truncated to ``|v| <= A``; A has density ``N·2 phi(a)·(2 Phi(a) - 1)^(N-1)``, over
which the conditional moment is averaged (trapezoid rule on 801 points between the 1e-15 and
1 - 1e-15 quantiles of A).
"""

from __future__ import annotations

import math
import numbers

import numpy as np
from scipy import optimize, special
from scipy.integrate import trapezoid
from scipy.stats import norm

from pcast.contract import OPERAND_SCALES
from pcast.formats import FP8Format, get_format
from pcast.theory.collapse import int_arg, real_array

__all__ = ["v_rounding_mse", "v_cast_floor"]


def _positive_grid(f: FP8Format) -> np.ndarray:
    """0 and the positive values of the format, ascending (subnormals, then the normal binades)."""
    step = 1 << f.man_bits
    sub = [i * f.min_subnormal for i in range(step)]
    normal = [(1 + i / step) * 2.0**e for e in range(f.emin, f.emax + 1) for i in range(step)]
    return np.array(sub + [x for x in normal if x <= f.max_finite])


def _cells_mse(s, grid: np.ndarray, top) -> np.ndarray:
    """``2·sum over cells int (v - s·g)^2 phi(v) dv`` for each scale of ``s``; the top cell ends at ``top``."""
    s = np.atleast_1d(np.asarray(s, dtype=float))
    top = np.broadcast_to(np.asarray(top, dtype=float), s.shape)
    lower = s[:, None] * np.concatenate([[0.0], (grid[1:] + grid[:-1]) / 2])
    upper = np.concatenate([lower[:, 1:], top[:, None]], axis=1)
    c = s[:, None] * grid

    def anti(v):  # antiderivative of (v - c)^2 phi(v); phi(60) = 0 and Phi(60) = 1 in float64
        v = np.minimum(v, 60.0)
        return (1 + c * c) * special.ndtr(v) - (v - 2 * c) * norm.pdf(v)

    return 2 * (anti(upper) - anti(lower)).sum(-1)


def _amax_quantile(N: int, p: float) -> float:
    """The a with ``(2 Phi(a) - 1)^N = p``."""
    g = lambda a: N * math.log1p(-2 * special.ndtr(-a)) - math.log(p)  # noqa: E731 (increasing in a)
    return optimize.brentq(g, 1e-12, 60.0, xtol=1e-13)


def v_rounding_mse(v_fmt: str | FP8Format = "e4m3fn", *, n: int = 1024, d: int = 64, v_scale="tensor") -> float:
    """``E[e^2]`` per entry, ``e = v' - v``, for ``v ~ N(0, 1)`` cast with ``v_scale`` (module docstring).

    ``v_scale="tensor"``: the amax of the ``n·d`` entries of one (batch, head) sets the scale.
    A float: that fixed scale (values beyond ``s·max_finite`` saturate, and that error counts).
    e4m3fn, n = 1024, d = 64: 6.99e-4 (3 mantissa bits: a step of 2^-3 of the binade's base, so
    ``step^2/12`` is between 1.3e-3 and 3.3e-4 of v^2 across a binade); e5m2: 2.77e-3.

    Raises:
        ValueError: naming the argument and what is allowed.
    """
    f = get_format(v_fmt, argname="v_fmt")
    n, d = int_arg(n, "n", 1), int_arg(d, "d", 1)
    grid = _positive_grid(f)
    if not (isinstance(v_scale, str) and v_scale in OPERAND_SCALES):
        if isinstance(v_scale, bool) or not isinstance(v_scale, numbers.Real) or not math.isfinite(v_scale) \
                or v_scale <= 0:
            raise ValueError(f"v_scale={v_scale!r} is not allowed; allowed: {', '.join(OPERAND_SCALES)} "
                             "or a finite real number > 0")
        return float(_cells_mse(float(v_scale), grid, math.inf)[0])
    N = n * d
    if N == 1:
        return 0.0  # the only entry is the amax: exact
    a = np.linspace(_amax_quantile(N, 1e-15), _amax_quantile(N, 1 - 1e-15), 801)
    mass = 1 - 2 * special.ndtr(-a)  # P(|v| <= a)
    dens = N * 2 * norm.pdf(a) * np.exp((N - 1) * np.log(mass))
    cond = (N - 1) / N * _cells_mse(a / f.max_finite, grid, a) / mass
    return float(trapezoid(dens * cond, a) / trapezoid(dens, a))


def v_cast_floor(weights_sq_sum=1.0, v_fmt: str | FP8Format = "e4m3fn", *, n: int = 1024, d: int = 64,
                 v_scale="tensor", relative: bool = True) -> float:
    """The error an FP8 V adds to the attention output when P is not rounded: the V-cast floor.

    ``weights_sq_sum`` is ``sum_j w_ij^2`` of each query row (the attention weights' squared sum; a
    scalar or an array over rows). The pipeline's ``mse`` is the mean over rows and coordinates of
    the squared error, and its ``rel_mse`` is ``mse / mean(reference_out^2)``
    (:mod:`pcast.pipeline.runs`). Under the model (module docstring):

    * ``relative=False``: the expected ``mse``, ``E[e^2]·mean(weights_sq_sum)``;
    * ``relative=True`` (default): the expected ``mse`` over the expected ``mean(reference_out^2)``,
      ``E[e^2]·mean(W2) / mean(W2) = E[e^2]``: for ``N(0, 1)`` values the relative floor does not
      depend on the weights at all. The weights matter only in the absolute form.

    Not modelled: sink keys whose values are rescaled (``sink_v_scale != 1``), and the Q, K casts
    (``qk_fmt``) that the pipeline's ``floor_rel_mse`` also contains.

    Raises:
        ValueError: naming the argument and what is allowed (weights_sq_sum: finite reals > 0).
    """
    w2 = real_array(weights_sq_sum, "weights_sq_sum", positive=True)
    if not isinstance(relative, bool):
        raise ValueError(f"relative={relative!r} is not allowed; allowed: True or False")
    e2 = v_rounding_mse(v_fmt, n=n, d=d, v_scale=v_scale)
    return e2 if relative else e2 * float(np.mean(w2))
