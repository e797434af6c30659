"""The numba kernel of :mod:`pcast.emulator.fused`: steps 2-4 of one chunk of rows, a row at a time.

Each function mirrors an eager one, operation for operation in float32 (numba without fast-math keeps IEEE
float32 operations as written: no contraction, no reassociation):

* the scalar operations (exp, exp2, the tree sums): :mod:`pcast.emulator.fusedmath`;
* :func:`_rule`: :func:`pcast.emulator.exact.max_rule` (cumulative max, or the max that moves past τ);
* :func:`_walk_row`: :func:`pcast.emulator.exact.walk_exact`, ``_setter_maxima``, ``walked_max`` and
  :meth:`~pcast.emulator.exact.Chunk.make`;
* :func:`_unrounded_row`: :func:`pcast.emulator.core._unrounded` with :meth:`~pcast.emulator.exact.Chunk.terms_keys`;
* :func:`_scale_row`: step 3 with :meth:`~pcast.emulator.exact.Chunk.cast` (the test of
  :mod:`pcast.emulator.compiled`) and step 4 of :func:`pcast.emulator.core._rows`.

Float64 values (exact scores, exact maxima, exact x) are those of the eager path up to their last bit: a
dot product summed in another order.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from pcast.contract import LOG2E
from pcast.emulator.packing import (CAST, CUMMAX, EMIN, EXP2, EXP_EDGE, HALF, LOG2_S, MAN_BITS, MAX_FINITE,
                                    MIN_NORMAL, OFFSET, REVERSE, RND, RND_MIN, ROWSUM_ROUNDED, SATURATED, SEED,
                                    SINK_INIT, SM, SM32, SM_POW2, TAU, TERMS, TERMS_SINK, TOP, UNDERFLOW,
                                    UNDERFLOW_SINK)
from pcast.emulator.fusedmath import exp as _exp, exp2 as _exp2, next_down as _next_down
from pcast.emulator.fusedmath import round_exact as _round_exact, round_mark as _round_mark, score64 as _score64
from pcast.emulator.fusedmath import tree as _tree, tree_from as _tree_from

__all__ = ["kernel"]

_F = np.float32
_LOG2E = _F(LOG2E)
_LOG2E_D = float(LOG2E)
_ZERO, _HALF = _F(0.0), _F(0.5)
_NEG = _F(-np.inf)
_U = 2.0 ** -23
_UP = 1.0 + 2.0 ** -20
#: tasks of the parallel loop over a chunk's rows (each with its own scratch arrays)
_TASKS = 16
_jit = numba.njit(fastmath=False, cache=True)


@_jit
def _block_max64(s, q, keys, j, bn, bm_j, e_j, d, sm_pow2, sm32):
    """The exact maximum of block j: its keys within 2E of its float32 maximum, in float64."""
    lo = _next_down(_F(np.float64(bm_j) - 2.0 * e_j))
    best = -np.inf
    for i in range(bn):
        v = s[j * bn + i]
        if v >= lo and v > _NEG:
            e = _score64(q, keys, j * bn + i, d, sm_pow2, sm32)
            best = e if e > best else best
    return best


@_jit
def _rule(bm, out, rev, cummax, tau, init, log2e):
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
def _walk_row(s, q, keys, qn_r, kn, bn, d, flags, vals, bm, m, mx, bm64, e):
    """Step 2 of one row decided on exact values, from its block maxima bm: m (float32) and mx (float64 exact)
    max in force at each block; returns (a, cc), the bound on x's relative error
    (:meth:`pcast.emulator.exact.Chunk.make`)."""
    nb = m.shape[0]
    rev, cummax, has_seed, sm_pow2 = flags[REVERSE], flags[CUMMAX], flags[SINK_INIT], flags[SM_POW2]
    tau, sm, sm32 = vals[TAU], vals[SM], vals[SM32]
    for j in range(nb):
        e[j] = ((d + 2) * _U) * ((qn_r * kn[j]) * sm)
    init = _F(vals[SEED]) if has_seed else _NEG
    _rule(bm, m, rev, cummax, _F(tau), init, _LOG2E)
    err = 0.0
    if _near(bm, m, e, rev, init, tau / _LOG2E_D if tau != 0.0 else 0.0):
        for j in range(nb):
            bm64[j] = _block_max64(s, q, keys, j, bn, bm[j], e[j], d, sm_pow2, sm32)
        _rule(bm64, mx, rev, cummax, np.float64(_F(tau)), np.float64(init), _LOG2E_D)
        for j in range(nb):
            v = init
            for k in range(nb):
                if mx[j] == bm64[k]:
                    v = bm[k]
                    break
            m[j] = v
            if mx[j] != -np.inf:
                err = max(err, abs(np.float64(v) - mx[j]))
    else:
        for k in range(nb):
            bm64[k] = np.nan
            if m[k] == bm[k] and bm[k] != _NEG:
                bm64[k] = _block_max64(s, q, keys, k, bn, bm[k], e[k], d, sm_pow2, sm32)
                err = max(err, abs(np.float64(bm[k]) - bm64[k]))
        last = _NEG
        found = False
        v = np.float64(init)
        for jj in range(nb):  # the first block visited up to j whose maximum is m[j] (searched when m moves)
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
    mabs = _ZERO
    for j in range(nb):
        mabs = max(mabs, abs(m[j])) if m[j] != _NEG else mabs
    a = (1.01 * (d + 1) * _U / 2 + 2 * _U) * qn_r * sm
    return a, 1.01 * err + 4 * _U * np.float64(mabs) + _U * vals[OFFSET] + 8 * _U


@_jit
def _x64(q, keys, mx, t, bn, d, flags, vals, scale):
    """The exact x of key t: ``exp(s − m)·S``, or ``exp2((s − m)·LOG2E)·S`` (exp2_offset), float64."""
    sv = _score64(q, keys, t, d, flags[SM_POW2], vals[SM32])
    mm = mx[t // bn]
    mm = 0.0 if mm == -np.inf else mm
    if flags[EXP2]:
        return np.exp2((sv - mm) * _LOG2E_D) * scale
    return math.exp(sv - mm) * scale


@_jit
def _unrounded_row(s, q, keys, qn_r, kn, m, mx, bn, d, flags, vals, s0, u, lblk_u, tb):
    """Step 2's unrounded u of every key (p, or exp2_offset's x) into u; a key whose ``s − m`` lies within 0.5
    of exp's underflow takes the float32 of its exact value (searched in the blocks whose bound
    ``2·‖q‖·max‖k‖·sm + |m| + 1`` reaches there). Returns #u > 0; the block sums of u into lblk_u (unless
    the row sum is rounded)."""
    nb = m.shape[0]
    pos = 0
    log2s = _F(vals[LOG2_S])
    edge = _F(vals[EXP_EDGE])
    reach = abs(vals[EXP_EDGE]) - 1.0
    for j in range(nb):
        mj = m[j]
        ms = _ZERO if mj == _NEG else mj
        off = ms * _LOG2E - log2s
        b0 = j * bn
        sj, uj = s[b0:b0 + bn], u[b0:b0 + bn]  # (s: this task's copy of the row)
        if flags[EXP2]:
            for i in range(bn):
                uj[i] = _exp2(sj[i] * _LOG2E - off)
        else:
            for i in range(bn):
                uj[i] = _exp(sj[i] - ms)
        if 2.0 * ((qn_r * kn[j]) * vals[SM]) + abs(np.float64(mj)) + 1.0 >= reach:
            near = 0
            for i in range(bn):
                near += abs((sj[i] - ms) - edge) <= _HALF
            if near:
                for i in range(bn):
                    if abs((sj[i] - ms) - edge) <= _HALF:
                        uj[i] = _F(_x64(q, keys, mx, b0 + i, bn, d, flags, vals, s0 if flags[EXP2] else 1.0))
        for i in range(bn):
            pos += uj[i] > _ZERO
        if not flags[ROWSUM_ROUNDED]:
            lblk_u[j] = _tree_from(u, b0, bn, tb)
    return pos


@_jit
def _count_pos(x, ks):
    """#x > 0 among the first ks entries."""
    a = 0
    for t in range(min(ks, x.shape[0])):
        a += x[t] > _ZERO
    return a


@_jit
def _cast_row(u, kf, a32, c32, scale, chk, exp2, grid, pq, mark):
    """x = p·S (u itself under exp2_offset), its rounding into pq and the keys to decide exactly into mark
    (:mod:`pcast.emulator.compiled`); returns (#x > max_finite, #marked)."""
    rnd, rnd_min, half, mn, maxf = grid[RND], grid[RND_MIN], grid[HALF], grid[MIN_NORMAL], grid[MAX_FINITE]
    top = maxf if chk else grid[TOP]
    nsat = 0
    nmark = 0
    for t in range(u.shape[0]):
        x = u[t] if exp2 else u[t] * scale
        nsat += chk & (x > maxf)
        qv, mk = _round_mark(x, a32 * kf[t] + c32, rnd, rnd_min, half, mn, top, maxf, chk)
        pq[t] = qv
        mark[t] = np.uint8(mk)
        nmark += mk
    return nsat, nmark


@_jit
def _exact_marked(q, keys, mx, bn, d, flags, vals, fm, grid, scale, chk, u, pq, mark):
    """The marked keys of a row decided on their exact x (pq redone); returns the change to #saturated."""
    exp2 = flags[EXP2]
    maxf = np.float64(grid[MAX_FINITE])
    dsat = 0
    words = mark.view(np.uint64)
    for wi in range(words.shape[0]):
        if not words[wi]:
            continue
        for t in range(8 * wi, 8 * wi + 8):
            if mark[t]:
                x = u[t] if exp2 else u[t] * scale
                x64 = _x64(q, keys, mx, t, bn, d, flags, vals, np.float64(scale))
                if chk:
                    dsat += int(x64 > maxf) - int(x > grid[MAX_FINITE])
                pq[t] = _F(_round_exact(x64, fm[MAN_BITS], fm[EMIN], maxf))
    return dsat


@_jit
def _scale_row(s, q, keys, m, mx, kf, a, cc, bn, ks, d, flags, vals, fm, grid, scale, chk, lblk_u, u, pq, mark,
               wl, tb, pw):
    """Steps 3-4 of one row at one scale: p_q times its block's weight into pw; returns (l, #p_q > 0 among
    the sink keys, among the others, #saturated)."""
    nb = m.shape[0]
    np_ = nb * bn
    exp2 = flags[EXP2]
    nsat = 0
    if flags[CAST]:
        nsat, nmark = _cast_row(u[:np_], kf, _F(a * _UP), _F(cc * _UP), scale, chk, exp2, grid, pq[:np_],
                                mark[:np_])
        if nmark:
            nsat += _exact_marked(q, keys, mx, bn, d, flags, vals, fm, grid, scale, chk, u, pq, mark)
    else:
        for t in range(np_):
            pq[t] = u[t] if exp2 else u[t] * scale
    ppos = 0
    mfin = m[0] if flags[REVERSE] else m[nb - 1]
    mfin = _ZERO if mfin == _NEG else mfin
    for j in range(nb):
        b0 = j * bn
        if flags[ROWSUM_ROUNDED]:
            lb = _tree_from(pq, b0, bn, tb)
            lb = lb if exp2 else lb / scale
        else:
            lb = lblk_u[j]
        w = _exp2(m[j] * _LOG2E - mfin * _LOG2E) if exp2 else _exp(m[j] - mfin)
        wl[j] = lb * w
        pj, pwj = pq[b0:b0 + bn], pw[b0:b0 + bn]
        for i in range(bn):
            v = pj[i]
            ppos += v > _ZERO
            pwj[i] = v * w
    ppos_s = _count_pos(pq, ks)
    return _tree(wl, nb), ppos_s, ppos - ppos_s, nsat


@_jit
def _row(s, q, keys, qn_r, kn, kf, bm, bn, ks, d, flags, vals, scales, sats, grid, fm, pw, l, counts, r, sc):
    """Every step of one row r from its scores s and block maxima bm, p_q times its block weight into pw[i] (scale
    i); ``sc``: scratch arrays. Returns the final max (-inf as 0)."""
    m, mx, bm64, e, lblk_u, wl, u, pq, mark, tb = sc
    nb = m.shape[0]
    a, cc = _walk_row(s, q, keys, qn_r, kn, bn, d, flags, vals, bm, m, mx, bm64, e)
    pos = _unrounded_row(s, q, keys, qn_r, kn, m, mx, bn, d, flags, vals, np.float64(scales[0]), u, lblk_u, tb)
    pos_s = _count_pos(u, ks)
    pos_ns = pos - pos_s
    for i in range(scales.shape[0]):
        li, pp_s, pp_ns, nsat = _scale_row(s, q, keys, m, mx, kf, a, cc, bn, ks, d, flags, vals, fm, grid,
                                           scales[i], sats[i], lblk_u, u, pq, mark, wl, tb, pw[i])
        l[i, r] = li
        counts[i, r, TERMS] = pos_ns
        counts[i, r, TERMS_SINK] = pos_s
        counts[i, r, UNDERFLOW] = pos_ns - pp_ns
        counts[i, r, UNDERFLOW_SINK] = pos_s - pp_s
        counts[i, r, SATURATED] = nsat
    mfin = m[0] if flags[REVERSE] else m[nb - 1]
    return _ZERO if mfin == _NEG else mfin


@_jit
def _scratch(nb, np_, bn, ns):
    """One task's scratch arrays, its own allocations (:func:`_rows`)."""
    n8 = -(-np_ // 8) * 8
    return (np.empty(nb, np.float32), np.empty(nb), np.empty(nb), np.empty(nb), np.empty(nb, np.float32),
            np.empty(nb, np.float32), np.empty(n8, np.float32), np.empty(n8, np.float32), np.zeros(n8, np.uint8),
            np.empty(max(bn, nb), np.float32)), np.empty(np_, np.float32), np.empty(np_, np.float32), np.empty(
                (ns, np_), np.float32)


def _rows(s, q, keys, qn, kn, kf, bm, bn, ks, d, flags, vals, scales, sats, grid, fm, pw, l, mf, counts):
    """Every row of the chunk, in parallel over a fixed number of tasks (each row on its own: the results do not
    depend on how rows are shared out). A task works on its own copies (the scores of a row, the key factors, p_q
    times its weight): numba counts references to an array atomically, so views of one shared array contend."""
    nr, np_ = s.shape
    nt = min(nr, _TASKS)
    for ti in numba.prange(nt):
        sc, srow, kfl, pwl = _scratch(np_ // bn, np_, bn, scales.shape[0])
        kfl[:] = kf
        for r in range(ti * nr // nt, (ti + 1) * nr // nt):
            srow[:] = s[r]
            mf[r] = _row(srow, q[r], keys, qn[r], kn, kfl, bm[r], bn, ks, d, flags, vals, scales, sats, grid, fm,
                         pwl, l, counts, r, sc)
            pw[:, r] = pwl


_kernel = None


def kernel():
    """The compiled chunk kernel (compiled on first use, cached on disk by numba; one compiled version only, as
    :func:`pcast.emulator.compiled._kernel`); run it with :func:`pcast.emulator.fusedmath.run_on`."""
    global _kernel
    if _kernel is None:
        _kernel = numba.njit(parallel=True, fastmath=False, cache=True)(_rows)
    return _kernel
