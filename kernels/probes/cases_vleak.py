"""A 2026 report on V's quantisation leaking masked future tokens into causal P·V, rebuilt as a case of table T9
(:mod:`pcast.probes.cases`): Transformer Engine's MXFP8 V and its tensorwise current scaling.

The report's property: under a causal mask, the outputs through row t do not change when V changes only after t.
A scale shared along the sequence breaks it: ``v_scale="mx_seq32"`` (an E8M0 scale, rounded up, per 32 positions
per channel) lets a future value in the same block of 32 raise an earlier value's scale until it underflows, and
``v_scale="tensor_global"`` (one amax over the whole tensor) lets any future value do it (docs/interfaces.md, "V's
scales over the whole tensor or along the sequence"). The remedy the report names (cuDNN's) runs the
sequence-reduction P·V with BF16 operands: V not quantised, P in bf16. The fixture is the report's, complete.
"""

from __future__ import annotations

import functools

import torch

import pcast
from pcast.probes.case_model import Case, Measurement

__all__ = ["V_LEAK", "VLEAK_FIXTURE", "leak_outputs"]

#: The report's fixture: S = 128 positions, D = 128, T = 7; q = k = ones of shape (S, 1, 1, D) in bf16 (here
#: [1, 1, S, D]), causal. MX: V all zeros but V[0,0,0,0] = 2^-20; "same" adds V[16,0,0,0] = 1.0, "next" adds
#: V[32,0,0,0] = 1.0. Current scaling: V[0,0,0,0] = 2^-10; "future" adds V[64,0,0,0] = 1024.0. The FP8 calls cast
#: V to E4M3 (P to E4M3 at S = 1: every visible score is equal, so P = 1 exactly); the remedy casts P to bf16
#: and V not at all.
VLEAK_FIXTURE = dict(S=128, D=128, T=7, mx=(2.0 ** -20, {"same": (16, 1.0), "next": (32, 1.0)}),
                     current=(2.0 ** -10, {"future": (64, 1024.0)}))
_V_SCALE = {"mx": "mx_seq32", "current": "tensor_global"}


def _values(first: float, extra: tuple | None) -> torch.Tensor:
    f = VLEAK_FIXTURE
    v = torch.zeros(1, 1, f["S"], f["D"], dtype=torch.bfloat16)
    v[0, 0, 0, 0] = first
    if extra is not None:
        v[0, 0, extra[0], 0] = extra[1]
    return v


@functools.lru_cache(maxsize=8)
def leak_outputs(scaling: str, variant: str | None, remedy: bool = False) -> torch.Tensor:
    """Rows 0..T of the output (float32 [T + 1, D]) of ``scaling`` ("mx" or "current") with V's ``variant``
    (None: the base), FP8 V (or the remedy's BF16 P·V operands)."""
    f = VLEAK_FIXTURE
    first, variants = f[scaling]
    q = torch.ones(1, 1, f["S"], f["D"], dtype=torch.bfloat16)
    kw = dict(fmt="bf16") if remedy else dict(fmt="e4m3fn", v_fmt="e4m3fn", v_scale=_V_SCALE[scaling])
    v = _values(first, None if variant is None else variants[variant])
    out = pcast.attention(q, q.clone(), v, causal=True, backend="emulator", **kw).out
    return out[0, 0, :f["T"] + 1].float()


def _changed(scaling: str, variant: str, remedy: bool = False) -> float:
    """1 where a row through T differs (in bits) between the base and the variant, else 0."""
    a, b = leak_outputs(scaling, None, remedy), leak_outputs(scaling, variant, remedy)
    return float(not torch.equal(a.view(torch.int32), b.view(torch.int32)))


def _first_row(scaling: str, variant: str | None) -> float:
    """Row 0's channel 0 (V[0] itself, the only key it sees) over V[0]'s value: 1 kept, 0 underflowed."""
    return float(leak_outputs(scaling, variant)[0, 0]) / VLEAK_FIXTURE[scaling][0]


V_LEAK = Case(
    "te-mxfp8-v-future-leak", "NVIDIA/TransformerEngine", "issue 3248 (cudnn-frontend PRs 983, 1123)",
    "https://github.com/NVIDIA/TransformerEngine/issues/3248",
    "causal attention with FP8 V: MXFP8 (`v_scale=\"mx_seq32\"`, D = E8M0_round_up(max|V| over 32 positions / "
    "448) per channel) or tensorwise current scaling (`v_scale=\"tensor_global\"`); remedy (cuDNN): the "
    "sequence-reduction P·V with BF16 operands",
    "the report's: S = 128, D = 128, T = 7, q = k = ones (bf16), causal; MX: V[0,0,0,0] = 2^-20, same block adds "
    "V[16,0,0,0] = 1.0, next block V[32,0,0,0] = 1.0; current scaling: V[0,0,0,0] = 2^-10, future adds "
    "V[64,0,0,0] = 1024.0 (one batch and head: per-(batch, head) `\"tensor\"` would read the same amax)",
    (Measurement("MX, same block: rows through T changed (the report: the property broken, 1)", 1, 0,
                 lambda: _changed("mx", "same")),
     Measurement("MX, same block: row 0 over V[0] = 2^-20 (the report: small values underflow to 0)", 0, 2,
                 lambda: _first_row("mx", "same")),
     Measurement("MX, base: row 0 over V[0] = 2^-20 (kept while its block's amax is its own)", 1, 2,
                 lambda: _first_row("mx", None)),
     Measurement("MX, next block: rows through T changed (the report: the property held, 0)", 0, 0,
                 lambda: _changed("mx", "next")),
     Measurement("remedy (BF16 P·V operands), MX same block: rows through T changed (0)", 0, 0,
                 lambda: _changed("mx", "same", remedy=True)),
     Measurement("current scaling, future: rows through T changed (the report: one amax breaks it globally, 1)",
                 1, 0, lambda: _changed("current", "future")),
     Measurement("current scaling, future: row 0 over V[0] = 2^-10 (underflowed to 0)", 0, 2,
                 lambda: _first_row("current", "future")),
     Measurement("current scaling, base: row 0 over V[0] = 2^-10 (kept)", 1, 2, lambda: _first_row("current", None)),
     Measurement("remedy (BF16 P·V operands), current scaling future: rows through T changed (0)", 0, 0,
                 lambda: _changed("current", "future", remedy=True))),
    title="Transformer Engine MXFP8 V leaks the future", group="Transformer Engine",
    checks="causal P·V with V scaled along the sequence (`v_scale=\"mx_seq32\"`) or by one amax "
           "(`\"tensor_global\"`), the report's fixture: rows through T = 7 change when V changes at 16 (same "
           "32-block: 2^-20 underflows) and at 64 (current scaling: 2^-10 underflows), not at 32 (next block); "
           "the remedy (BF16 operands) holds the property",
)
