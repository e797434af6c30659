"""Step 3 compiled with numba: the FP8 cast and its exact-decision test in one pass over each row.

:meth:`pcast.emulator.exact.Chunk.cast` rounds x onto an FP8 grid and marks the keys whose x lies within
``δ·x`` of a rounding midpoint (or of ``max_finite``), which it then decides on their float64 value. In torch
that is a dozen elementwise passes over the chunk; here it is one, parallel over rows (each row on its own, so
nothing depends on the thread count). The rounding is :func:`pcast.formats.rounding.quantize_fast`'s, the
same IEEE float32 operations in the same order (numba keeps them: no fast-math, no contraction), so ``p_q``
has its bits. The test may mark a key more or less than the torch one (its own float32 roundings of
``|x − p_q| + δ·x``), which only moves where the float64 value is computed: every decision is the exact one
either way (``δ`` carries eight ulps to spare).

Used for FP8 formats on CPU tensors when numba imports; 16-bit P, CUDA tensors and an install without numba
take the torch passes. :data:`AVAILABLE` says which.
"""

from __future__ import annotations

import numpy as np
import torch

try:
    import numba
except ImportError:  # the torch passes run instead
    numba = None
else:  # (fusedmath sets numba's threading layer and runs its parallel functions: run_on)
    from pcast.emulator.fusedmath import round_mark, run_on

__all__ = ["AVAILABLE", "cast_and_mark", "grid"]

#: Whether the compiled pass runs (numba imports).
AVAILABLE = numba is not None

_F = np.float32


def _cast_row(x, a, c, kf, pq, mark, rnd, rnd_min, half, mn, top, edge, near_max):
    """One row: ``pq = round(x)`` on the grid (values clamped to ±``top``), and ``mark = 1`` where
    ``|x - pq| + δ·x >= h/2`` (h the grid step at x) and x > 0, or (``near_max``) ``|x - edge| <= 2·edge·δ``;
    ``δ = a·kf[j] + c``. A flat loop, so that it vectorises."""
    for j in range(x.shape[0]):
        q, m = round_mark(x[j], a * kf[j] + c, rnd, rnd_min, half, mn, top, edge, near_max)
        pq[j] = q
        mark[j] = np.uint8(m)


def _cast_rows(x, a, c, kf, pq, mark, rnd, rnd_min, half, mn, top, edge, near_max):
    """Every row of x [rows, cols], in parallel (each row on its own)."""
    for i in numba.prange(x.shape[0]):
        _row(x[i], a[i], c[i], kf, pq[i], mark[i], rnd, rnd_min, half, mn, top, edge, near_max)


_compiled = None
_row = None
#: Below this many elements a chunk runs on one thread: starting the threads would cost more.
_PARALLEL_ELEMS = 1 << 17


def _kernel():
    """The compiled pass (compiled on first use, cached on disk by numba). One compiled version only, parallel:
    numba's disk cache keeps one entry per function and signature, so a serial and a parallel compilation of the
    same function would load each other's code."""
    global _row, _compiled
    if _compiled is None:
        _row = numba.njit(fastmath=False, cache=True)(_cast_row)
        _compiled = numba.njit(parallel=True, fastmath=False, cache=True)(_cast_rows)
    return _compiled


def grid(fmt) -> tuple:
    """The rounding constants of ``fmt``'s grid, float32: (the magic constant per unit exponent
    ``1.5·2^(23−man)``, its least value ``min_normal·1.5·2^(23−man)``, half a grid step per unit exponent
    ``2^−(man+1)``, ``min_normal``, ``max_finite``)."""
    m = fmt.man_bits
    return (_F(1.5 * 2.0 ** (23 - m)), _F(fmt.min_normal * 1.5 * 2.0 ** (23 - m)), _F(2.0 ** -(m + 1)),
            _F(fmt.min_normal), _F(fmt.max_finite))


def cast_and_mark(x: torch.Tensor, a: torch.Tensor, c: torch.Tensor, kf: torch.Tensor, fmt,
                  saturate: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(p_q, marked)`` of x [rows, cols] float32 (CPU): p_q the rounding onto ``fmt``'s grid (saturating when
    ``saturate``), a new tensor, and ``marked`` [rows, cols] bool the keys to decide on their float64 value,
    with the relative bound ``δ = a[row]·kf[col] + c[row]`` on x's error (``near max_finite`` too when
    ``saturate``)."""
    xn = x.contiguous().numpy()
    pq = np.empty_like(xn)
    mark = np.empty(xn.shape, dtype=np.uint8)
    up = 1 + 2.0 ** -20  # (a and c rounded up to float32 stay bounds)
    rnd, rnd_min, half, mn, maxf = grid(fmt)
    top = maxf if saturate else _F(np.finfo(np.float32).max)
    threads = torch.get_num_threads() if xn.size >= _PARALLEL_ELEMS else 1
    run_on(threads, _kernel(), xn, (a * up).to(torch.float32).numpy(), (c * up).to(torch.float32).numpy(),
           kf.contiguous().numpy(), pq, mark, rnd, rnd_min, half, mn, top, maxf, saturate)
    return torch.from_numpy(pq), torch.from_numpy(mark).view(torch.bool)
