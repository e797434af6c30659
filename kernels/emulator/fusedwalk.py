"""Step 2 compiled with numba: the walk of one row over its blocks, decided on exact values.

Each function mirrors an eager one, operation for operation in float32 (numba without fast-math keeps IEEE
float32 operations as written: no contraction, no reassociation):

* :func:`rule`: :func:`pcast.emulator.exact.max_rule` (cumulative max, or the max that moves past τ);
* :func:`walk_row`: :func:`pcast.emulator.exact.walk_exact`, ``_setter_maxima``, ``walked_max`` and
  :meth:`~pcast.emulator.exact.Chunk.make`: the max in force at each block, float32 and exact, and the bound
  on x's relative error that step 3's test (:mod:`pcast.emulator.fusedcast`) takes.

Float64 values (exact scores, exact maxima) are those of the eager path up to their last bit: a dot product
summed in another order. The records (:class:`~pcast.emulator.packing.Row` and the others) are
:mod:`pcast.emulator.packing`'s.
"""

from __future__ import annotations

import numba
import numpy as np

from pcast.contract import LOG2E
from pcast.emulator.fusedmath import next_down, score64

__all__ = ["rule", "walk_row", "final_max"]

_F = np.float32
_LOG2E = _F(LOG2E)
_LOG2E_D = float(LOG2E)
_ZERO = _F(0.0)
_NEG = _F(-np.inf)
_U = 2.0 ** -23
# inlined into the caller in numba IR: the records and their arrays pass without reference counting per call
_jit = numba.njit(fastmath=False, cache=True, inline="always")


@_jit
def _block_max64(row, head, st, j, e_j):
    """The exact maximum of block j: its keys within 2E of its float32 maximum, in float64."""
    bn, s, q, keys = st.bn, row.s, row.q, head.keys  # (arrays taken out of their records once, not per key)
    lo = next_down(_F(np.float64(row.bm[j]) - 2.0 * e_j))
    best = -np.inf
    for i in range(bn):
        v = s[j * bn + i]
        if v >= lo and v > _NEG:
            e = score64(q, keys, j * bn + i, st.d, st.sm_pow2, st.sm32)
            best = e if e > best else best
    return best


@_jit
def rule(bm, out, rev, cummax, tau, init, log2e):
    """Step 2's rule over block maxima bm (float32 or float64), the max a row starts with ``init``."""
    n = bm.shape[0]
    m = init
    for jj in range(n):
        j = n - 1 - jj if rev else jj
        b = bm[j]
        if cummax:
            m = b if b > m else m
        elif m == -np.inf or (b - m) * log2e > tau:
            m = b
        out[j] = m


@_jit
def _near(bm, m, e, rev, init, tau_term):
    """Whether a decision of the float32 walk lies within its margin of going the other way."""
    n = bm.shape[0]
    prev = init
    for jj in range(n):
        j = n - 1 - jj if rev else jj
        if prev != _NEG:
            gap = abs(np.float64(bm[j]) - np.float64(prev) - tau_term)
            if gap <= 3.0 * e[j] + 2.0 ** -20 * (abs(np.float64(bm[j])) + 1.0):
                return True
        prev = m[j]
    return False


@_jit
def _exact_walk(row, head, st, sc, init):
    """The walk redone on the exact block maxima (a float32 decision lies near its boundary): sc.m and sc.mx
    the max in force at each block; returns the largest error of a float32 max."""
    nb, bm, bm64, m, mx, e = sc.m.shape[0], row.bm, sc.bm64, sc.m, sc.mx, sc.e
    for j in range(nb):
        bm64[j] = _block_max64(row, head, st, j, e[j])
    rule(bm64, mx, st.reverse, st.cummax, np.float64(_F(st.tau)), np.float64(init), _LOG2E_D)
    err = 0.0
    for j in range(nb):
        v = init
        for k in range(nb):
            if mx[j] == bm64[k]:
                v = bm[k]
                break
        m[j] = v
        if mx[j] != -np.inf:
            err = max(err, abs(np.float64(v) - mx[j]))
    return err


@_jit
def _setter_maxima(row, head, st, sc, init):
    """The exact max in force at each block (sc.mx) of the float32 walk sc.m: the exact maximum of the first block
    visited whose maximum is m[j] (searched when m moves); returns the largest error of a float32 max."""
    nb, bm, bm64, m, mx, e, rev = sc.m.shape[0], row.bm, sc.bm64, sc.m, sc.mx, sc.e, st.reverse
    err = 0.0
    for k in range(nb):
        bm64[k] = np.nan
        if m[k] == bm[k] and bm[k] != _NEG:
            bm64[k] = _block_max64(row, head, st, k, e[k])
            err = max(err, abs(np.float64(bm[k]) - bm64[k]))
    last = _NEG
    found = False
    v = np.float64(init)
    for jj in range(nb):
        j = nb - 1 - jj if rev else jj
        if not (found and m[j] == last):
            v = np.float64(init)
            found = False
            for kk in range(jj + 1):
                k = nb - 1 - kk if rev else kk
                if bm[k] == m[j]:
                    v = bm64[k]
                    found = True
                    break
            last = m[j]
        mx[j] = v
    return err


@_jit
def walk_row(row, head, st, sc):
    """Step 2 of one row decided on exact values, from its block maxima row.bm: sc.m (float32) and sc.mx (float64
    exact) the max in force at each block; returns (a, cc), the bound on x's relative error
    (:meth:`pcast.emulator.exact.Chunk.make`)."""
    nb, m, e, d, kn = sc.m.shape[0], sc.m, sc.e, st.d, head.kn
    for j in range(nb):
        e[j] = ((d + 2) * _U) * ((row.qn * kn[j]) * st.sm)
    init = _F(st.seed) if st.sink_init else _NEG
    rule(row.bm, m, st.reverse, st.cummax, _F(st.tau), init, _LOG2E)
    if _near(row.bm, m, e, st.reverse, init, st.tau / _LOG2E_D if st.tau != 0.0 else 0.0):
        err = _exact_walk(row, head, st, sc, init)
    else:
        err = _setter_maxima(row, head, st, sc, init)
    mabs = _ZERO
    for j in range(nb):
        mabs = max(mabs, abs(m[j])) if m[j] != _NEG else mabs
    a = (1.01 * (d + 1) * _U / 2 + 2 * _U) * row.qn * st.sm
    return a, 1.01 * err + 4 * _U * np.float64(mabs) + _U * st.offset + 8 * _U


@_jit
def final_max(m, rev):
    """The row's final max, the last block's in walk order (-inf as 0)."""
    mfin = m[0] if rev else m[m.shape[0] - 1]
    return _ZERO if mfin == _NEG else mfin
