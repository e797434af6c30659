"""Step 3 compiled with numba: the FP8 cast and its exact-decision test in one pass over each row.

:meth:`pcast.emulator.exact.Chunk.cast` rounds x onto an FP8 grid and marks the keys whose x lies within
``δ·x`` of a rounding midpoint (or of ``max_finite``), which it then decides on their float64 value. In torch
that is a dozen elementwise passes over the chunk; here it is one, parallel over rows (each row on its own, so
nothing depends on the thread count), each row :func:`pcast.emulator.fusedcast.cast_row`, the compiled P
path's own cast. The rounding is :func:`pcast.formats.rounding.quantize_fast`'s, the
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
    from pcast.emulator.fusedcast import cast_row
    from pcast.emulator.fusedmath import run_on

from pcast.emulator.packing import Grid

__all__ = ["AVAILABLE", "cast_and_mark", "grid", "grid_record"]

#: Whether the compiled pass runs (numba imports).
AVAILABLE = numba is not None

_F = np.float32
_ONE = _F(1.0)


def _cast_rows(x, a, c, kf, grid, saturate, pq, mark):
    """Every row of x [rows, cols], in parallel (each row on its own):
    :func:`pcast.emulator.fusedcast.cast_row` with ``δ = a[row]·kf[col] + c[row]``."""
    for i in numba.prange(x.shape[0]):
        cast_row(x[i], _ONE, kf, a[i], c[i], grid, saturate, pq[i], mark[i])


_compiled = None
#: Below this many elements a chunk runs on one thread: starting the threads would cost more.
_PARALLEL_ELEMS = 1 << 17


def _kernel():
    """The compiled pass (compiled on first use, cached on disk by numba). One compiled version only, parallel:
    numba's disk cache keeps one entry per function and signature, so a serial and a parallel compilation of the
    same function would load each other's code."""
    global _compiled
    if _compiled is None:
        _compiled = numba.njit(parallel=True, fastmath=False, cache=True)(_cast_rows)
    return _compiled


def grid(fmt) -> tuple:
    """The rounding constants of ``fmt``'s grid, float32: (the magic constant per unit exponent
    ``1.5·2^(23−man)``, its least value ``min_normal·1.5·2^(23−man)``, half a grid step per unit exponent
    ``2^−(man+1)``, ``min_normal``, ``max_finite``)."""
    m = fmt.man_bits
    return (_F(1.5 * 2.0 ** (23 - m)), _F(fmt.min_normal * 1.5 * 2.0 ** (23 - m)), _F(2.0 ** -(m + 1)),
            _F(fmt.min_normal), _F(fmt.max_finite))


def grid_record(fmt) -> Grid:
    """:func:`grid` of ``fmt`` as the compiled passes' record, with float32's largest value (the clamp of a
    scale that does not saturate) and the format's mantissa bits and least exponent; ``fmt`` None (no cast):
    ones and zeros, never read."""
    top = _F(np.finfo(np.float32).max)
    if fmt is None:
        return Grid(*(_F(1.0),) * 5, top, 0, 0)
    return Grid(*grid(fmt), top, fmt.man_bits, fmt.emin)


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
    threads = torch.get_num_threads() if xn.size >= _PARALLEL_ELEMS else 1
    run_on(threads, _kernel(), xn, (a * up).to(torch.float32).numpy(), (c * up).to(torch.float32).numpy(),
           kf.contiguous().numpy(), grid_record(fmt), saturate, pq, mark)
    return torch.from_numpy(pq), torch.from_numpy(mark).view(torch.bool)
