"""pcast.attention_calls: several attention_values calls on one q, k and values (docs/interfaces.md).

The sweeps run every (order, scale) of a Δ stack, and the policies experiment every distinct policy
call of a stack, through one call of it, so every tidy row rests on this: ``result[i][j]`` must be
bit-identical (output and all five diagnostics) to
``pcast.attention_values(q, k, values, **{**common, **calls[i]})[j]``. The oracle here is those
run-by-run calls. The emulator's shared path differs from them in three ways, each of which a slip
would show as a bit difference: the scores are taken once per score group and handed to every call
(a call overwrites its copy), the items of a Δ stack take an anchor item's scores and recompute only
the leading (sink) columns (:class:`pcast.emulator.calls._Shared`, guarded by ``_probe_slice``), and
calls that differ only in ``scale`` share steps 1-2.

``pcast.emulator.calls.SHARING`` counts what was shared; the tests read its differences to check that
sharing really happens (and does not, when the probe says no). Every test runs on both P paths: the compiled
one (``pcast.emulator.fused``) and the eager torch one (what CUDA tensors take), which alone shares reverse
order's blocks past the sinks (:func:`reverse_shared`).

Every call names ``backend="emulator"``: on a machine with an FP8 GPU "auto" would run Triton, which
shares nothing. One torch thread, as every pipeline job (tests/emulator/test_attention_values.py says why).
"""

import math

import pytest
import torch

import pcast
import pcast.emulator.core as emulator
import pcast.emulator.calls as engine
from pcast.emulator import fused
from pcast.contract import DIAGNOSTICS
from pcast.pipeline.runs import value_stack
from pcast.models.sinks import learned_sink, make_base


CPU = torch.device("cpu")
DELTAS = [0.0, 4.0, 8.0, 12.0, 16.0]
SCALES = [1.0, 100.0, 256.0, 448.0]  # 448: e4m3fn's max finite value
EMU = {"backend": "emulator"}


@pytest.fixture(autouse=True, params=["fused", "eager"])
def p_path(request, monkeypatch):
    """The P path every test of this module runs on."""
    monkeypatch.setattr(fused, "ENABLED", request.param == "fused")
    return request.param


def reverse_shared(p_path, n):
    """How many (item, chunk) runs share reverse order's blocks past the sinks: ``n`` on the eager path, none
    through the compiled pass (each item's own pass is faster there)."""
    return n if p_path == "eager" else 0


def stack(seed=0, *, n=200, d=64, ksink=4, deltas=DELTAS, svs=(0.0, 1.0), heads=1, batch=1):
    """A Δ stack as the sweeps build it: q, k and one v per sink_v_scale, the Δ items along batch."""
    return value_stack(make_base(seed, batch=batch, heads=heads, n=n, d=d), ksink, list(deltas), list(svs), CPU)


def logit_stack(seed=0, *, n=200, d=64, deltas=DELTAS, heads=1):
    """The policies experiment's learned-sink kind: no sink key, one v (sink_v_scale 0), a sink logit
    per item (kernels/pipeline/policy_runs.py, ``_stack``)."""
    q, k, values = value_stack(make_base(seed, heads=heads, n=n, d=d), 0, list(deltas), [0.0], CPU)
    sink = torch.cat([learned_sink(dl, heads=heads) for dl in deltas])
    return q, k, values, sink


def snapshot():
    return dict(engine.SHARING)


def grown(before):
    return {n: engine.SHARING[n] - before[n] for n in before}


def assert_same_bits(a, b, what=""):
    assert a.backend == b.backend, what
    bits = {torch.float32: torch.int32, torch.float64: torch.int64}
    assert a.out.dtype == b.out.dtype, what
    assert torch.equal(a.out.view(bits[a.out.dtype]), b.out.view(bits[b.out.dtype])), f"{what}: out"
    for c in DIAGNOSTICS:
        assert torch.equal(getattr(a, c), getattr(b, c)), f"{what}: {c}"


def assert_like_run_by_run(q, k, values, calls, **common):
    """attention_calls against one attention_values call per call; returns attention_calls' results."""
    got = pcast.attention_calls(q, k, values, calls, **common)
    assert isinstance(got, list) and len(got) == len(calls)
    for i, (call, results) in enumerate(zip(calls, got)):
        expected = pcast.attention_values(q, k, values, **{**common, **call})
        assert len(results) == len(values) == len(expected)
        for j, (r, e) in enumerate(zip(results, expected)):
            assert_same_bits(r, e, f"calls[{i}]={call!r}, values[{j}]")
    return got


# --- the acceptance: a Δ grid, every (order, S), bit for bit -----------------------------------

ORDER_SCALE = [{"order": o, "scale": s} for o in ("forward", "reverse") for s in SCALES]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_n", [32, 64])
def test_delta_grid_every_order_and_scale_matches_run_by_run(causal, block_n, p_path):
    """Δ 0..16, S in {1, 100, 256, 448}, both orders, N = 200 (not a multiple of block_n), ksink 4,
    sink_v_scale 0 and 1: outputs and all five diagnostics bit-identical to run-by-run calls."""
    q, k, values = stack(seed=1)
    before = snapshot()
    got = assert_like_run_by_run(q, k, values, ORDER_SCALE, causal=causal, ksink=4, block_n=block_n, **EMU)
    assert grown(before)["sliced"] > 0  # the stack did share its non-sink scores
    assert grown(before)["reverse"] == reverse_shared(p_path, len(DELTAS))  # and reverse order its blocks past
    # the sinks' (one chunk)
    # the diagnostics are not all trivially zero (an all-zero diagnostic would compare equal by luck)
    assert sum(int(r.underflow.sum()) for res in got for r in res) > 0
    assert sum(int(r.terms_sink.sum()) for res in got for r in res) > 0
    # and a couple against pcast.attention on one value tensor
    for i in (0, len(ORDER_SCALE) - 1):
        for j, v in enumerate(values):
            one = pcast.attention(q, k, v, causal=causal, ksink=4, block_n=block_n, **ORDER_SCALE[i], **EMU)
            assert_same_bits(got[i][j], one, f"calls[{i}] against pcast.attention, values[{j}]")


@pytest.mark.parametrize("causal", [False, True])
def test_delta_grid_several_chunks_of_rows(monkeypatch, causal, p_path):
    """The same with several chunks of rows per item (a smaller chunk budget: 64 rows of 256 padded
    keys, the last chunk 8 rows): a twin takes its anchor's scores chunk by chunk."""
    monkeypatch.setattr(emulator, "CHUNK_ELEMS", 64 * 256)
    monkeypatch.setattr("pcast.emulator.fused.FUSED_CHUNK_ELEMS", 64 * 256)  # (the compiled pass's chunks)
    q, k, values = stack(seed=2)
    calls = [{"order": "forward", "scale": 1.0}, {"order": "reverse", "scale": 256.0},
             {"order": "reverse", "scale": 448.0, "block_n": 128}]  # block_n 128: the same padded length (256)
    before = snapshot()
    assert_like_run_by_run(q, k, values, calls, causal=causal, ksink=4, block_n=64, **EMU)
    g = grown(before)
    items, chunks = len(DELTAS), 4
    assert g["full"] + g["sliced"] + g["copied"] == items * chunks  # one score group: scores once per chunk
    assert g["full"] < items * chunks * len(calls)
    assert g["reverse"] == reverse_shared(p_path, 2 * items * chunks)  # both reverse calls, chunk by chunk (block_n 128: the second of 2 blocks)


def test_sinks_wider_than_one_slice():
    """ksink 100 (> SCORE_SLICE): the leading columns a twin recomputes are two slices (128 of 256)."""
    q, k, values = stack(seed=3, ksink=100, deltas=[0.0, 6.0, 12.0])
    before = snapshot()
    assert_like_run_by_run(q, k, values, ORDER_SCALE[:2] + ORDER_SCALE[-2:], ksink=100, block_n=64, **EMU)
    assert grown(before)["sliced"] > 0


# --- mixed call lists, as the policies experiment makes them -------------------------------------------

MIXED = [
    {"order": "forward", "scale": 1.0, "block_n": 32},
    {"order": "reverse", "scale": 256.0, "block_n": 64},
    {"order": "forward", "scale": 448.0, "block_n": 128},
    {"order": "reverse", "scale": 512.0, "block_n": 64},  # p·512 > 448: saturates
    {"order": "reverse", "scale": 256.0, "scale_mode": "exp2_offset", "block_n": 128},
    {"order": "forward", "scale": 1.0, "scale_mode": "exp2_offset", "rescale_threshold": 8.0},
    {"order": "forward", "scale": 100.0, "rescale_threshold": 2.0, "block_n": 32},
    {"order": "forward", "scale": 1.0, "fmt": None},
    {"order": "reverse", "scale": 100.0, "fmt": None, "rowsum": "rounded"},
    {"order": "forward", "scale": 256.0, "rowsum": "rounded"},
    {"order": "reverse", "scale": 1.0, "fmt": "e5m2", "block_n": 32},
    {"order": "forward", "scale": 256.0, "qk_fmt": "e4m3fn", "qk_scale": "tensor", "v_fmt": "e4m3fn"},
    {"order": "reverse", "scale": 1.0, "qk_fmt": "e4m3fn", "qk_scale": "tensor", "block_n": 128},
    {"order": "forward", "scale": 1.0, "v_fmt": "e4m3fn", "v_scale": 0.01},
    {"order": "forward", "scale": 256.0, "qk_fmt": "e4m3fn", "qk_scale": 0.05, "fmt": "e5m2"},
    {"policy": "fa3"},
    {"policy": "fa4"},
    {"policy": "sage2"},
    {"policy": "flashinfer-hopper"},
    {"policy": "triton-tutorial"},
    {"policy": "fa4", "block_n": 64, "fmt": None},  # a policy with explicit keywords over it
]


@pytest.mark.parametrize("causal", [False, True])
def test_mixed_calls_sink_keys(causal, p_path):
    """Different blocks (32/64/128), exp2_offset, τ > 0, fmt None, rounded row sums, e5m2, operand
    casts and policy names in one list, on a Δ stack with sink keys: all bit-identical to run by run."""
    q, k, values = stack(seed=4)
    before = snapshot()
    got = assert_like_run_by_run(q, k, values, MIXED, causal=causal, ksink=4, **EMU)
    assert sum(int(r.saturated.sum()) for res in got for r in res) > 0  # a saturation count was compared
    # reverse order shared its blocks past the sinks' in the six eligible distinct calls: S 256, 512 (saturating),
    # exp2_offset (fa3 is the same call), fmt None with a rounded row sum, e5m2 and flashinfer-hopper; not fa4
    # (τ > 0) nor the per-tensor q/k cast (its items' scores differ throughout)
    assert grown(before)["reverse"] == reverse_shared(p_path, 6 * len(DELTAS))
    assert got[3][0].saturated.sum() > 0  # S = 512 in reverse order saturates
    if not causal:  # (causal rows are shorter: their running max stays near the sinks' scores)
        assert sum(int(r.underflow_sink.sum()) for res in got for r in res) > 0


@pytest.mark.parametrize("causal", [False, True])
def test_mixed_calls_learned_sink_logit(causal):
    """The learned-sink kind: a sink logit per item with sink_mode "final" and "init" (vLLM), in
    every scale mode, with and without τ, among calls without the logit."""
    q, k, values, sink = logit_stack(seed=5)
    calls = [{"order": "forward", "scale": 1.0, "sink_mode": "final"},
             {"order": "forward", "scale": 1.0, "sink_mode": "init"},
             {"order": "reverse", "scale": 256.0, "sink_mode": "init", "block_n": 32},
             {"order": "reverse", "scale": 256.0, "sink_mode": "final", "block_n": 128},
             {"order": "forward", "scale": 448.0, "sink_mode": "init", "scale_mode": "exp2_offset"},
             {"order": "reverse", "scale": 1.0, "sink_mode": "final", "scale_mode": "exp2_offset",
              "rescale_threshold": 8.0},
             {"order": "forward", "scale": 100.0, "sink_mode": "init", "rescale_threshold": 4.0},
             {"order": "forward", "scale": 1.0, "sink_mode": "init", "fmt": None, "rowsum": "rounded"},
             {"policy": "vllm-unified-1c98a49"},
             {"policy": "fa3"},
             {"policy": "sage2", "sink_mode": "init"},
             {"order": "forward", "scale": 1.0, "sink_logit": None},  # this call overrides the common logit
             ]
    assert_like_run_by_run(q, k, values, calls, causal=causal, ksink=0, sink_logit=sink, **EMU)


@pytest.mark.parametrize("nq, nk", [(200, 200), (120, 200), (200, 136)])
def test_calls_differing_in_causal_sm_scale_ksink(nq, nk):
    """Calls that differ in what step 1 depends on (causal flag, sm_scale, a power of two or not) or in
    the sink split of the diagnostics (ksink) in one list, with Nq != Nk too."""
    q, k, values = stack(seed=20)
    q = q[:, :, :nq].contiguous()
    k = k[:, :, :nk].contiguous()
    values = [v[:, :, :nk].contiguous() for v in values]
    calls = [{}, {"causal": True}, {"causal": True, "order": "reverse", "scale": 256.0},
             {"sm_scale": 0.25}, {"sm_scale": 0.1, "causal": True}, {"sm_scale": 0.1, "block_n": 32},
             {"ksink": 0}, {"ksink": 8, "scale": 448.0}, {"ksink": 0, "causal": True, "block_n": 128}]
    if nq <= nk:  # the bottom-right mask is a score group of its own
        calls.append({"causal": True, "causal_align": "bottom_right"})
    before = snapshot()
    assert_like_run_by_run(q, k, values, calls, ksink=4, causal_align="top_left", **EMU)
    assert grown(before)["sliced"] > 0


def test_sink_logit_per_call():
    """sink_logit given per call (different tensors in different calls) rather than in common."""
    q, k, values, sink = logit_stack(seed=6, deltas=[2.0, 10.0, 20.0])
    calls = [{"sink_logit": sink, "sink_mode": "final"}, {"sink_logit": sink + 3.0, "sink_mode": "final"},
             {"sink_logit": sink, "sink_mode": "init", "scale": 256.0}, {"sink_mode": "init"}]
    assert_like_run_by_run(q, k, values, calls, **EMU)


# --- identical calls get equal results, each with its own tensors -----------------------------------------

@pytest.mark.parametrize("twin", [
    {"order": "forward", "scale": 256.0},  # the same keywords twice
    {"order": "forward", "scale": 256.0, "block_m": 128},  # block_m does not reach the emulator
    {"policy": "forward-s256"},  # the same keywords through a policy
])
def test_identical_calls_do_not_share_tensors(twin):
    """Two calls that resolve to the same emulator keywords: equal results, but mutating one result's
    output or diagnostics must leave the other's as they were (and a third, different call too)."""
    q, k, values = stack(seed=7, deltas=[0.0, 8.0])
    calls = [{"order": "forward", "scale": 256.0}, twin, {"order": "forward", "scale": 1.0}]
    got = assert_like_run_by_run(q, k, values, calls, ksink=4, **EMU)
    a, b = got[0], got[1]
    for j in range(len(values)):
        assert_same_bits(a[j], b[j])
    keep = [[(r.out.clone(), {c: getattr(r, c).clone() for c in DIAGNOSTICS}) for r in res] for res in got]
    for r in a:
        r.out.add_(1.0)
        for c in DIAGNOSTICS:
            getattr(r, c).add_(1)
    for i in (1, 2):
        for j, r in enumerate(got[i]):
            out, diag = keep[i][j]
            same = torch.equal(r.out, out)
            assert same, f"mutating calls[0]'s result changed calls[{i}][{j}].out"
            for c in DIAGNOSTICS:
                same = torch.equal(getattr(r, c), diag[c])
                assert same, f"mutating calls[0]'s result changed calls[{i}][{j}].{c}"
    # no two results of the list hold the same storage
    ptrs = [t.data_ptr() for res in got for r in res for t in [r.out] + [getattr(r, c) for c in DIAGNOSTICS]]
    assert len(ptrs) == len(set(ptrs))


# --- sharing really happens, and only where the probe allows it --------------------------------------------

def test_sharing_counters_on_a_delta_stack(p_path):
    """No operand casts, one padded length: the twins' scores are sliced, and full matmuls are far
    fewer than items × chunks × calls (one chunk of rows per item here: N = 200 rows of 256 keys)."""
    q, k, values = stack(seed=8)
    calls = ORDER_SCALE + [{"order": "forward", "block_n": 128}, {"order": "reverse", "rescale_threshold": 8.0}]
    before = snapshot()
    assert_like_run_by_run(q, k, values, calls, ksink=4, block_n=64, **EMU)
    g = grown(before)
    items, chunks = len(DELTAS), 1
    assert g["sliced"] == items - 1  # every item but the anchor (Δ = 0) recomputes only its sink columns
    assert g["reverse"] == reverse_shared(p_path, items)  # the reverse scales' call, anchor included (not the τ = 8 one: a stale max)
    assert g["full"] == 1
    assert g["full"] < items * chunks * len(calls)
    assert g["reused"] > 0  # the other calls took the group's scores as they were


def test_identical_items_are_cloned():
    """Items equal bit for bit (Δ repeated, same values) repeat the anchor's steps 1-5: every call
    reuses the anchor's accumulators and row sums (no scores at all for those items)."""
    q, k, values = stack(seed=9, deltas=[8.0, 8.0, 0.0, 8.0])
    before = snapshot()
    assert_like_run_by_run(q, k, values, ORDER_SCALE[:3], ksink=4, **EMU)
    g = grown(before)
    assert g["copied"] == 0 and g["sliced"] == 1 and g["full"] == 1 and g["cloned"] >= 2


def test_identical_items_under_a_seeding_sink_are_copied():
    """With a sink logit that seeds the max (sink_mode="init"), an item's steps 2-5 depend on its own
    logit, so equal items take the anchor's scores as they are and run steps 2-6 themselves."""
    q, k, values = stack(seed=9, deltas=[8.0, 8.0, 0.0, 8.0])
    sink = torch.tensor([[3.0], [5.0], [3.0], [7.0]])
    calls = [dict(c, sink_mode="init") for c in ORDER_SCALE[:3]]
    before = snapshot()
    assert_like_run_by_run(q, k, values, calls, ksink=4, sink_logit=sink, **EMU)
    g = grown(before)
    assert g["copied"] == 2 and g["sliced"] == 1 and g["full"] == 1 and g["cloned"] == 0


def test_learned_sink_stack_is_cloned():
    """A stack of learned sink logits on one base (the policies experiment's logit kind: no sink key,
    every item the same q, k, v): with sink_mode="final" each item after the first reuses steps 1-5,
    bit-identical to run-by-run, and only the normalisation takes its own logit."""
    q, k, values = stack(seed=13, deltas=[0.0, 0.0, 0.0, 0.0], ksink=0)
    sink = torch.tensor([[0.0], [4.0], [8.0], [16.0]])
    calls = [dict(c, sink_mode="final") for c in ORDER_SCALE] + [{"policy": "fa3"}, {"policy": "vllm-unified-1c98a49"}]
    before = snapshot()
    assert_like_run_by_run(q, k, values, calls, ksink=0, sink_logit=sink, **EMU)
    g = grown(before)
    assert g["cloned"] > 0 and g["copied"] > 0  # vllm-unified seeds the max with the sink: copied, not cloned


def test_probe_says_no(monkeypatch):
    """With the probe refusing every slice, no item is sliced (each is a full matmul) and the results
    are still bit-identical."""
    monkeypatch.setattr(engine, "_PROBES", {})
    monkeypatch.setattr(engine, "_probe_slice", lambda *a, **kw: False)
    q, k, values = stack(seed=10)
    before = snapshot()
    assert_like_run_by_run(q, k, values, ORDER_SCALE, ksink=4, block_n=64, **EMU)
    g = grown(before)
    assert g["sliced"] == 0 and g["copied"] == 0
    assert g["full"] == len(DELTAS)  # each item once per chunk (one chunk, one score group)


def test_memory_bound_falls_back_to_full(monkeypatch):
    """Past the bound on kept scores (here: none may be kept), every item is a full matmul."""
    monkeypatch.setattr(engine, "_SHARED_BYTES", 1)
    q, k, values = stack(seed=11)
    before = snapshot()
    assert_like_run_by_run(q, k, values, ORDER_SCALE[::3], ksink=4, **EMU)
    g = grown(before)
    assert g["sliced"] == 0 and g["copied"] == 0 and g["full"] == len(DELTAS)


def test_unrelated_items_share_nothing():
    """A stack of items from different seeds: no twins, every item a full matmul, same bits."""
    parts = [stack(seed=s, deltas=[8.0], svs=(1.0,)) for s in (12, 13, 14)]
    q = torch.cat([p[0] for p in parts])
    k = torch.cat([p[1] for p in parts])
    values = [torch.cat([p[2][0] for p in parts])]
    before = snapshot()
    assert_like_run_by_run(q, k, values, ORDER_SCALE[:2], ksink=4, **EMU)
    g = grown(before)
    assert g["sliced"] == 0 and g["copied"] == 0 and g["full"] == 3


@pytest.mark.parametrize("deltas, sliced", [
    ([4.0, 5.0, 7.0], False),  # amax 32, 40, 56: another quantization grid, every key's bits differ
    ([4.0, 8.0, 16.0], True),  # amax 32, 64, 128: the grid only doubles, most keys keep their bits
])
def test_operand_cast_with_per_tensor_scale(deltas, sliced):
    """qk_fmt with a per-(batch, head) "tensor" scale: Δ sets each item's amax (the sink key's Δ·√d),
    so the cast of every key depends on Δ. Items are twins only where the cast keys' bits agree past
    the leading columns: with scales in ratios other than powers of two nothing is sliced; with
    power-of-two ratios e4m3fn's grid scales exactly and the twins are sliced. Same bits either way."""
    q, k, values = stack(seed=15, deltas=deltas)
    before = snapshot()
    assert_like_run_by_run(q, k, values, [{"qk_fmt": "e4m3fn"}, {"qk_fmt": "e4m3fn", "order": "reverse"}],
                           ksink=4, **EMU)
    g = grown(before)
    assert (g["sliced"] > 0) == sliced, g
    assert g["full"] == (1 if sliced else len(deltas))


# --- shapes: grouped-query attention, d = 80, batch and heads --------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_gqa(causal):
    """H = 4 query heads on H_kv = 2 key/value heads, batch 2 per Δ: bit-identical, and sliced."""
    q, k, values = stack(seed=16, heads=4, batch=2, n=136, d=32, deltas=[0.0, 8.0, 16.0])
    k = k[:, :2].contiguous()
    values = [v[:, :2].contiguous() for v in values]
    calls = ORDER_SCALE[::2] + [{"policy": "fa3"}, {"fmt": None, "block_n": 32}]
    before = snapshot()
    assert_like_run_by_run(q, k, values, calls, causal=causal, ksink=4, **EMU)
    assert grown(before)["sliced"] > 0


def test_head_dim_80():
    """d = 80: a multiple of 16, not a power of two (the synthetic generator does not make it; the
    stack is built by hand as apply_sink would)."""
    g = torch.Generator().manual_seed(17)
    n, d, ksink = 150, 80, 4
    q0, k0 = torch.randn(1, 2, n, d, generator=g), torch.randn(1, 2, n, d, generator=g)
    v0 = torch.randn(1, 2, n, d, generator=g)
    q0[..., 0] = 1.0
    ks, vs = [], []
    for delta in (0.0, 6.0, 12.0):
        kk = k0.clone()
        kk[:, :, :ksink, 0] = delta * math.sqrt(d)
        ks.append(kk)
        vs.append(v0.clone())
    q, k = torch.cat([q0] * 3), torch.cat(ks)
    v1 = torch.cat(vs)
    v0s = v1.clone()
    v0s[:, :, :ksink] = 0.0
    calls = ORDER_SCALE[::2] + [{"qk_fmt": "e4m3fn", "v_fmt": "e4m3fn"}, {"policy": "fa4"}]
    before = snapshot()
    assert_like_run_by_run(q, k, [v1, v0s], calls, ksink=ksink, **EMU)
    assert grown(before)["sliced"] > 0


# --- bad input: named, before any work -----------------------------------------------------------------

@pytest.mark.parametrize("calls, named", [
    ([], "calls"),
    ((), "calls"),
    ({"order": "forward"}, "calls"),
    ("forward", "calls"),
    (None, "calls"),
    ([{}, "forward"], "calls[1]"),
    ([{}, None], "calls[1]"),
    ([{}, {"order": "sideways"}], "calls[1]"),
    ([{}, {"bogus": 1}], "calls[1]"),
    ([{}, {"block_n": 40}], "calls[1]"),
    ([{}, {"scale": -1.0}], "calls[1]"),
    ([{}, {"policy": "no-such-policy"}], "calls[1]"),
    ([{}, {}, {"fmt": "e9m9"}], "calls[2]"),
    ([{"sink_logit": torch.zeros(7)}, {}], "calls[0]"),
])
def test_bad_calls_named_before_any_work(calls, named):
    q, k, values = stack(seed=18, deltas=[0.0, 8.0], n=64, d=16)
    before = snapshot()
    with pytest.raises(ValueError) as e:
        pcast.attention_calls(q, k, values, calls, ksink=4, **EMU)
    msg = str(e.value)
    assert named in msg, msg
    if named == "calls":
        assert "calls[" not in msg, msg
    assert grown(before) == {n: 0 for n in before}, "work was done before the bad call was found"


def test_bad_common_keyword_named():
    q, k, values = stack(seed=18, deltas=[0.0, 8.0], n=64, d=16)
    before = snapshot()
    with pytest.raises(ValueError, match=r"calls\[0\]"):
        pcast.attention_calls(q, k, values, [{}, {"order": "reverse"}], order="sideways", **EMU)
    with pytest.raises(ValueError, match="values"):
        pcast.attention_calls(q, k, [], [{}], **EMU)
    assert grown(before) == {n: 0 for n in before}


# --- other backends run call by call -------------------------------------------------------------------------

def test_reference_backend():
    """backend="reference" calls give what attention_values with backend="reference" gives, also
    mixed with emulator calls in one list."""
    q, k, values, sink = logit_stack(seed=19, n=96, d=16, deltas=[0.0, 8.0])
    kq, kk, kvalues = stack(seed=19, n=96, d=16, deltas=[0.0, 8.0])
    ref = {"backend": "reference"}
    assert_like_run_by_run(kq, kk, kvalues, [ref, {**ref, "causal": True}, {**ref, "order": "reverse", "scale": 256.0},
                                             {"backend": "emulator"}, {**ref, "sm_scale": 0.5}], ksink=4)
    got = assert_like_run_by_run(q, k, values, [ref, {**ref, "causal": True}, {"backend": "emulator"}],
                                 sink_logit=sink)
    assert got[0][0].backend == "reference" and got[0][0].out.dtype == torch.float64
    assert got[2][0].backend == "emulator"
