"""The scalar float32 operations of the compiled pass (:mod:`pcast.emulator.fusedrows`), numba code.

* :func:`exp`, :func:`exp2`, :func:`tree`: :mod:`pcast.emulator.ieee`'s exp, exp2 and ``tree_sum``, op for
  op (numba without fast-math keeps IEEE float32 operations as written: no contraction, no reassociation),
  so both give the same bits (``tests/emulator/test_ieee.py``);
* :func:`score64`: a float64 score q·k, the exact score of a key whose decision lies near its boundary;
* :func:`round_exact`: :func:`pcast.emulator.exact.round_exact` of one float64 value;
* :func:`round_mark`: step 3's float32 rounding of one value and its exact-decision test;
* :func:`run_on`: a parallel numba function on a given number of threads. Importing this module sets numba's
  threading layer (OpenMP first) unless ``NUMBA_THREADING_LAYER`` or ``NUMBA_THREADING_LAYER_PRIORITY`` is set.
"""

from __future__ import annotations

import math
import os

import numba
import numpy as np
import torch

from pcast.emulator.ieee import EXP_CONSTANTS as _C

__all__ = ["exp", "exp2", "tree", "tree_from", "next_down", "score64", "round_exact", "round_mark", "exp_array",
           "exp2_array", "exp_rows", "run_on"]

# OpenMP first: numba's work queue starts each parallel loop in about 100 µs and, after a torch matmul, waits on
# torch's spinning OpenMP threads (no speed-up on 2 threads, docs/performance.md); TBB is not a dependency
if "NUMBA_THREADING_LAYER" not in os.environ and "NUMBA_THREADING_LAYER_PRIORITY" not in os.environ:
    numba.config.THREADING_LAYER_PRIORITY = ["omp", "workqueue", "tbb"]

_F = np.float32
_I = np.int32
_MAGIC, _LN2, _LN2_HI, _LN2_LO, _LOG2E = _C["MAGIC"], _C["LN2"], _C["LN2_HI"], _C["LN2_LO"], _C["LOG2E"]
_P0, _P1, _P2, _P3, _P4, _P5 = (_C[f"P{i}"] for i in range(6))
_LO, _HI, _LO2, _HI2 = _C["LO"], _C["HI"], _C["LO2"], _C["HI2"]
_ZERO, _ONE, _TWO = _F(0.0), _F(1.0), _F(2.0)
_EXP_MASK = _I(0x7F800000)
_jit = numba.njit(fastmath=False, cache=True)
# inlined into the caller in numba IR: a call that passes arrays costs numba atomic reference counts
_jit_inline = numba.njit(fastmath=False, cache=True, inline="always")


@_jit
def _poly_scale(r, k):
    z = r * r
    y = r * _P0
    y = y + _P1
    y = y * r + _P2
    y = y * r + _P3
    y = y * r + _P4
    y = y * r + _P5
    y = y * z
    y = y + r
    y = y + _ONE
    ki = _I(k)
    k1 = ki >> _I(1)
    k2 = ki - k1
    s1 = _I((k1 + _I(127)) << _I(23)).view(_F)
    s2 = _I((k2 + _I(127)) << _I(23)).view(_F)
    return (y * s1) * s2


@_jit
def exp(x):
    x = _LO if x < _LO else x
    x = _HI if x > _HI else x
    k = (x * _LOG2E + _MAGIC) - _MAGIC
    r = x - k * _LN2_HI
    r = r - k * _LN2_LO
    return _poly_scale(r, k)


@_jit
def exp2(t):
    t = _LO2 if t < _LO2 else t
    t = _HI2 if t > _HI2 else t
    k = (t + _MAGIC) - _MAGIC
    r = (t - k) * _LN2
    return _poly_scale(r, k)


@_jit
def _exp_array(x, out):
    for i in range(x.shape[0]):
        out[i] = exp(x[i])


@_jit
def _exp2_array(x, out):
    for i in range(x.shape[0]):
        out[i] = exp2(x[i])


def exp_array(x: np.ndarray) -> np.ndarray:
    """The compiled exp over a 1-D float32 array (for tests)."""
    out = np.empty_like(x)
    _exp_array(x, out)
    return out


def _exp_rows(x, out):
    for i in numba.prange(x.shape[0]):
        xi, oi = x[i], out[i]
        for j in range(xi.shape[0]):
            oi[j] = exp(xi[j])


_exp_rows_jit = None


def exp_rows(x: np.ndarray, out: np.ndarray, threads: int) -> None:
    """The compiled exp of every row of x [rows, cols] float32 into out, in parallel on ``threads`` threads (for
    pcast-bench's fused bound: the fused pass's own cost of one exp an element)."""
    global _exp_rows_jit
    if _exp_rows_jit is None:
        _exp_rows_jit = numba.njit(parallel=True, fastmath=False, cache=True)(_exp_rows)
    run_on(threads, _exp_rows_jit, x, out)


def exp2_array(x: np.ndarray) -> np.ndarray:
    """The compiled exp2 over a 1-D float32 array (for tests)."""
    out = np.empty_like(x)
    _exp2_array(x, out)
    return out


@_jit_inline
def tree(b, n):
    """:func:`pcast.emulator.ieee.tree_sum` of b[:n], in place over b."""
    if n == 0:
        return _ZERO
    while n > 1:
        if n == 8:  # the last three levels in registers: the same sums, without three short loops
            c0, c1, c2, c3 = b[0] + b[4], b[1] + b[5], b[2] + b[6], b[3] + b[7]
            return (c0 + c2) + (c1 + c3)
        h = n >> 1
        lo, hi = b[:h], b[h:2 * h]  # (slices: a loop over range(h) vectorises)
        for i in range(h):
            lo[i] = lo[i] + hi[i]
        if n & 1:
            b[h] = b[2 * h]
        n = h + (n & 1)
    return b[0]


@_jit_inline
def tree_from(src, b0, n, b):
    """:func:`tree` of src[b0:b0 + n], its first level read from src (b: scratch of n // 2 + 1)."""
    if n < 2:
        return src[b0] if n else _ZERO
    h = n >> 1
    lo, hi, out = src[b0:b0 + h], src[b0 + h:b0 + 2 * h], b[:h]
    for i in range(h):
        out[i] = lo[i] + hi[i]
    if n & 1:
        b[h] = src[b0 + 2 * h]
    return tree(b, h + (n & 1))


@_jit
def next_down(f):
    """The float32 next below f (f finite)."""
    if f > _ZERO:
        return _I(_F(f).view(_I) - _I(1)).view(_F)
    if f < _ZERO:
        return _I(_F(f).view(_I) + _I(1)).view(_F)
    return _I(-2147483647).view(_F)


@_jit
def score64(q, keys, key, d, sm_pow2, sm32):
    """The float64 score q·k (times sm where it was not folded into q), in four partial sums."""
    a0 = a1 = a2 = a3 = 0.0
    d4 = d - d % 4
    for t in range(0, d4, 4):
        a0 += np.float64(q[t]) * np.float64(keys[key, t])
        a1 += np.float64(q[t + 1]) * np.float64(keys[key, t + 1])
        a2 += np.float64(q[t + 2]) * np.float64(keys[key, t + 2])
        a3 += np.float64(q[t + 3]) * np.float64(keys[key, t + 3])
    tot = (a0 + a1) + (a2 + a3)
    for t in range(d4, d):
        tot += np.float64(q[t]) * np.float64(keys[key, t])
    return tot if sm_pow2 else tot * sm32


@_jit
def round_exact(x, man, emin, maxf):
    """:func:`pcast.emulator.exact.round_exact` of one float64 x >= 0."""
    e = math.frexp(x)[1]
    step = 2.0 ** (max(e - 1, emin) - man)
    return min(np.rint(x / step) * step, maxf)


@_jit
def round_mark(x, dl, rnd, rnd_min, half, mn, top, edge, near_max):
    """``(q, m)``: x (clamped to ±top) rounded onto the grid by adding and subtracting the magic constant at its
    exponent (``rnd``: 1.5·2^(23−man) times the exponent's power of two, at least ``rnd_min``), and whether x
    lies within ``dl·x`` of a rounding midpoint (``|x − q| + dl·x >= h/2``, h the grid step at x, x > 0) or,
    with ``near_max``, of ``edge`` (``|x − edge| <= 2·edge·dl``)."""
    v = x if x < top else top
    v = v if v > -top else -top
    mg = _I(_F(v).view(_I) & _EXP_MASK).view(_F) * rnd
    mg = mg if mg > rnd_min else rnd_min
    q = (v + mg) - mg
    h = _I(_F(x).view(_I) & _EXP_MASK).view(_F)
    h = (h if h > mn else mn) * half
    m = (abs(x - q) + x * dl >= h) & (x > _ZERO)
    if near_max:
        m = m | (abs(x - edge) <= _TWO * edge * dl)
    return q, m


def run_on(threads: int, fn, *args):
    """``fn(*args)`` (a parallel numba function) on ``threads`` threads; torch's thread count is left as it was
    (numba's OpenMP layer may change the count torch reads)."""
    torch_threads = torch.get_num_threads()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    try:
        return fn(*args)
    finally:
        if torch.get_num_threads() != torch_threads:
            torch.set_num_threads(torch_threads)
