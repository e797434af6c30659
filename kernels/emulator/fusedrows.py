"""The compiled row pass of :mod:`pcast.emulator.fused`: steps 2-4 of one chunk of rows, a row at a time, in the
contract's order.

For each row: step 2's walk (:func:`pcast.emulator.fusedwalk.walk_row`), the unrounded u of every key
(:func:`_unrounded_row`: :func:`pcast.emulator.core._unrounded` with
:meth:`~pcast.emulator.exact.Chunk.terms_keys`), then at each scale step 3's cast and its exact decisions
(:mod:`pcast.emulator.fusedcast`) and step 4's sums (:func:`_scale_row`: step 4 of
:func:`pcast.emulator.core._rows`), on :mod:`pcast.emulator.fusedmath`'s float32 operations. Settings travel
as :mod:`pcast.emulator.packing`'s named records.
"""

from __future__ import annotations

import numba
import numpy as np

from pcast.contract import LOG2E
from pcast.emulator.fusedcast import cast_counts, cast_row, exact_marked, x64
from pcast.emulator.fusedmath import exp, exp2, tree, tree_from
from pcast.emulator.fusedwalk import final_max, walk_row
from pcast.emulator.packing import (SATURATED, TERMS, TERMS_SINK, UNDERFLOW, UNDERFLOW_SINK, Head, Row,
                                    Scratch)

__all__ = ["kernel"]

_F = np.float32
_LOG2E = _F(LOG2E)
_ZERO, _HALF, _ONE = _F(0.0), _F(0.5), _F(1.0)
_NEG = _F(-np.inf)
_UP = 1.0 + 2.0 ** -20
#: tasks of the parallel loop over a chunk's rows (each with its own scratch arrays)
_TASKS = 16
# inlined into the caller in numba IR: the records and their arrays pass without reference counting per call
_jit = numba.njit(fastmath=False, cache=True, inline="always")


@_jit
def _unrounded_row(row, head, st, sc, s0):
    """Step 2's unrounded u of every key (p, or exp2_offset's x) into sc.u; a key whose ``s − m`` lies within
    0.5 of exp's underflow takes the float32 of its exact value (searched in the blocks whose bound
    ``2·‖q‖·max‖k‖·sm + |m| + 1`` reaches there). Returns #u > 0; the block sums of u into sc.lblk_u (unless
    the row sum is rounded)."""
    m, u, bn, s, kn, mx, lblk_u, tb = sc.m, sc.u, st.bn, row.s, head.kn, sc.mx, sc.lblk_u, sc.tb
    pos = 0
    log2s = _F(st.log2_s)
    edge = _F(st.exp_edge)
    reach = abs(st.exp_edge) - 1.0
    for j in range(m.shape[0]):
        mj = m[j]
        ms = _ZERO if mj == _NEG else mj
        off = ms * _LOG2E - log2s
        b0 = j * bn
        sj, uj = s[b0:b0 + bn], u[b0:b0 + bn]
        if st.exp2:
            for i in range(bn):
                uj[i] = exp2(sj[i] * _LOG2E - off)
        else:
            for i in range(bn):
                uj[i] = exp(sj[i] - ms)
        if 2.0 * ((row.qn * kn[j]) * st.sm) + abs(np.float64(mj)) + 1.0 >= reach:
            near = 0
            for i in range(bn):
                near += abs((sj[i] - ms) - edge) <= _HALF
            if near:
                for i in range(bn):
                    if abs((sj[i] - ms) - edge) <= _HALF:
                        uj[i] = _F(x64(row, head, st, mx, b0 + i, s0 if st.exp2 else 1.0))
        for i in range(bn):
            pos += uj[i] > _ZERO
        if not st.rowsum_rounded:
            lblk_u[j] = tree_from(u, b0, bn, tb)
    return pos


@_jit
def _count_pos(x, ks):
    """#x > 0 among the first ks entries."""
    a = 0
    for t in range(min(ks, x.shape[0])):
        a += x[t] > _ZERO
    return a


@_jit
def _scale_row(row, head, st, grid, sc, bound, scale, chk, pw, i, r):
    """Steps 3-4 of row r at scale i, ``bound`` = (a, cc) the bound on x's relative error: p_q times its
    block's weight into pw[i, r]; returns (l, #p_q > 0 among the sink keys, among the others, #saturated)."""
    m, pq, u, mark, bn = sc.m, sc.pq, sc.u, sc.mark, st.bn
    wl, lblk_u, tb = sc.wl, sc.lblk_u, sc.tb
    nb = m.shape[0]
    np_ = nb * bn
    exp2_ = st.exp2
    nsat = 0
    if st.cast:
        a, cc = bound
        xs = _ONE if exp2_ else scale
        cast_row(u[:np_], xs, head.kf, _F(a * _UP), _F(cc * _UP), grid, chk, pq[:np_], mark[:np_])
        nsat, nmark = cast_counts(u[:np_], xs, grid, chk, mark[:np_])
        if nmark:
            nsat += exact_marked(row, head, st, grid, sc, scale, chk)
    else:
        for t in range(np_):
            pq[t] = u[t] if exp2_ else u[t] * scale
    ppos = 0
    mfin = final_max(m, st.reverse)
    for j in range(nb):
        b0 = j * bn
        if st.rowsum_rounded:
            lb = tree_from(pq, b0, bn, tb)
            lb = lb if exp2_ else lb / scale
        else:
            lb = lblk_u[j]
        w = exp2(m[j] * _LOG2E - mfin * _LOG2E) if exp2_ else exp(m[j] - mfin)
        wl[j] = lb * w
        pj, pwj = pq[b0:b0 + bn], pw[i, r, b0:b0 + bn]
        for t in range(bn):
            v = pj[t]
            ppos += v > _ZERO
            pwj[t] = v * w
    ppos_s = _count_pos(pq, st.ks)
    return tree(wl, nb), ppos_s, ppos - ppos_s, nsat


@_jit
def _row(row, head, st, grid, scales, sc, pw, out, r):
    """Every step of row r (``row``), p_q times its block weight into pw[i, r] (scale i), its row sums and counts
    into ``out``; ``sc``: scratch arrays. Returns the final max (-inf as 0)."""
    values, sats, l, counts = scales.values, scales.sats, out.l, out.counts
    bound = walk_row(row, head, st, sc)
    pos = _unrounded_row(row, head, st, sc, np.float64(values[0]))
    pos_s = _count_pos(sc.u, st.ks)
    pos_ns = pos - pos_s
    for i in range(values.shape[0]):
        li, pp_s, pp_ns, nsat = _scale_row(row, head, st, grid, sc, bound, values[i], sats[i], pw, i, r)
        l[i, r] = li
        counts[i, r, TERMS] = pos_ns
        counts[i, r, TERMS_SINK] = pos_s
        counts[i, r, UNDERFLOW] = pos_ns - pp_ns
        counts[i, r, UNDERFLOW_SINK] = pos_s - pp_s
        counts[i, r, SATURATED] = nsat
    return final_max(sc.m, st.reverse)


@_jit
def _scratch(nb, np_, bn):
    """One task's scratch arrays, its own allocations (:func:`_rows`)."""
    n8 = -(-np_ // 8) * 8
    return Scratch(np.empty(nb, np.float32), np.empty(nb), np.empty(nb), np.empty(nb), np.empty(nb, np.float32),
                   np.empty(nb, np.float32), np.empty(n8, np.float32), np.empty(n8, np.float32),
                   np.zeros(n8, np.uint8), np.empty(max(bn, nb), np.float32))


def _rows(s, q, qn, bm, head, st, grid, scales, out):
    """Every row of the chunk (scores s, queries q, their norms qn, block maxima bm), in parallel over a fixed
    number of tasks (each row on its own: the results do not depend on how rows are shared out). A task reads
    its rows of s and writes its rows of ``out.pw`` in place, and works on its own copy of the key factors (which
    every row reads per key: numba counts references to an array atomically, so views of one shared array
    contend)."""
    nr, np_ = s.shape
    nt = min(nr, _TASKS)
    bn, pw, mf = st.bn, out.pw, out.mf  # (arrays written in the parallel loop: taken out of their record first)
    for ti in numba.prange(nt):
        sc = _scratch(np_ // bn, np_, bn)
        hd = Head(head.keys, head.kn, head.kf.copy())
        for r in range(ti * nr // nt, (ti + 1) * nr // nt):
            mf[r] = _row(Row(s[r], q[r], qn[r], bm[r]), hd, st, grid, scales, sc, pw, out, r)


_kernel = None


def kernel():
    """The compiled chunk kernel (compiled on first use, cached on disk by numba; one compiled version only, as
    :func:`pcast.emulator.compiled._kernel`); run it with :func:`pcast.emulator.fusedmath.run_on`."""
    global _kernel
    if _kernel is None:
        _kernel = numba.njit(parallel=True, fastmath=False, cache=True)(_rows)
    return _kernel
