"""Three implementations of the contract agree: the Triton kernel (interpreted on CPU),
the emulator, and the slow loop in tests/support/loop_contract.py. Plus physics that can fail,
and argument checking.

Differences are accepted only where :func:`pcast.conformance.explain` shows that a
p·S value lies within the fp32 score error of an FP8 rounding boundary.
"""

import math

import pytest
import torch

import pcast
from pcast.conformance import explain
from pcast.contract import COMBOS, DIAGNOSTICS, ORDERS, PAPER_SCALES

from three_way import check_three, covering, sink_inputs

# The paper's four combinations in E4M3FN, then saturation (S = 448) and no rounding.
PAPER_CASES = [(order, scale, "e4m3fn") for order, scale in COMBOS]
CASES = PAPER_CASES + [("forward", 448.0, "e4m3fn"), ("reverse", 448.0, "e4m3fn"), ("forward", 1.0, None),
                       ("reverse", 256.0, None)]


SMALL = [(1, 1), (63, 63), (64, 64), (200, 200), (100, 200), (200, 63)]
OTHER_D_SHAPES = [(1, 1), (63, 63), (200, 200)]


@pytest.mark.parametrize("order,scale,fmt", CASES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("nq,nk", SMALL)
def test_three_implementations_agree_small(order, scale, fmt, causal, nq, nk):
    """The emulator against the loop on the whole grid; the interpreted kernel too on a covering
    subset (each case x causal once, each shape 2-3 times)."""
    q, k, v = sink_inputs(nq * 1000 + nk, nq, nk, 64, ksink=min(4, nk))
    align = {"causal_align": "top_left"} if causal and nq < nk else {}  # Nq < Nk: the alignment must be named
    where = (CASES.index((order, scale, fmt)), int(causal), SMALL.index((nq, nk)))
    check_three(q, k, v, order=order, scale=scale, fmt=fmt, causal=causal, ksink=min(4, nk),
                triton=covering(where, (len(CASES), 2, len(SMALL))), **align)


@pytest.mark.parametrize("order,scale,fmt", PAPER_CASES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("nq,nk", OTHER_D_SHAPES)
@pytest.mark.parametrize("d", [16, 128])
def test_three_implementations_agree_small_other_d(order, scale, fmt, causal, nq, nk, d):
    """As above for d = 16 and 128: the kernel on each case x causal x d once."""
    q, k, v = sink_inputs(nq * 1000 + nk + d, nq, nk, d, ksink=min(4, nk))
    where = (PAPER_CASES.index((order, scale, fmt)), int(causal), (16, 128).index(d), OTHER_D_SHAPES.index((nq, nk)))
    check_three(q, k, v, order=order, scale=scale, fmt=fmt, causal=causal, ksink=min(4, nk),
                triton=covering(where, (len(PAPER_CASES), 2, 2, len(OTHER_D_SHAPES))))


@pytest.mark.parametrize("order,scale,fmt,causal", [c + (False,) for c in PAPER_CASES] + [
    ("forward", 1.0, "e4m3fn", True), ("reverse", 256.0, "e4m3fn", True), ("forward", 448.0, "e4m3fn", False),
    ("reverse", 1.0, None, True)])
def test_emulator_and_loop_agree_n1024(order, scale, fmt, causal):
    """Sixteen KV blocks, the sink in the first: the emulator against the loop on every case."""
    q, k, v = sink_inputs(7, 1024, 1024, 64, h=1)
    _, emu, _, _ = check_three(q, k, v, order=order, scale=scale, fmt=fmt, causal=causal, ksink=4, triton=False)
    if order == "forward" and scale == 1.0 and fmt and not causal:
        assert int(emu.underflow.sum()) > 0  # the comparison covered real underflow


N1024_CASES = [c + (False,) for c in PAPER_CASES] + [
    ("forward", 1.0, "e4m3fn", True), ("reverse", 256.0, "e4m3fn", True), ("forward", 448.0, "e4m3fn", False),
    ("reverse", 1.0, None, True)]


@pytest.mark.heavy  # the interpreted kernel at N = 1024 (about 10 s a case); the small grid above covers it fast
@pytest.mark.parametrize("order,scale,fmt,causal", N1024_CASES)
def test_three_implementations_agree_n1024(order, scale, fmt, causal):
    q, k, v = sink_inputs(7, 1024, 1024, 64, h=1)
    tri, _, _, _ = check_three(q, k, v, order=order, scale=scale, fmt=fmt, causal=causal, ksink=4)
    if order == "forward" and scale == 1.0 and fmt and not causal:
        assert int(tri.underflow.sum()) > 0  # the comparison covered real underflow


@pytest.mark.parametrize("d", [16, 128])
def test_emulator_and_loop_agree_n1024_other_d(d):
    q, k, v = sink_inputs(8, 1024, 1024, d, h=1)
    check_three(q, k, v, order="reverse", scale=1.0, fmt="e4m3fn", causal=False, ksink=4, triton=False)


@pytest.mark.heavy
@pytest.mark.parametrize("d", [16, 128])
def test_three_implementations_agree_n1024_other_d(d):
    q, k, v = sink_inputs(8, 1024, 1024, d, h=1)
    check_three(q, k, v, order="reverse", scale=1.0, fmt="e4m3fn", causal=False, ksink=4)


@pytest.mark.parametrize("block_m,block_n", [(16, 32), pytest.param(32, 128, marks=pytest.mark.heavy)])
@pytest.mark.parametrize("rowsum", ["unrounded", "rounded"])
def test_block_sizes_and_rowsum(block_m, block_n, rowsum):
    q, k, v = sink_inputs(9, 75, 150, 32)  # neither length a multiple of either block: ragged last tiles
    check_three(q, k, v, order="reverse", scale=1.0, fmt="e4m3fn", causal=True, ksink=4, block_m=block_m,
                block_n=block_n, rowsum=rowsum)


def test_saturation_is_counted_beyond_max():
    q, k, v = sink_inputs(10, 64, 128, 16)
    tri, emu, _, _ = check_three(q, k, v, order="forward", scale=1024.0, fmt="e4m3fn", causal=False, ksink=4)
    assert int(emu.saturated.sum()) > 0  # p = 1 at every row's max, and 1024 > 448
    assert torch.equal(tri.saturated, emu.saturated)


def test_explain_rejects_a_real_difference():
    """The conformance check can fail: a one-step change on a non-boundary element is caught."""
    q, k, v = sink_inputs(11, 64, 64, 16)
    a = pcast.attention(q, k, v, order="forward", scale=1.0, ksink=4, backend="emulator")
    b = pcast.attention(q, k, v, order="forward", scale=1.0, ksink=4, backend="emulator")
    b.out = b.out.clone()
    b.out[0, 0, 3, 0] += 1e-3
    rep = explain(a, b, q, k, v, order="forward", scale=1.0, ksink=4)
    assert not rep["explained"]
    b2 = pcast.attention(q, k, v, order="forward", scale=1.0, ksink=4, backend="emulator")
    b2.terms = b2.terms.clone()
    b2.terms[0, 0, 0] += 1
    assert not explain(a, b2, q, k, v, order="forward", scale=1.0, ksink=4)["explained"]


# ------------------------------------------------------------------------- physics
# At N = 1024 the interpreted kernel takes seconds per call: its physics runs are heavy, and the inner loop keeps
# the emulator's (the kernel equals the emulator bit for bit in the three-implementation tests above).
PHYSICS_BACKENDS = ["emulator", pytest.param("triton", marks=pytest.mark.heavy)]

def physics_inputs(delta, n=1024, d=64, seed=0):
    """One sink at key 0 scoring exactly delta; every other score ~ N(0, 1) for every query."""
    g = torch.Generator().manual_seed(seed)
    gq = torch.randn(1, 1, n, d - 1, generator=g)
    gq = gq / gq.norm(dim=-1, keepdim=True) * math.sqrt(d - 1)
    q = torch.cat([torch.ones(1, 1, n, 1), gq], -1)
    k = torch.cat([torch.zeros(1, 1, n, 1), torch.randn(1, 1, n, d - 1, generator=g) * math.sqrt(d / (d - 1))], -1)
    k[:, :, 0] = 0.0
    k[:, :, 0, 0] = delta * math.sqrt(d)
    v = torch.randn(1, 1, n, d, generator=g)
    return q, k, v


@pytest.mark.parametrize("backend", PHYSICS_BACKENDS)
def test_forward_s1_collapses(backend):
    q, k, v = physics_inputs(10.0)
    r = pcast.attention(q, k, v, order="forward", scale=1.0, ksink=1, backend=backend)
    frac = r.underflow.sum().item() / r.terms.sum().item()
    # Phi(10 - 6.93) ~ 0.999: nearly every non-sink P rounds to zero.
    assert frac > 0.5


@pytest.mark.parametrize("backend", PHYSICS_BACKENDS)
def test_reverse_s256_has_no_underflow_outside_the_sink_block(backend):
    """Reverse + S=256: zero underflow among keys the sink's jump never reaches.

    Reverse order visits the sink's block last. Keys in the other blocks see only the
    running max of N(0,1) scores (about 3.2), and need s < 3.2 - 6.93 - ln 256 = -9.3 to
    underflow: probability ~1e-20. The 63 other keys of the sink's own block do see the
    jump to Δ = 10 and underflow below s < 10 - 12.48 (Φ(-2.48) ~ 0.7%): the residual the
    paper's guarantee excludes. ksink=block_n books that whole block under the "sink" counts.
    """
    q, k, v = physics_inputs(10.0)
    r = pcast.attention(q, k, v, order="reverse", scale=256.0, ksink=64, block_n=64, backend=backend)
    assert int(r.underflow.sum()) == 0
    assert int(r.terms.sum()) == 1024 * (1024 - 64)
    resid = r.underflow_sink.sum().item() / (1024 * 63)
    assert 0.0 < resid < 0.03  # the residual exists, and is small


@pytest.fixture(scope="module")
def physics_reference():
    q, k, v = physics_inputs(10.0)
    return q, k, v, pcast.attention(q, k, v, backend="reference").out


@pytest.mark.parametrize("backend", PHYSICS_BACKENDS)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("scale", PAPER_SCALES)
def test_unrounded_matches_reference(order, scale, backend, physics_reference):
    q, k, v, ref = physics_reference
    out = pcast.attention(q, k, v, order=order, scale=scale, fmt=None, ksink=1, backend=backend).out
    assert float((out.double() - ref).abs().max()) <= 1e-5 * float(ref.abs().max())


def test_rounding_costs_precision_that_reverse_s256_recovers():
    q, k, v = physics_inputs(8.0)
    ref = pcast.attention(q, k, v, backend="reference").out

    def mse(order, scale):
        o = pcast.attention(q, k, v, order=order, scale=scale, ksink=1, backend="emulator").out
        return float(((o.double() - ref) ** 2).mean())

    assert mse("forward", 1.0) > 3 * mse("reverse", 256.0)


# ------------------------------------------------------------------------- arguments

def _qkv(n=8, d=16):
    return torch.randn(1, 1, n, d), torch.randn(1, 1, n, d), torch.randn(1, 1, n, d)


@pytest.mark.parametrize("kwargs,match", [
    (dict(order="sideways"), "order='sideways'.*forward, reverse"),
    (dict(fmt="e4m3"), "fmt='e4m3'.*allowed: None, e4m3fn"),
    (dict(backend="gpu"), "backend='gpu'.*auto, triton, emulator, reference"),
    (dict(rowsum="exact"), "rowsum='exact'.*unrounded, rounded"),
    (dict(scale=0.0), "scale=0.0.*finite number > 0"),
    (dict(scale=-2.0), "scale=-2.0"),
    (dict(scale=float("inf")), "scale=inf"),
    (dict(scale=float("nan")), "scale=nan"),
    (dict(block_n=40), "block_n=40.*multiple of 16"),
    (dict(block_m=8), "block_m=8"),
    (dict(ksink=-1), "ksink=-1"),
    (dict(sm_scale=0.0), "sm_scale=0.0"),
    (dict(causal="yes"), "causal='yes'"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pcast.attention(*_qkv(), **kwargs)


def test_bad_tensors():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="head dimension d=24"):
        pcast.attention(*_qkv(d=24))
    with pytest.raises(ValueError, match="head dimension d=8"):
        pcast.attention(*_qkv(d=8))
    with pytest.raises(ValueError, match="q must be float32"):
        pcast.attention(q.double(), k, v)
    with pytest.raises(ValueError, match="k shape"):
        pcast.attention(q, k[..., :8], v)
    with pytest.raises(ValueError, match="v shape"):
        pcast.attention(q, k, v[:, :, :4])
    with pytest.raises(ValueError, match=r"q must have shape \[B, H, N, d\]"):
        pcast.attention(q[0], k, v)
    with pytest.raises(ValueError, match="k contains NaN or inf"):
        pcast.attention(q, k.clone().fill_(float("nan")), v)
    with pytest.raises(ValueError, match="v contains NaN or inf"):
        pcast.attention(q, k, v.clone().fill_(float("inf")))
    with pytest.raises(ValueError, match="torch.Tensor"):
        pcast.attention(q.numpy(), k, v)


def test_auto_backend_without_gpu_is_the_emulator():
    if pcast.api.fp8_gpu_available():
        pytest.skip("a CUDA GPU with FP8 support is present")
    assert pcast.attention(*_qkv(), backend="auto").backend == "emulator"


def test_query_and_key_lengths_may_differ_and_outputs_have_the_documented_shapes():
    q = torch.randn(2, 3, 5, 32)
    k = torch.randn(2, 3, 70, 32)
    r = pcast.attention(q, k, torch.randn(2, 3, 70, 32), ksink=2, backend="emulator")
    assert r.out.shape == (2, 3, 5, 32) and r.out.dtype == torch.float32
    for n in DIAGNOSTICS:
        t = getattr(r, n)
        assert t.shape == (2, 3, 5) and t.dtype == torch.int64
    assert int(r.terms_sink.min()) == 2 and int(r.terms.max()) == 68
