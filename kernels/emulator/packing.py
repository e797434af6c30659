"""The layout of the compiled pass's packed settings: the index of each field in the arrays that
:func:`pcast.emulator.fused.p_rows` fills once per call from :class:`pcast.emulator.core._Call` and that
:mod:`pcast.emulator.fusedkernel` reads by these names only (numba takes module-level ints as constants).
"""

REVERSE, CUMMAX, SINK_INIT, EXP2, SM_POW2, CAST, ROWSUM_ROUNDED = range(7)  # flags, bool
TAU, SEED, SM, SM32, LOG2_S, OFFSET, EXP_EDGE = range(7)  # vals, float64: τ, the seed, ‖·‖ bound's sm, ...
RND, RND_MIN, HALF, MIN_NORMAL, MAX_FINITE, TOP = range(6)  # grid, float32: compiled.grid's, then float32's max
MAN_BITS, EMIN = range(2)  # fm, int64: the format's mantissa bits and least exponent
TERMS, TERMS_SINK, UNDERFLOW, UNDERFLOW_SINK, SATURATED = range(5)  # the counts it returns per row, int64
