"""The named records the compiled P path passes around: numba takes a namedtuple as a typed record whose fields
it reads by name at no cost, so no compiled function reads a bare index or takes a long list of positional
arguments. :func:`pcast.emulator.fused.p_rows` builds the per-call ones once from the call's layout
(:class:`pcast.emulator.core._Call`); :mod:`pcast.emulator.fusedrows` builds a :class:`Row` and a
:class:`Scratch` per row and per task. No numba here: the records are plain namedtuples, below every module
that uses them.
"""

from __future__ import annotations

from collections import namedtuple

__all__ = ["Settings", "Grid", "Head", "Scales", "Out", "Row", "Scratch", "TERMS", "TERMS_SINK", "UNDERFLOW",
           "UNDERFLOW_SINK", "SATURATED"]

#: The call's options and sizes (bools, float64 and ints): the step-2 rule (``reverse``, ``cummax``, ``tau``,
#: ``sink_init`` with its ``seed`` logit), the score's scale (``sm``: the ‖·‖ bound's, ``sm32``: float32,
#: ``sm_pow2``: folded into q), the exp form (``exp2``, ``log2_s``, ``offset`` the absolute log2 S under exp2_offset),
#: exp's underflow edge (``exp_edge``), whether P is cast (``cast``) and how the row sum is taken
#: (``rowsum_rounded``); ``bn`` keys a block, ``ks`` sink keys, ``d`` the head dimension.
Settings = namedtuple("Settings", ["reverse", "cummax", "sink_init", "exp2", "sm_pow2", "cast", "rowsum_rounded",
                                   "tau", "seed", "sm", "sm32", "log2_s", "offset", "exp_edge", "bn", "ks", "d"])
#: The FP8 grid of step 3 (:func:`pcast.emulator.compiled.grid`'s float32 constants, ``top`` float32's largest
#: value: the clamp when the scale does not saturate) and the format's ``man_bits`` and ``emin``.
Grid = namedtuple("Grid", ["rnd", "rnd_min", "half", "min_normal", "max_finite", "top", "man_bits", "emin"])
#: One head's keys shared by its rows: ``keys`` [Np, d] float32, ``kn`` [blocks] the blocks' largest key norm,
#: ``kf`` [Np] each key's factor in the bound on x's error.
Head = namedtuple("Head", ["keys", "kn", "kf"])
#: The scales S of one call (``values`` float32) and whether each checks saturation (``sats``).
Scales = namedtuple("Scales", ["values", "sats"])
#: What the pass writes: ``pw`` [scales, rows, Np], ``l`` [scales, rows], ``mf`` [rows], ``counts``
#: [scales, rows, 5] (terms, terms_sink, underflow, underflow_sink, saturated).
Out = namedtuple("Out", ["pw", "l", "mf", "counts"])
#: One query row: its float32 scores ``s`` [Np], ``q`` [d], ``qn`` its norm, ``bm`` its block maxima.
Row = namedtuple("Row", ["s", "q", "qn", "bm"])
#: One task's scratch arrays: per block ``m`` (float32 max in force), ``mx`` (its exact float64 value), ``bm64``
#: (exact block maxima), ``e`` (score error bounds), ``lblk_u`` (block sums of u), ``wl`` (weighted block sums);
#: per key ``u``, ``pq``, ``mark``; ``tb`` the tree sums' buffer.
Scratch = namedtuple("Scratch", ["m", "mx", "bm64", "e", "lblk_u", "wl", "u", "pq", "mark", "tb"])
#: The columns of ``Out.counts``, written by these names.
TERMS, TERMS_SINK, UNDERFLOW, UNDERFLOW_SINK, SATURATED = range(5)
