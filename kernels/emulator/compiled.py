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

import os

import numpy as np
import torch

try:
    import numba
except ImportError:  # the torch passes run instead
    numba = None
else:
    # numba's default OpenMP layer spins against torch's own OpenMP threads; its work queue does not
    if "NUMBA_THREADING_LAYER" not in os.environ:
        numba.config.THREADING_LAYER = "workqueue"

__all__ = ["AVAILABLE", "cast_and_mark"]

#: Whether the compiled pass runs (numba imports).
AVAILABLE = numba is not None

_F = np.float32
_I = np.int32
_EXP_MASK = _I(0x7F800000)


def _cast_rows(x, delta, pq, mark, block_n, man_bits, min_normal, max_finite, saturate, near_max):
    """Per row i (parallel): ``pq[i] = round(x[i])`` on the grid (saturating when ``saturate``), and
    ``mark[i, j] = 1`` where ``|x - pq| + δ·x >= h/2`` (h the grid step at x) and x > 0, or (``near_max``)
    ``|x - max_finite| <= 2·max_finite·δ``; δ = ``delta[i, j // block_n]``."""
    rows, cols = x.shape
    rnd = _F(1.5 * 2.0 ** (23 - man_bits))
    rnd_min = _F(min_normal * 1.5 * 2.0 ** (23 - man_bits))
    half = _F(2.0 ** -(man_bits + 1))
    mn = _F(min_normal)
    top = _F(max_finite if saturate else np.inf)
    edge = _F(max_finite)
    two = _F(2.0)
    zero = _F(0.0)
    for i in numba.prange(rows):
        for b in range(cols // block_n):
            d = delta[i, b]
            for j in range(b * block_n, (b + 1) * block_n):
                xv = x[i, j]
                a = min(max(xv, -top), top)
                mg = max(_I(_F(a).view(_I) & _EXP_MASK).view(_F) * rnd, rnd_min)
                q = (a + mg) - mg
                pq[i, j] = q
                h = max(_I(_F(xv).view(_I) & _EXP_MASK).view(_F), mn) * half
                m = (abs(xv - q) + xv * d >= h) & (xv > zero)
                if near_max:
                    m = m | (abs(xv - edge) <= two * edge * d)
                mark[i, j] = m


_compiled = None


def _kernel():
    """The compiled pass (compiled on first use, cached on disk by numba), on as many threads as torch uses."""
    global _compiled
    if _compiled is None:
        _compiled = numba.njit(parallel=True, fastmath=False, cache=True)(_cast_rows)
    numba.set_num_threads(max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)))
    return _compiled


def cast_and_mark(x: torch.Tensor, delta: torch.Tensor, block_n: int, fmt, saturate: bool,
                  near_max: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(p_q, marked)`` of x [rows, cols] float32 (CPU): p_q the rounding onto ``fmt``'s grid, a new tensor,
    and ``marked`` [rows, cols] bool the keys to decide on their float64 value; ``delta`` [rows, cols //
    block_n] the relative bound on x's error."""
    xn = x.contiguous().numpy()
    pq = np.empty_like(xn)
    mark = np.empty(xn.shape, dtype=np.uint8)
    _kernel()(xn, delta.to(torch.float32).contiguous().numpy(), pq, mark, block_n, fmt.man_bits,
              fmt.min_normal, fmt.max_finite, saturate, near_max)
    return torch.from_numpy(pq), torch.from_numpy(mark).view(torch.bool)
