"""pcast.attention_scales: one pass of steps 1-2, several scales S (docs/interfaces.md).

The sweeps run every scale of an order through one call of it, so every tidy row rests on this:
``result[i][j]`` must be bit-identical (output and every diagnostic) to
``pcast.attention_values(q, k, values, scale=scales[i])[j]``, itself bit-identical to a call of
pcast.attention (tests/emulator/test_attention_values.py). The oracle here is those separate calls; the
emulator's shared path casts a copy of the unrounded p for every scale but the last, which casts it
in place, so a slip (the cast of one scale seen by the next, a saturation flag or a rounded row sum
taken from the wrong scale, one diagnostic tensor for two scales) shows up as a bit difference.
Each case runs its scales in two orders, so that every scale takes both the copy and the in-place
path.

One torch thread, as every pipeline job (see tests/emulator/test_attention_values.py for why).
"""

import math

import pytest
import torch

import pcast
import pcast.emulator.core as emulator
from pcast.contract import DIAGNOSTICS
from pcast.models.sinks import apply_sink, make_base

# 448 is e4m3fn's max finite value (p <= 1, so p·448 just reaches it); 512 saturates.
SCALES = [1.0, 100.0, 256.0, 448.0, 512.0]
H, H_KV = 4, 2




def inputs(seed, n=100, d=16, *, ksink=4, delta=12.0, svs=(1.0, 0.25), batch=2):
    """q [batch, H, n, d]; k and two value tensors [batch, H_KV, n, d] (grouped-query attention), keys
    0..ksink-1 sinks of strength ``delta`` (pcast.models.sinks), one value tensor per sink_v_scale of ``svs``."""
    base = make_base(seed, batch=batch, heads=H, n=n, d=d)
    q, k, _ = apply_sink(*base, ksink=ksink, delta=delta, sink_v_scale=1.0)
    values = [apply_sink(*base, ksink=ksink, delta=delta, sink_v_scale=s)[2][:, :H_KV].contiguous() for s in svs]
    return q, k[:, :H_KV].contiguous(), values


def assert_same_bits(a, b):
    assert a.backend == b.backend
    bits = {torch.float32: torch.int32, torch.float64: torch.int64}
    assert torch.equal(a.out.view(bits[a.out.dtype]), b.out.view(bits[b.out.dtype]))
    for c in DIAGNOSTICS:
        assert torch.equal(getattr(a, c), getattr(b, c)), c


def assert_like_separate_calls(q, k, values, scales, **kw):
    """attention_scales against one attention_values call per scale, in the given order and reversed."""
    expected = {s: pcast.attention_values(q, k, values, scale=s, **kw) for s in scales}
    for order in (list(scales), list(reversed(scales))):
        got = pcast.attention_scales(q, k, values, scales=order, **kw)
        assert len(got) == len(order)
        for s, results in zip(order, got):
            assert len(results) == len(values)
            for r, e in zip(results, expected[s]):
                assert_same_bits(r, e)
    return expected


# ------------------------------------------------------------------------- the shared path


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
@pytest.mark.parametrize("rowsum", ["unrounded", "rounded"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_each_scale_is_the_separate_call_bit_for_bit(order, causal, rowsum, fmt):
    # N = 100 with block_n = 32: the last block is padding; 4 sink keys at Δ = 12 underflow the rest
    q, k, values = inputs(3)
    kw = dict(order=order, causal=causal, rowsum=rowsum, fmt=fmt, ksink=4, block_n=32, block_m=16,
              backend="emulator")
    expected = assert_like_separate_calls(q, k, values, SCALES, **kw)
    # the cases reach the paths they are meant to
    assert int(expected[1.0][0].underflow.sum()) > 0  # S = 1: the sink underflows the other keys
    if fmt == "e4m3fn":
        assert int(expected[512.0][0].saturated.sum()) > 0  # S > 448: p = 1 saturates
        assert int(expected[448.0][0].saturated.sum()) == 0  # p·448 <= 448: at the edge, not over
    # every scale was cast on its own: no two scales' outputs or underflow counts are all equal
    outs = [expected[s][0].out for s in SCALES]
    assert all(not torch.equal(a, b) for i, a in enumerate(outs) for b in outs[i + 1:])
    # the two value tensors are not one
    assert not torch.equal(expected[1.0][0].out, expected[1.0][1].out)


# Policy options of the multiply scale mode, each entering a step the shared path must keep per scale
# or shared: a stale max (tau > 0: every scale checks saturation), a sink logit that seeds the max or
# joins l at the end, operand casts of q, k and each V, a score scale that is not a power of two,
# no rounding at all, and a named policy.
POLICY_CASES = {
    "lazy-rescale": dict(rescale_threshold=4.0, block_n=16),
    "sink-logit-init": dict(sink=True, sink_mode="init"),
    "sink-logit-final": dict(sink=True, sink_mode="final", order="reverse", rowsum="rounded"),
    "operand-casts": dict(qk_fmt="e4m3fn", v_fmt="e5m2", v_scale=0.25, causal=True),
    "sm-scale-not-pow2": dict(sm_scale=0.3, block_n=64),
    "no-rounding": dict(fmt=None, rowsum="rounded"),
    "policy-vllm-unified": dict(policy="vllm-unified-1c98a49", sink=True),
    "policy-flashinfer-hopper": dict(policy="flashinfer-hopper"),  # its scale 448 is overridden
}


@pytest.mark.parametrize("case", list(POLICY_CASES))
def test_policy_options_of_multiply_are_the_separate_calls(case):
    kw = dict(POLICY_CASES[case])
    q, k, values = inputs(5, delta=8.0)
    if kw.pop("sink", False):
        kw["sink_logit"] = torch.tensor([[9.0, 2.0, 0.5, 4.0], [5.0, 12.0, 1.0, 3.0]])
    assert_like_separate_calls(q, k, values, SCALES, ksink=4, backend="emulator", **kw)


def test_lazy_rescale_saturates_below_max_finite():
    """A stale max lets p exceed 1, so even S = 256 < 448 can saturate: the check is per scale, not S > 448."""
    q, k, values = inputs(8, delta=0.0)
    kw = dict(rescale_threshold=8.0, block_n=16, ksink=4, backend="emulator", order="reverse")
    expected = assert_like_separate_calls(q, k, values, [1.0, 300.0, 448.0], **kw)
    assert int(expected[448.0][0].saturated.sum()) > 0


def test_steps_1_2_run_once_for_all_scales(monkeypatch):
    """The point of attention_scales: p = exp(s - m) is taken once per chunk of rows, not once per scale (the
    eager path, counted by its calls; the compiled pass takes u once per row by construction)."""
    from pcast.emulator import fused
    monkeypatch.setattr(fused, "ENABLED", False)
    calls = []
    real = emulator._unrounded
    monkeypatch.setattr(emulator, "_unrounded", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    q, k, values = inputs(1)
    pcast.attention_values(q, k, values, scale=1.0, backend="emulator")
    once = len(calls)
    assert once > 0
    calls.clear()
    pcast.attention_scales(q, k, values, scales=SCALES, backend="emulator")
    assert len(calls) == once
    calls.clear()
    pcast.attention_scales(q, k, values, scales=SCALES, backend="emulator", scale_mode="exp2_offset")
    assert len(calls) == once * len(SCALES)  # exp2_offset: step 2 depends on S, one run per scale


def test_one_scale_is_attention_values():
    q, k, values = inputs(2)
    (got,) = pcast.attention_scales(q, k, tuple(values), scales=(256,), backend="emulator", ksink=4)
    for r, e in zip(got, pcast.attention_values(q, k, values, scale=256, backend="emulator", ksink=4)):
        assert_same_bits(r, e)


def test_a_repeated_scale_gives_equal_results_of_their_own():
    q, k, values = inputs(4)
    (a, _), (b, _) = pcast.attention_scales(q, k, values, scales=[256.0, 256.0], backend="emulator", ksink=4)
    assert_same_bits(a, b)
    a.underflow += 1  # a caller changing one result's diagnostics must not change another's
    assert not torch.equal(a.underflow, b.underflow)


def test_results_do_not_share_diagnostic_tensors():
    q, k, values = inputs(4)
    got = pcast.attention_scales(q, k, values, scales=[1.0, 256.0], backend="emulator", ksink=4)
    tensors = [getattr(r, c) for results in got for r in results for c in DIAGNOSTICS]
    ptrs = [t.data_ptr() for t in tensors]
    assert len(set(ptrs)) == len(ptrs)


# ------------------------------------------------------------------------- the fallback paths


@pytest.mark.parametrize("kw", [
    dict(scale_mode="exp2_offset", backend="emulator", rescale_threshold=4.0, block_n=16),
    dict(policy="fa3", backend="emulator"),  # exp2_offset by policy
    dict(policy="sage2", backend="emulator", causal=True),  # exp2_offset, block_n 64
    dict(backend="reference", causal=True),
], ids=["exp2_offset", "fa3-policy", "sage2-policy", "reference"])
def test_fallback_is_the_separate_calls(kw):
    q, k, values = inputs(6, delta=8.0)
    expected = assert_like_separate_calls(q, k, values, SCALES, ksink=4, **kw)
    if kw["backend"] == "emulator":  # (the float64 reference does not depend on S)
        assert not torch.equal(expected[1.0][0].out, expected[512.0][0].out)
        assert int(expected[512.0][0].saturated.sum()) > 0


@pytest.mark.heavy  # test_fallback_is_the_separate_calls checks the same fallback through the emulator
def test_fallback_triton_interpreted_is_the_separate_calls():
    pytest.importorskip("triton")
    q, k, values = inputs(9, n=40, d=16, batch=1)
    assert_like_separate_calls(q, k, values, [1.0, 512.0], ksink=4, backend="triton", block_n=16, block_m=16)


def test_emulator_refuses_several_scales_with_exp2_offset():
    q, k, values = inputs(1)
    kw = dict(reverse=False, fmt=pcast.get_format("e4m3fn"), causal=False, ksink=4, block_n=32, sm_scale=0.25,
              rowsum_rounded=False, scale_mode="exp2_offset")
    with pytest.raises(ValueError, match="multiply"):
        emulator.emulate_attention_scales(q, k, tuple(values), scales=(1.0, 2.0), **kw)


# ------------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize("scales, kwargs, match", [
    ([], {}, r"scales=\[\] is not allowed; allowed: a non-empty list or tuple of finite numbers > 0"),
    ((), {}, r"scales=\(\) is not allowed; allowed: a non-empty list"),
    (None, {}, r"scales=None is not allowed; allowed: a non-empty list"),
    (256.0, {}, r"scales=256.0 is not allowed; allowed: a non-empty list"),
    ([1.0, 0.0], {}, r"scales\[1\]=0.0 is not allowed; allowed: a finite number > 0"),
    ([1.0, -2.0], {}, r"scales\[1\]=-2.0 is not allowed"),
    ([math.nan], {}, r"scales\[0\]=nan is not allowed"),
    ([1.0, math.inf], {}, r"scales\[1\]=inf is not allowed"),
    ([True], {}, r"scales\[0\]=True is not allowed"),
    (["256"], {}, r"scales\[0\]='256' is not allowed"),
    ([1.0], {"scale": 2.0}, "attention_scales: scale= is not allowed; allowed: the scales in scales="),
    ([1.0], {"ordr": "reverse"}, "attention_scales: .*ordr.*allowed keywords: those of pcast.attention"),
    ([1.0], {"order": "sideways"}, "order='sideways' is not allowed"),
    ([1.0], {"backend": "gpu"}, "backend='gpu' is not allowed"),
    ([1.0], {"scale_mode": "exp3"}, "scale_mode='exp3' is not allowed"),
    ([1.0, 2.0], {"backend": "reference", "rowsum": "exact"}, "rowsum='exact' is not allowed"),
])
def test_bad_input_names_the_argument(scales, kwargs, match):
    q, k, values = inputs(5, n=16)
    with pytest.raises(ValueError, match=match):
        pcast.attention_scales(q, k, values, scales=scales, **{"backend": "emulator", **kwargs})


@pytest.mark.parametrize("values, match", [
    ([], "values must be a non-empty list or tuple"),
    (None, "values must be a non-empty list or tuple"),
    ("short", r"values\[1\] .* not allowed"),
    ("nan", r"values\[1\] contains NaN or inf"),
])
def test_bad_values_name_the_argument(values, match):
    q, k, (v0, v1) = inputs(5, n=16)
    pick = {"short": [v0, v1[:, :, :5]], "nan": [v0, v1.clone().fill_(math.nan)]}
    with pytest.raises(ValueError, match=match):
        pcast.attention_scales(q, k, pick[values] if isinstance(values, str) else values, scales=[1.0, 2.0],
                                 backend="emulator")


def test_scales_is_keyword_only_and_required():
    q, k, values = inputs(5, n=16)
    with pytest.raises(TypeError):
        pcast.attention_scales(q, k, values)


# ------------------------------------------------------------------------- the sweep shard


def test_sweep_stack_rows_are_those_of_one_call_per_scale():
    """pcast.pipeline.runs._sweep_stack (one attention_calls call a stack, the reference's non-sink sums
    shared) against the rows one attention_values call per (order, scale) and one reference_attention per
    item give, in the same order: counts equal, errors within 1e-9 relative (the reference is
    the same float64 softmax summed in another order)."""
    from pcast.contract import combo_label
    from pcast.pipeline import runs
    from pcast.reference import reference_attention

    base = make_base(12, n=64, d=16)
    deltas, svs_list = [4.0, 12.0], [0.0, 1.0]
    q, k, values = runs.value_stack(base, 4, deltas, svs_list, torch.device("cpu"))
    spec = {"order": ["forward", "reverse"], "scale": [1, 100, 448, 512], "fmt": "e4m3fn", "rowsum": "unrounded",
            "backend": "emulator"}
    meta = {"experiment": "scales", "seed": 12}
    tally = runs.Tally()
    runs._sweep_stack(tally, spec, q, k, values, svs_list, deltas, meta, causal=False, ksink=4, block_m=16,
                      block_n=16)
    refs = [torch.cat([reference_attention(q[i:i + 1], k[i:i + 1], v[i:i + 1]) for i in range(len(deltas))])
            for v in values]
    ref_sqs = [ref.square().reshape(len(deltas), -1).mean(1) for ref in refs]
    rows = []
    for order in spec["order"]:
        for scale in map(float, spec["scale"]):
            results = pcast.attention_values(q, k, values, order=order, scale=scale, fmt="e4m3fn", causal=False,
                                               ksink=4, block_m=16, block_n=16, rowsum="unrounded",
                                               backend="emulator")
            combo = {"order": order, "scale": scale, "combo": combo_label(order, scale)}
            for svs, r, ref, ref_sq in zip(svs_list, results, refs, ref_sqs):
                rows += runs._item_rows(r, ref, ref_sq, [(svs, dl) for dl in deltas], {**meta, **combo})
    assert len(tally.rows) == len(rows) == 2 * 4 * 2 * 2
    for got, want in zip(tally.rows, rows):
        assert got.keys() == want.keys()
        for c in want:  # NaN == NaN here: a row with no terms has underflow_frac NaN in both
            if c in ("mse", "rel_mse", "max_abs_err"):
                assert got[c] == pytest.approx(want[c], rel=1e-9, abs=0), c
                continue
            assert got[c] == want[c] or (isinstance(want[c], float) and math.isnan(want[c]) and math.isnan(got[c])), c
    assert tally.runs == 2 * 4 * len(deltas) * len(values)
    assert tally.backends == {"emulator"} and tally.kernel_s > 0
