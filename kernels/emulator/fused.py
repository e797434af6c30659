"""Steps 2-4 compiled with numba: one pass per query row between the two matmuls.

Per row, in one parallel loop over rows (each row on its own, so nothing depends on the thread count):

* step 2: the block maxima, the walk under step 2's rule (cumulative max, lazy τ, a seeding sink logit) decided
  on exact values, the exact maxima of the blocks that set the max (:mod:`pcast.emulator.fusedwalk`);
* the unrounded value u of every key (``exp(s − m)`` or the exp2 form, :mod:`pcast.emulator.ieee`'s
  operations), a key whose ``s − m`` lies near exp's underflow taken from its float64 value;
* step 3 at each scale: x, the cast, the keys whose x lies near a rounding boundary decided on their float64
  value, the counts of terms, underflows and saturations;
* step 4: the block sums in :func:`pcast.emulator.ieee.tree_sum`'s order, the block weights, the row sum; and
  p_q times its block's weight, ready for step 5's matmul.

It runs the operations of the eager path (:mod:`pcast.emulator.core` with :mod:`pcast.emulator.exact`) in
their order, so its results are the eager path's, bit for bit (``tests/emulator/test_fused.py``). A float64
value may differ from the eager one in its last bit (another summation order of a float64 dot product), which
moves a decision only where the exact value lies within about 1e-15 (relative) of its boundary.

Covered: FP8 P formats (or none), ``multiply`` and ``exp2_offset``, every step-2 rule, causal masks, sinks,
several scales and value tensors, float32 P·V, one split, CPU tensors. The rest takes the eager path
(:func:`covers`). :data:`ENABLED` turns the pass off (the eager path then runs everything, as on CUDA).
"""

from __future__ import annotations

import numpy as np
import torch

from pcast.contract import float32
from pcast.emulator import compiled as _compiled
from pcast.emulator.exact import exp_edge
from pcast.emulator.packing import Head, Out, Scales, Settings
from pcast.formats import FORMATS

__all__ = ["ENABLED", "FUSED_CHUNK_ELEMS", "covers", "chunk_elems", "p_rows"]


#: Whether calls the pass covers run through it (tests turn it off to run the eager path).
ENABLED = True
#: Below this many score elements a chunk runs on one thread.
_PARALLEL_ELEMS = 1 << 16
#: Score elements in a chunk of rows the pass runs: each chunk is three parallel regions (two matmuls, the pass)
#: whose threads meet at a barrier, which costs a time slice on a loaded machine (docs/performance.md, "Under load").
FUSED_CHUNK_ELEMS = 1 << 20


def covers(c, s: torch.Tensor) -> bool:
    """Whether the call laid out as ``c`` (:class:`pcast.emulator.core._Call`) runs its chunk of scores
    ``s`` through the compiled pass."""
    return (ENABLED and _compiled.AVAILABLE and c.ex is not None and s.device.type == "cpu" and not c.mx
            and not c.per_row and c.pv is None and (c.fmt is None or c.fmt.name in FORMATS))


def chunk_elems(c, plain: int) -> int:
    """Score elements in a chunk of rows of the call laid out as ``c``: :data:`FUSED_CHUNK_ELEMS` where the pass
    runs it, else ``plain`` (the eager path's)."""
    return FUSED_CHUNK_ELEMS if covers(c, c.qs) else plain


def _settings(c, g: int) -> Settings:
    """The call's options and sizes for head g, from its layout ``c``."""
    return Settings(reverse=c.reverse, cummax=c.cummax, sink_init=c.sink_init, exp2=c.exp2, sm_pow2=c.sm_pow2,
                    cast=c.fmt is not None, rowsum_rounded=c.rowsum_rounded, tau=float(c.tau),
                    seed=float(c.sink[g]) if c.sink_init else float("-inf"), sm=float(c.ex.sm),
                    sm32=float(float32(c.sm_scale)), log2_s=float(c.log2_s),
                    offset=abs(float(c.log2_s)) if c.exp2 else 0.0, exp_edge=float(exp_edge(c)), bn=c.block_n,
                    ks=c.ks, d=c.ex.d)


def p_rows(c, g: int, r0: int, r1: int, s: torch.Tensor):
    """Steps 2-4 of rows r0:r1 of head g from their scores ``s`` [rows, Np] float32 (read only). Returns
    ``(pw, l, m_final, counts)``: per scale, pw [rows, Np] p_q times its block's weight, l [rows] the row sum
    of the keys, m_final [rows] the final max (-inf as 0) and counts [rows, 5] int64 (terms, terms_sink,
    underflow, underflow_sink, saturated)."""
    # lazy: numba's compiled pass (importing it sets numba's threading layer), loaded on the first CPU row pass
    from pcast.emulator import fusedmath as _fm, fusedrows as _fr  # (numba: imported where it runs)

    nr, np_ = s.shape
    ns = len(c.scales)
    b = c.ex
    out = Out(pw=np.empty((ns, nr, np_), np.float32), l=np.empty((ns, nr), np.float32),
              mf=np.empty(nr, np.float32), counts=np.zeros((ns, nr, 5), np.int64))
    scales = Scales(values=np.array([sc.scale for sc in c.scales], np.float32),
                    sats=np.array([sc.check_saturation for sc in c.scales], np.bool_))
    head = Head(keys=b.keys[g].numpy(), kn=b.kn[g].numpy(), kf=b.kf[g].numpy())
    st, grid = _settings(c, g), _compiled.grid_record(c.fmt)
    threads = torch.get_num_threads() if s.numel() >= _PARALLEL_ELEMS else 1
    _fm.run_on(threads, _fr.kernel(), s.numpy(), c.qs[g, r0:r1].numpy(), b.qn[g, r0:r1].numpy(),
               s.view(nr, c.nblk, c.block_n).amax(-1).numpy(), head, st, grid, scales, out)
    pw_t = torch.from_numpy(out.pw)
    return ([pw_t[i] for i in range(ns)], [torch.from_numpy(out.l[i]) for i in range(ns)],
            torch.from_numpy(out.mf), [torch.from_numpy(out.counts[i]) for i in range(ns)])
