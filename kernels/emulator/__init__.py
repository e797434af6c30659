"""The emulator: the contract in vectorized torch, bit-faithful to the kernel's P path.

* :mod:`.core`: one call (steps 1-6 of docs/interfaces.md) over chunks of rows;
* :mod:`.calls`: the multi-call engine behind :func:`pcast.attention_calls` (shared work across
  value tensors, scales and a Δ stack);
* :mod:`.reverse`: reverse order across a Δ stack, the blocks before the sink block computed once;
* :mod:`.exact`: the decisions of steps 2-3 on exact values (float64 where float32 lies near a boundary);
* :mod:`.compiled`: step 3's cast and its exact-decision test in one compiled pass (numba);
* :mod:`.mx`: step 3 for P in microscaled FP4.

May import: :mod:`pcast.contract`, :mod:`pcast.formats` and :mod:`pcast.reference`.
"""
