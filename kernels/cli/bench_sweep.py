"""The stack ``pcast-bench --sweep`` times (:mod:`pcast.cli.bench`): a Δ stack built as the sweep shards build
them, and the timed parts on it: the engine, its floor, the float64 reference, the eager and the fused bound."""

from __future__ import annotations

import numpy as np
import torch

from pcast import attention_calls

from pcast.emulator.calls import SCORE_SLICE

from pcast.emulator.compiled import cast_and_mark

from pcast.emulator import compiled as _compiled

from pcast.emulator import fused as _fused

from pcast.emulator.core import CHUNK_ELEMS

from pcast.emulator.fusedmath import exp_rows

from pcast.emulator.reverse import lead_columns

from pcast.formats import FORMATS

from pcast.models.sinks import make_base

from pcast.pipeline.runs import value_stack

from pcast.reference import reference_stack

__all__ = ["SWEEP_KSINK", "SWEEP_CALLS", "SWEEP_DEFAULTS", "sweep_inputs", "floor_rows", "Sweep"]

#: The sweep's sink count and its (order, scale) combinations: one attention_calls call runs all of them.
SWEEP_KSINK = 4
SWEEP_CALLS = tuple({"order": o, "scale": s} for o in ("forward", "reverse") for s in (1.0, 256.0))
#: --sweep's defaults (the default mode keeps its own: --reps 7, --threads torch's choice).
SWEEP_DEFAULTS = {"n": 1024, "d": 64, "deltas": 16, "reps": 5, "threads": "1,2"}
_BLOCK_N = 64  # pcast.attention's default block_n: the emulator pads keys to a multiple of it


def sweep_inputs(n, d, n_deltas, seed=0):
    """q, k, values (one value tensor) of a Δ stack as the sweep shards build them, and the Δ grid."""
    deltas = [float(i) for i in range(n_deltas)]
    base = make_base(seed, n=n, d=d)
    q, k, values = value_stack(base, SWEEP_KSINK, deltas, [1.0], torch.device("cpu"))
    return q, k, values, deltas


def floor_rows(n):
    """Query rows per P·V matmul of the floor: the emulator's chunk of rows at n keys (the compiled pass's chunk
    where it runs, :data:`pcast.emulator.fused.FUSED_CHUNK_ELEMS`)."""
    elems = _fused.FUSED_CHUNK_ELEMS if _compiled.AVAILABLE and _fused.ENABLED else CHUNK_ELEMS
    return max(1, elems // (-(-n // _BLOCK_N) * _BLOCK_N))


class Sweep:
    """One Δ stack and the three timed parts of a sweep on it: engine, floor, reference."""

    def __init__(self, n, d, n_deltas, seed=0):
        self.q, self.k, self.values, self.deltas = sweep_inputs(n, d, n_deltas, seed)
        self.n, self.d = n, d
        self.runs = len(SWEEP_CALLS) * len(self.deltas) * len(self.values)
        g = torch.Generator().manual_seed(seed + 1)
        self.p = torch.softmax(torch.randn(n, n, generator=g), dim=-1)  # a stand-in P: the floor's cost is shape only
        self.vs = [self.values[0][i, 0].contiguous() for i in range(len(self.deltas))]  # [N, D] per Δ item
        self.out = torch.empty(n, d)
        self.rows = floor_rows(n)
        # the eager bound's stand-ins (shapes only): scores over the padded keys, a block max, a magic constant
        npad = -(-n // _BLOCK_N) * _BLOCK_N
        self.s = torch.randn(n, npad, generator=g)
        self.m = self.s.view(n, -1, _BLOCK_N).amax(-1, keepdim=True)
        self.magic = torch.full((self.rows, npad), 1.5 * 2.0**20)
        self.w = torch.rand(n, npad // _BLOCK_N, 1, generator=g)
        self.units = len({c["order"] for c in SWEEP_CALLS}) * len(self.deltas) * len(self.values)
        self.pw = torch.empty(self.rows, npad)
        # the columns each (order, Δ, value) unit computes itself: all of them forward, the leading block reverse

        lead = lead_columns(_BLOCK_N, npad // _BLOCK_N, SWEEP_KSINK, [SCORE_SLICE]) or npad  # None: nothing shared
        self.unit_widths = [npad if o == "forward" else lead for o in sorted({c["order"] for c in SWEEP_CALLS})
                            for _ in range(len(self.deltas) * len(self.values))]

    def engine(self):
        res = attention_calls(self.q, self.k, self.values, [dict(c) for c in SWEEP_CALLS], ksink=SWEEP_KSINK,
                              backend="emulator")
        # runs counted from what came back: one per (call, value tensor, Δ item)
        return sum(r.out.shape[0] for per_call in res for r in per_call)

    def reference(self):
        reference_stack(self.q, self.k, self.values)

    def eager_bound(self):
        """The least elementwise work, on top of the floor, of an engine that forms every run's P in torch ops
        (pcast-bench --sweep's eager bound), per (order, Δ, value) unit over the columns the unit cannot take
        from its stack's anchor: every padded key in forward order, only the leading block in reverse order
        (:mod:`pcast.emulator.reverse`: the blocks visited before the sink block are the anchor's). Over
        those columns ``exp(s - m)`` once a unit (the contract's torch.exp, whose bits the results hold; the
        scales of an order share it) and per run the cast's two additions of the magic constant and the sign
        and row sum that count p_q > 0; over every column, per run, the blocks' alpha weights. One torch op each
        over the run's chunks of rows, the magic constant, weights and the anchor's P given."""
        n, rows, npad = self.n, self.rows, self.s.shape[-1]
        u = buf = None
        per_unit = self.runs // self.units
        for width in self.unit_widths:
            for r0 in range(0, n, rows):
                r1 = min(n, r0 + rows)
                sb = self.s[r0:r1, :width].view(r1 - r0, -1, _BLOCK_N)
                u = torch.sub(sb, self.m[r0:r1, :width // _BLOCK_N]).exp_().view(r1 - r0, -1)
                for _ in range(per_unit):
                    buf = torch.add(u, self.magic[:r1 - r0, :width])
                    buf.sub_(self.magic[:r1 - r0, :width])
                    torch.sign(buf).sum(-1)
                    if width == npad:
                        buf.view(r1 - r0, -1, _BLOCK_N).mul_(self.w[r0:r1])
                    else:  # the anchor's weighted blocks into the run's P
                        torch.mul(self.s[r0:r1].view(r1 - r0, -1, _BLOCK_N), self.w[r0:r1],
                                  out=self.pw[:r1 - r0].view(r1 - r0, -1, _BLOCK_N))
        return u, buf

    def fused_bound(self):
        """The least work a fused engine adds to the floor (pcast-bench --sweep's fused bound): one compiled exp
        per (order, Δ, value) unit and one compiled cast with its exact-decision test per run, over every padded
        key, in the runs' chunks of rows (:func:`pcast.emulator.fusedmath.exp_rows`,
        :func:`pcast.emulator.compiled.cast_and_mark`)."""
        n, rows = self.n, self.rows
        u = np.empty((rows, self.s.shape[-1]), np.float32)
        a, c = torch.full((rows,), 1e-6), torch.full((rows,), 1e-6)
        kf = torch.ones(self.s.shape[-1])
        for _ in range(self.units):
            for r0 in range(0, n, rows):
                r1 = min(n, r0 + rows)
                exp_rows(self.s[r0:r1].numpy(), u[:r1 - r0], torch.get_num_threads())
        for _ in range(self.runs):
            for r0 in range(0, n, rows):
                r1 = min(n, r0 + rows)
                cast_and_mark(torch.from_numpy(u[:r1 - r0]), a[:r1 - r0], c[:r1 - r0], kf, FORMATS["e4m3fn"], True)

    def floor(self):
        p, out, rows, n = self.p, self.out, self.rows, self.n
        for r in range(self.runs):
            v = self.vs[r % len(self.vs)]
            for r0 in range(0, n, rows):
                r1 = min(n, r0 + rows)
                torch.matmul(p[r0:r1], v, out=out[r0:r1])
