"""pcast.attention_values: one P path, several value tensors (docs/interfaces.md).

The sweeps and the policies experiment run their sink_v_scale grid through it, so every tidy row
rests on this: result i must be bit-identical (output and every diagnostic) to a call of
pcast.attention with values[i] alone, on every backend and every policy option. The oracle here
is the separate calls; the emulator's shared path is a different code path (steps 1-4 once for all
value tensors), so a slip in it (a cast of the wrong tensor, a normalisation done once, a
diagnostic taken from one value tensor's pass) shows up as a bit difference.

The comparisons run on one torch thread, as every pipeline job does (``threads: 1``): torch's CPU
matmul is MKL's sgemm, which does not promise the same summation order from call to call with
several threads (no conditional-numerical-reproducibility mode), and once in this module's first
runs a 2-thread call differed from its twin by ~70 ulps of an output of 0.08 (an accumulation
order over 300 keys with cancellation, not a contract difference).
"""

import math

import pytest
import torch

import pcast
from pcast.contract import DIAGNOSTICS
from pcast.pipeline.runs import delta_chunks, value_stack
from pcast.models.sinks import apply_sink, make_base


def inputs(seed, nq, nk, d=16, *, b=2, h=2, n_values=3):
    """q [b, h, nq, d], k [b, h, nk, d] with a sink key at position 0, and n_values value tensors."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, nq, d, generator=g)
    k = torch.randn(b, h, nk, d, generator=g)
    qm = q.mean(2)
    k[:, :, 0] += qm * (8.0 * math.sqrt(d) / qm.pow(2).sum(-1, keepdim=True))
    values = [torch.randn(b, h, nk, d, generator=g) * (i + 1) for i in range(n_values)]
    return q, k, values




def assert_same_bits(a, b):
    assert a.backend == b.backend
    assert torch.equal(a.out.view(torch.int32) if a.out.dtype == torch.float32 else a.out.view(torch.int64),
                       b.out.view(torch.int32) if b.out.dtype == torch.float32 else b.out.view(torch.int64))
    for c in DIAGNOSTICS:
        assert torch.equal(getattr(a, c), getattr(b, c)), c


# Options that touch every step: lazy rescaling and exp2_offset (fa4), a sink logit that seeds the
# max (vllm-unified), the paper's contract with a rounded row sum, V cast per tensor with a tensor
# or a fixed scale (a shared cast would take one amax over all value tensors and change the bits),
# saturation (S = 448 with a stale max).
CASES = {
    "fa4": dict(policy="fa4", block_n=16),
    "vllm-init-logit": dict(policy="vllm-unified-1c98a49", sink=True),
    "paper-rounded-causal": dict(order="reverse", scale=256.0, rowsum="rounded", causal=True, block_n=32,
                                 causal_align="top_left"),
    "v-cast-tensor": dict(policy="fa3", v_fmt="e4m3fn", qk_fmt="e4m3fn", block_n=128),
    "v-cast-fixed": dict(policy="sage2", v_fmt="e5m2", v_scale=0.25, sink=True, sink_mode="final"),
    "saturating": dict(scale=448.0, scale_mode="exp2_offset", rescale_threshold=4.0, block_n=16, causal=True,
                       causal_align="top_left"),
}


# The interpreted kernel with a learned sink or a saturating lazy policy takes many seconds; the inner loop
# runs those two through the emulator and the reference, and the other cases through all three.
HEAVY_TRITON = ("vllm-init-logit", "saturating")


@pytest.mark.parametrize("case, backend", [
    pytest.param(c, b, marks=pytest.mark.heavy) if b == "triton" and c in HEAVY_TRITON else (c, b)
    for c in CASES for b in ("emulator", "triton", "reference")])
def test_each_result_is_the_single_call_bit_for_bit(case, backend):
    kw = dict(CASES[case])
    nq, nk = (40, 72) if backend == "triton" else (100, 300)  # odd shapes: Nq != Nk, not whole blocks
    q, k, values = inputs(7, nq, nk)
    if kw.pop("sink", False):
        kw["sink_logit"] = torch.tensor([[9.0, 2.0], [5.0, 12.0]])
    results = pcast.attention_values(q, k, values, ksink=1, backend=backend, **kw)
    assert len(results) == len(values)
    for v, r in zip(values, results):
        assert_same_bits(r, pcast.attention(q, k, v, ksink=1, backend=backend, **kw))
    if backend == "emulator" and case == "saturating":
        assert int(results[0].saturated.sum()) > 0  # the case does reach the saturation path
    # the value tensors differ, so the outputs must: the shared path did not reuse one V
    assert not torch.equal(results[0].out, results[1].out)


def test_one_value_tensor_is_attention():
    q, k, values = inputs(3, 64, 64, n_values=1)
    (r,) = pcast.attention_values(q, k, tuple(values), policy="fa3", backend="emulator", ksink=1)
    assert_same_bits(r, pcast.attention(q, k, values[0], policy="fa3", backend="emulator", ksink=1))


def test_diagnostics_are_not_shared_tensors():
    q, k, values = inputs(4, 32, 32, n_values=2)
    a, b = pcast.attention_values(q, k, values, backend="emulator")
    a.underflow += 1  # a caller changing one result's diagnostics must not change the other's
    assert not torch.equal(a.underflow, b.underflow)


@pytest.mark.parametrize("values, kwargs, match", [
    ([], {}, "values must be a non-empty list or tuple"),
    ("v", {}, "values must be a non-empty list or tuple"),
    (None, {}, "values must be a non-empty list or tuple"),
    ("short", {}, r"values\[1\] .* not allowed; allowed: a torch.float32 tensor of values\[0\]'s shape"),
    ("float64", {}, r"values\[1\] .*float64"),
    ("nan", {}, r"values\[1\] contains NaN or inf"),
    ("ok", {"ordr": "reverse"}, "attention_values: .*ordr.*allowed keywords: those of pcast.attention"),
    ("ok", {"order": "sideways"}, "order='sideways' is not allowed"),
    ("ok", {"v_fmt": "e9m9"}, "v_fmt='e9m9' is not allowed"),
])
def test_bad_input_names_the_argument(values, kwargs, match):
    q, k, (v0, v1) = inputs(5, 16, 16, n_values=2)
    pick = {"short": [v0, v1[:, :, :5]], "float64": [v0, v1.double()], "nan": [v0, v1.clone().fill_(math.nan)],
            "ok": [v0, v1]}
    with pytest.raises(ValueError, match=match):
        pcast.attention_values(q, k, pick.get(values, values) if isinstance(values, str) else values,
                                 backend="emulator", **kwargs)


def test_value_stack_shares_q_and_k_across_sink_v_scale():
    """The premise of the sweeps' stacking: apply_sink changes k with Δ and v with sink_v_scale only."""
    base = make_base(11, n=32, d=16)
    deltas, svs = [0.0, 5.5, 12.0], [0.0, 0.25, 1.0]
    q, k, values = value_stack(base, 4, deltas, svs, torch.device("cpu"))
    assert q.shape == k.shape == (3, 1, 32, 16) and len(values) == 3
    for j, s in enumerate(svs):
        for i, dl in enumerate(deltas):
            q1, k1, v1 = apply_sink(*base, ksink=4, delta=dl, sink_v_scale=s)
            assert torch.equal(q[i:i + 1], q1) and torch.equal(k[i:i + 1], k1) and torch.equal(values[j][i:i + 1], v1)


@pytest.mark.parametrize("n_deltas, n_values, max_items, sizes", [
    (33, 3, 64, [21, 12]), (33, 2, 66, [33]), (33, 1, 66, [33]), (5, 4, 3, [1] * 5), (7, 2, 4, [2, 2, 2, 1]),
])
def test_delta_chunks_hold_at_most_max_items(n_deltas, n_values, max_items, sizes):
    chunks = delta_chunks([0.5 * i for i in range(n_deltas)], n_values, max_items)
    assert [len(c) for c in chunks] == sizes
    assert [x for c in chunks for x in c] == [0.5 * i for i in range(n_deltas)]
