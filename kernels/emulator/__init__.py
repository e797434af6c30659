"""The emulator: the contract in vectorized torch, bit-faithful to the kernel's P path.

* :mod:`.core`: one call (steps 1-6 of docs/interfaces.md) over chunks of rows;
* :mod:`.calls`: the multi-call engine behind :func:`pcast.attention_calls` (shared work across
  value tensors, scales and a Δ stack);
* :mod:`.reverse`: reverse order across a Δ stack, the blocks before the sink block computed once;
* :mod:`.exact`: the decisions of steps 2-3 on exact values (float64 where float32 lies near a boundary);
* :mod:`.ieee`: the contract's float32 exp, exp2 and block sums, the same bits on every CPU;
* :mod:`.fused`: steps 2-4 in one compiled pass per chunk of rows on CPU (numba; :mod:`.fusedrows`
  strings together :mod:`.fusedwalk`'s step 2, :mod:`.fusedcast`'s step 3 and :mod:`.fusedmath`'s float32
  operations, with :mod:`.packing`'s named records), the eager path's results bit for bit;
* :mod:`.compiled`: step 3's cast and its exact-decision test in one compiled pass (numba), for the calls
  the fused pass does not cover;
* :mod:`.mx`: step 3 for P in microscaled FP4.

May import: :mod:`pcast.contract`, :mod:`pcast.formats` and :mod:`pcast.reference`.
"""
