"""Step 3 compiled with numba: the FP8 cast of one row and its exact-decision test, for both compiled paths.

* :func:`cast_row`: x = u·S rounded onto the FP8 grid (:func:`pcast.emulator.fusedmath.round_mark`, the same
  float32 operations as :func:`pcast.formats.rounding.quantize_fast`), and the keys whose x lies within
  ``δ·x`` of a rounding midpoint (or of ``max_finite``) marked to be decided on their float64 value. The eager
  path's cast (:func:`pcast.emulator.compiled.cast_and_mark`) and the row pass
  (:mod:`pcast.emulator.fusedrows`) both run it.
* :func:`cast_counts`: the row's saturated and marked keys, counted after the cast;
* :func:`exact_marked`: the row pass's marked keys decided on their exact x (:func:`x64`), as
  :meth:`pcast.emulator.exact.Chunk.cast` decides them.

The records (:class:`~pcast.emulator.packing.Grid` and the others) are :mod:`pcast.emulator.packing`'s.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from pcast.contract import LOG2E
from pcast.emulator.fusedmath import round_exact, round_mark, score64

__all__ = ["cast_row", "cast_counts", "x64", "exact_marked"]

_F = np.float32
_LOG2E_D = float(LOG2E)
# inlined into the caller in numba IR: the records and their arrays pass without reference counting per call
_jit = numba.njit(fastmath=False, cache=True, inline="always")


@_jit
def cast_row(u, scale, kf, a, c, grid, chk, pq, mark):
    """One row: ``pq = round(x)``, x = u·``scale``, on ``grid`` (values clamped to ±max_finite when ``chk``, else
    to ±``grid.top``), and ``mark = 1`` where ``|x − pq| + δ·x >= h/2`` (h the grid step at x) and x > 0, or
    (``chk``) ``|x − max_finite| <= 2·max_finite·δ``; ``δ = a·kf[j] + c``. A flat loop, so that it vectorises
    (:func:`cast_counts` counts after it)."""
    maxf = grid.max_finite
    top = maxf if chk else grid.top
    rnd, rnd_min, half, mn = grid.rnd, grid.rnd_min, grid.half, grid.min_normal
    for t in range(u.shape[0]):
        qv, mk = round_mark(u[t] * scale, a * kf[t] + c, rnd, rnd_min, half, mn, top, maxf, chk)
        pq[t] = qv
        mark[t] = np.uint8(mk)


@_jit
def cast_counts(u, scale, grid, chk, mark):
    """(#x > max_finite when ``chk``, #marked) of a row :func:`cast_row` cast, x = u·``scale``."""
    nsat = 0
    if chk:
        maxf = grid.max_finite
        for t in range(u.shape[0]):
            nsat += u[t] * scale > maxf
    nmark = 0
    for t in range(mark.shape[0]):
        nmark += mark[t]
    return nsat, nmark


@_jit
def x64(row, head, st, mx, t, scale):
    """The exact x of key t: ``exp(s − m)·S``, or ``exp2((s − m)·LOG2E)·S`` (exp2_offset), float64; mx the exact
    max in force at each block."""
    sv = score64(row.q, head.keys, t, st.d, st.sm_pow2, st.sm32)
    mm = mx[t // st.bn]
    mm = 0.0 if mm == -np.inf else mm
    if st.exp2:
        return np.exp2((sv - mm) * _LOG2E_D) * scale
    return math.exp(sv - mm) * scale


@_jit
def exact_marked(row, head, st, grid, sc, scale, chk):
    """The marked keys (sc.mark) of a row decided on their exact x, sc.pq redone; returns the change to
    #saturated."""
    u, pq, mark, mx = sc.u, sc.pq, sc.mark, sc.mx
    maxf = np.float64(grid.max_finite)
    dsat = 0
    words = mark.view(np.uint64)
    for wi in range(words.shape[0]):
        if not words[wi]:
            continue
        for t in range(8 * wi, 8 * wi + 8):
            if mark[t]:
                x = u[t] if st.exp2 else u[t] * scale
                xe = x64(row, head, st, mx, t, np.float64(scale))
                if chk:
                    dsat += int(xe > maxf) - int(x > grid.max_finite)
                pq[t] = _F(round_exact(xe, grid.man_bits, grid.emin, maxf))
    return dsat
