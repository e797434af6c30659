"""The P-policy options of pcast.attention (docs/interfaces.md, "P policies of deployed kernels").

* The emulator against the plain loop oracle (tests/support/loop_contract.py) on every option and on
  combinations, with odd shapes: diagnostics identical and outputs within 1e-5 of max|out|, or
  every difference explained by :func:`pcast.conformance.explain`.
* Every option at its default is today's contract, bit for bit; a policy's fields and explicit
  keywords combine as documented.
* Semantics that can fail: lazy rescaling lets x pass S and saturate; a sink logit that seeds the
  max collapses both orders; the reference's sink; exp2_offset against multiply.
* Bad input: a ValueError naming the keyword.
"""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import pcast
from pcast.contract import DIAGNOSTICS, LOG2E, log2_scale
from pcast.emulator.core import max_in_force, running_max
from pcast.formats import get_format

from loop_contract import cast_operand, loop_attention

OPTION_DEFAULTS = dict(scale_mode="multiply", rescale_threshold=0.0, sink_logit=None, sink_mode="final", qk_fmt=None,
                       qk_scale="tensor", v_fmt=None, v_scale="tensor")


def sink_inputs(seed, nq, nk, d=32, *, b=2, h=2, delta=6.0):
    """Random q, k, v [b, h, n, d]; key 0 scores about delta above the rest (a sink key)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, nq, d, generator=g)
    k = torch.randn(b, h, nk, d, generator=g)
    v = torch.randn(b, h, nk, d, generator=g)
    qm = q.mean(2)
    k[:, :, 0] += qm * (delta * math.sqrt(d) / qm.pow(2).sum(-1, keepdim=True))
    return q, k, v


def agree(q, k, v, **kw):
    """Emulator and loop oracle on one call: diagnostics identical and outputs within 1e-5 of max|out|,
    or (where a diagnostic differs) every difference explained by pcast.conformance.explain."""
    if kw.get("causal") and q.shape[2] < k.shape[2]:  # Nq < Nk: the top-left mask these tests check, named
        kw = {**kw, "causal_align": "top_left"}
    emu = pcast.attention(q, k, v, backend="emulator", **kw)
    out, diag = loop_attention(q, k, v, **{n: x for n, x in kw.items() if n != "block_m"})
    loop = SimpleNamespace(out=out, **diag)
    if all(torch.equal(getattr(emu, n), diag[n]) for n in DIAGNOSTICS):
        # Both are exact torch fp32 ops; only the accumulation order (block weights against
        # per-block alphas) and the score matmul's shape differ: a few fp32 ulps.
        rel = float((emu.out - out).abs().max()) / max(float(out.abs().max()), 1e-30)
        assert rel <= 1e-5, f"outputs differ by {rel:.3g} of max|out| with equal diagnostics"
    else:
        from pcast.conformance import explain

        rep = explain(emu, loop, q, k, v, **{n: x for n, x in kw.items() if n not in ("block_m", "rowsum")})
        assert rep["explained"], rep["why"]
    return emu


# ------------------------------------------------------------------------- emulator against the loop oracle

SHAPES = [(37, 100, 16, True), (64, 130, 128, False), (5, 200, 64, True), (50, 33, 16, False)]


@pytest.mark.parametrize("scale", [1.0, 256.0, 448.0])
@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_exp2_offset_matches_the_loop(scale, order):
    for i, (nq, nk, bn, causal) in enumerate(SHAPES[1:]):
        q, k, v = sink_inputs(10 + i, nq, nk)
        agree(q, k, v, order=order, scale=scale, causal=causal, ksink=1, block_n=bn, scale_mode="exp2_offset")


@pytest.mark.parametrize("tau", [0.0, 2.0, 8.0])
@pytest.mark.parametrize("scale", [1.0, 256.0])
@pytest.mark.parametrize("scale_mode", ["multiply", "exp2_offset"])
def test_lazy_rescaling_matches_the_loop(tau, scale, scale_mode):
    for i, (nq, nk, bn, causal) in enumerate(SHAPES[:2]):
        # scores spread wide (x3) so the max keeps growing from block to block
        q, k, v = sink_inputs(20 + i, nq, nk)
        emu = agree(3 * q, k, v, order="forward" if i % 2 else "reverse", scale=scale, causal=causal, ksink=1,
                    block_n=bn, rescale_threshold=tau, scale_mode=scale_mode)
        if tau == 8.0 and scale == 256.0 and i == 0:
            assert int(emu.saturated.sum()) > 0  # the comparison covered saturation above S


@pytest.mark.parametrize("sink_mode", ["init", "final"])
@pytest.mark.parametrize("shape", ["H", "BH"])
@pytest.mark.parametrize("scale_mode,scale,tau", [("multiply", 1.0, 0.0), ("exp2_offset", 256.0, 0.0),
                                                  ("exp2_offset", 1.0, 8.0), ("multiply", 256.0, 2.0)])
def test_sink_logit_matches_the_loop(sink_mode, shape, scale_mode, scale, tau):
    for i, (nq, nk, bn, causal) in enumerate(SHAPES[1:3]):
        q, k, v = sink_inputs(30 + i, nq, nk)
        g = torch.Generator().manual_seed(40 + i)
        sink = torch.randn(2, generator=g) * 3 + 3 if shape == "H" else torch.randn(2, 2, generator=g) * 3 + 3
        agree(q, k, v, order="forward" if i % 2 else "reverse", scale=scale, causal=causal, ksink=1, block_n=bn,
              sink_logit=sink, sink_mode=sink_mode, scale_mode=scale_mode, rescale_threshold=tau)


@pytest.mark.parametrize("qk_fmt,v_fmt", [("e4m3fn", "e5m2"), ("e5m2", None), (None, "e4m3fn")])
@pytest.mark.parametrize("operand_scale", ["tensor", 0.01, 0.5])
def test_operand_casts_match_the_loop(qk_fmt, v_fmt, operand_scale):
    for i, (nq, nk, bn, causal) in enumerate(SHAPES[:2]):
        q, k, v = sink_inputs(50 + i, nq, nk)
        v[0, 1] = 0.0  # a head whose amax is 0: s_t = 1
        agree(q, k, v, order="reverse", scale=256.0, causal=causal, ksink=1, block_n=bn, qk_fmt=qk_fmt,
              qk_scale=operand_scale, v_fmt=v_fmt, v_scale=operand_scale)


@pytest.mark.parametrize("fmt", [None, "e5m2"])
@pytest.mark.parametrize("rowsum", ["unrounded", "rounded"])
def test_combinations_match_the_loop(fmt, rowsum):
    """Every option at once (FA4-like exp2 + lazy, a vLLM-like seeded sink, FP8 operands)."""
    for i, (nq, nk, bn, causal) in enumerate(SHAPES):
        q, k, v = sink_inputs(60 + i, nq, nk)
        sink = torch.tensor([[4.0, -1.0], [9.0, 2.5]])
        for sink_mode, scale_mode in (("init", "exp2_offset"), ("final", "multiply"))[i % 2:i % 2 + 1 + i // 3]:
            agree(2 * q, k, v, order="reverse", scale=256.0, fmt=fmt, rowsum=rowsum, causal=causal, ksink=2,
                  block_n=bn, scale_mode=scale_mode, rescale_threshold=8.0, sink_logit=sink, sink_mode=sink_mode,
                  qk_fmt="e4m3fn", v_fmt="e4m3fn", v_scale=0.25)


def test_max_in_force_is_the_running_max_at_tau_zero_and_goes_stale_above():
    g = torch.Generator().manual_seed(1)
    bm = torch.randn(50, 9, generator=g) * 4
    bm[:5, :3] = float("-inf")  # rows whose first blocks hold no visible key
    for reverse in (False, True):
        assert torch.equal(max_in_force(bm, reverse), running_max(bm, reverse))
    # one row: the max moves only when a block's max grows by more than tau / log2(e)
    # (5.5 - 0)·log2 e = 7.93 <= 8 stays; (5.5625 - 0)·log2 e = 8.02 > 8 moves; (9 - 5.5625)·log2 e = 4.96 stays
    row = torch.tensor([[0.0, 5.5, 5.5625, 9.0, 7.0]])
    assert max_in_force(row, False, tau=8.0).tolist() == [[0.0, 0.0, 5.5625, 5.5625, 5.5625]]
    assert max_in_force(row, False, tau=8.0, m0=torch.tensor([10.0])).tolist() == [[10.0] * 5]


# ------------------------------------------------------------------------- defaults and policies

@pytest.mark.parametrize("backend", ["emulator", "triton"])
def test_every_option_at_its_default_is_todays_contract(backend):
    q, k, v = sink_inputs(70, 40, 70, d=16, b=1)
    for kw in (dict(order="forward", scale=1.0), dict(order="reverse", scale=256.0, causal=True, causal_align="top_left",
                                                         block_n=16)):
        base = pcast.attention(q, k, v, ksink=1, backend=backend, **kw)
        same = [pcast.attention(q, k, v, ksink=1, backend=backend, policy=None, **OPTION_DEFAULTS, **kw)]
        same += [pcast.attention(q, k, v, ksink=1, backend=backend, **{n: x}, **kw)
                 for n, x in OPTION_DEFAULTS.items()]
        # options that cannot act: a scale without its format, a "final" sink of weight exp(-1e30 - m) = 0
        same.append(pcast.attention(q, k, v, ksink=1, backend=backend, qk_scale=0.5, v_scale=3.0, **kw))
        same.append(pcast.attention(q, k, v, ksink=1, backend=backend, sink_logit=torch.full((2,), -1e30), **kw))
        for r in same:
            assert torch.equal(r.out, base.out)
            assert all(torch.equal(getattr(r, n), getattr(base, n)) for n in DIAGNOSTICS)


def _equal(a, b):
    return torch.equal(a.out, b.out) and all(torch.equal(getattr(a, n), getattr(b, n)) for n in DIAGNOSTICS)


def test_policy_fields_and_explicit_keywords():
    from pcast.policies import POLICIES

    q, k, v = sink_inputs(71, 48, 300, b=1)
    run = dict(ksink=1, backend="emulator")
    assert _equal(pcast.attention(q, k, v, policy="reverse-s256", **run),
                  pcast.attention(q, k, v, order="reverse", scale=256.0, **run))
    fa3 = POLICIES["fa3"].attention_kwargs()
    assert fa3["order"] == "reverse"
    as_policy = pcast.attention(q, k, v, policy="fa3", **run)
    assert _equal(as_policy, pcast.attention(q, k, v, **fa3, **run))
    overridden = pcast.attention(q, k, v, policy=POLICIES["fa3"], order="forward", **run)
    assert _equal(overridden, pcast.attention(q, k, v, **{**fa3, "order": "forward"}, **run))
    assert not torch.equal(overridden.out, as_policy.out)  # the override took effect


def test_a_policy_like_object_and_a_bad_field():
    q, k, v = sink_inputs(72, 20, 90, b=1)
    fields = dict(order="reverse", scale=256.0, scale_mode="exp2_offset", rescale_threshold=8.0, sink_mode="init",
                  fmt="e4m3fn", rowsum="unrounded", qk_fmt=None, qk_scale="tensor", v_fmt=None, v_scale="tensor",
                  block_m=16, block_n=32)
    sink = torch.tensor([5.0, 1.0])
    pol = SimpleNamespace(attention_kwargs=lambda: dict(fields))
    a = pcast.attention(q, k, v, policy=pol, sink_logit=sink, scale=1.0, backend="emulator")
    assert _equal(a, pcast.attention(q, k, v, sink_logit=sink, backend="emulator", **{**fields, "scale": 1.0}))
    bad = SimpleNamespace(attention_kwargs=lambda: {**fields, "scale_mode": "exp"})
    with pytest.raises(ValueError, match="scale_mode='exp'"):
        pcast.attention(q, k, v, policy=bad)


# ------------------------------------------------------------------------- semantics

def exact_scores(scores):
    """q, k, v whose fp32 scores are exactly ``scores`` [H, Nk] (one query row per head, sm_scale=1):
    q = e_0, k[:, :, j] = scores_j e_0 + noise in the other coordinates; v ~ N(0, 1)."""
    H, nk = scores.shape
    g = torch.Generator().manual_seed(nk)
    q = torch.zeros(1, H, 1, 16)
    q[..., 0] = 1.0
    k = torch.randn(1, H, nk, 16, generator=g)
    k[..., 0] = scores.float()
    return q, k, torch.randn(1, H, nk, 16, generator=g)


def lazy_scores(n_heads=32, seed=2):
    """Four blocks of 16 keys: block 0 has max 0; block 1 grows by up to 5 (< 8 / log2 e = 5.545: stale
    at tau = 8); block 2 has max 6 (moves the max); block 3 stays below 5. Scores away from ln(448/256)."""
    g = torch.Generator().manual_seed(seed)
    s = torch.rand(n_heads, 64, generator=g, dtype=torch.float64)
    s[:, :16] = -2 * s[:, :16]
    s[:, 0] = 0.0
    s[:, 16:32] = -2 + 7 * s[:, 16:32]
    s[:, 32:48] = -2 + 7 * s[:, 32:48]
    s[:, 32] = 6.0
    s[:, 48:] = -2 + 7 * s[:, 48:]
    near = (s - math.log(448 / 256)).abs() < 1e-4
    s[near] -= 1e-3
    return s.float().double()


@pytest.mark.parametrize("scale_mode", ["multiply", "exp2_offset"])
def test_lazy_rescaling_lets_x_pass_s_and_saturate(scale_mode):
    """tau = 8: block 1 sees the stale max 0, so x = 256·e^s reaches 256·e^5 > 448 and saturates (counted);
    block 2 moves the max to 6, so block 3 (< 5) stays below S. Eager (tau = 0) never passes S = 256."""
    s = lazy_scores()
    q, k, v = exact_scores(s)
    kw = dict(order="forward", scale=256.0, block_n=16, sm_scale=1.0, scale_mode=scale_mode, backend="emulator")
    lazy = pcast.attention(q, k, v, rescale_threshold=8.0, **kw)
    expected = (s[:, 16:32] > math.log(448 / 256)).sum(-1)  # x = 256·exp(s - 0) > 448, block 1 only
    assert int(expected.sum()) > 0
    assert torch.equal(lazy.saturated.view(-1), expected)
    assert int(pcast.attention(q, k, v, rescale_threshold=0.0, **kw).saturated.sum()) == 0
    # Reverse: block 3's max m3 (> 0.46 on every head, so block 2's 6 grows it by < 8 / log2 e) stays in
    # force for blocks 2, 1, 0: every key there with s - m3 > ln(448/256) saturates.
    m3 = s[:, 48:].amax(-1, keepdim=True)
    assert bool(((6.0 - m3) * math.log2(math.e) < 8.0).all())
    rev = pcast.attention(q, k, v, rescale_threshold=8.0, **{**kw, "order": "reverse"})
    assert torch.equal(rev.saturated.view(-1), (s[:, :48] - m3 > math.log(448 / 256)).sum(-1))


@pytest.mark.parametrize("scale_mode", ["multiply", "exp2_offset"])
@pytest.mark.parametrize("sink_mode", ["init", "final"])
def test_unrounded_options_match_the_reference(scale_mode, sink_mode):
    """Without the P cast (fmt=None), a stale max and a sink logit are exact rewritings of softmax:
    the output is the float64 reference's (with the sink in the denominator) up to fp32 rounding."""
    q, k, v = sink_inputs(73, 40, 150, b=2)
    sink = torch.tensor([[3.0, -2.0], [8.0, 0.5]])
    ref = pcast.attention(q, k, v, sink_logit=sink, causal=True, causal_align="top_left", backend="reference").out
    for tau in (0.0, 8.0):
        out = pcast.attention(q, k, v, fmt=None, causal=True, causal_align="top_left", scale=256.0, block_n=16,
                                sink_logit=sink,
                                sink_mode=sink_mode, scale_mode=scale_mode, rescale_threshold=tau,
                                backend="emulator").out
        assert float((out.double() - ref).abs().max()) <= 1e-5 * float(ref.abs().max())


def physics_inputs(nq=32, n=1024, d=64, seed=0):
    """Scores ~ N(0, 1) for every query and key (no sink keys)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 1, nq, d, generator=g)
    q = q / q.norm(dim=-1, keepdim=True) * math.sqrt(d)
    return q, torch.randn(1, 1, n, d, generator=g), torch.randn(1, 1, n, d, generator=g)


def test_a_seeded_sink_collapses_both_orders_and_a_final_sink_does_not():
    """sink_logit = 10, S = 1, E4M3FN. "init": every key meets a max of at least 10 and underflows where
    s - 10 < ln(2^-10) = -6.93, i.e. s < 3.07: Phi(3.07) = 0.9989 of N(0,1) scores, in either order.
    Over 32 x 1024 keys the binomial standard error is 1.8e-4, so 0.99 is > 40 SE below. "final": the
    max comes from the keys (about 2.5-4), so only s < -3.9 or so underflows: well under 1%."""
    q, k, v = physics_inputs()
    sink = torch.tensor([10.0])
    ref = pcast.attention(q, k, v, sink_logit=sink, backend="reference").out
    for order in ("forward", "reverse"):
        for mode, lo, hi in (("init", 0.99, 1.0), ("final", 0.0, 0.01)):
            r = pcast.attention(q, k, v, order=order, scale=1.0, sink_logit=sink, sink_mode=mode, backend="emulator")
            frac = r.underflow.sum().item() / r.terms.sum().item()
            assert lo <= frac <= hi, (order, mode, frac)
            rel_mse = float(((r.out.double() - ref) ** 2).mean() / (ref ** 2).mean())
            # collapse loses nearly all the non-sink mass; the final sink keeps the paper's small error
            assert (rel_mse > 0.5) if mode == "init" else (rel_mse < 0.01), (order, mode, rel_mse)


def test_reference_with_a_sink_logit_is_the_explicit_float64_softmax():
    q, k, v = sink_inputs(74, 9, 23, d=16)
    for sink in (torch.tensor([2.0, -30.0]), torch.tensor([[1.5, 40.0], [0.0, -3.0]])):
        got = pcast.attention(q, k, v, sink_logit=sink, causal=True, causal_align="top_left", sm_scale=0.3,
                                backend="reference").out
        s = np.einsum("bhid,bhjd->bhij", q.double().numpy(), k.double().numpy()) * 0.3
        s[..., np.triu(np.ones((9, 23), dtype=bool), 1)] = -np.inf
        sig = np.broadcast_to(sink.double().numpy(), (2, 2))[..., None, None]
        mx = np.maximum(s.max(-1, keepdims=True), sig)
        e = np.exp(s - mx)
        want = np.einsum("bhij,bhjd->bhid", e, v.double().numpy()) / (e.sum(-1, keepdims=True) + np.exp(sig - mx))
        assert got.dtype == torch.float64
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-14)


def test_operand_casts_are_the_documented_per_head_rounding():
    """qk_fmt / v_fmt give the same bits as the paper's contract on q', k', v' cast in the test with the
    integer quantizer: t' = quantize(t / s_t)·s_t, s_t = amax per (batch, head) / max_finite or the float."""
    q, k, v = sink_inputs(75, 30, 80)
    for fmt, how in (("e4m3fn", "tensor"), ("e5m2", 0.5)):
        f = get_format(fmt)
        amax = lambda t: t.abs().amax(dim=(-2, -1), keepdim=True)  # noqa: E731
        st = {n: amax(t) / f.max_finite if how == "tensor" else torch.full_like(amax(t), how)
              for n, t in (("q", q), ("k", k), ("v", v))}
        cast = {n: pcast.quantize(t / st[n], f) * st[n] for n, t in (("q", q), ("k", k), ("v", v))}
        assert torch.equal(cast["q"], cast_operand(q, fmt, how))  # the loop oracle's cast, head by head
        a = pcast.attention(q, k, v, qk_fmt=fmt, qk_scale=how, v_fmt=fmt, v_scale=how, backend="emulator")
        b = pcast.attention(cast["q"], cast["k"], cast["v"], backend="emulator")
        assert _equal(a, b) and not torch.equal(cast["v"], v)


def _offset_x_max(m, scale):
    """exp2_offset's exponent for a row's max key, in numpy float32 in the spec's order:
    s·L - (m·L - log2 S) with s = m."""
    a = np.float32(m) * np.float32(LOG2E)
    return a - (a - np.float32(log2_scale(scale)))


def test_exp2_offset_against_multiply():
    """S = 256 = 2^8: log2 S is exact, so exp2_offset is multiply up to fp32 rounding (the diagnostics are
    the same and, without a P cast, the outputs too). S = 448: log2_scale(448) is rounded; in float32 the max
    key's exponent m·L - (m·L - log2 S) rounds above it on some rows, x exceeds 448 there and the loop oracle
    (float32 decisions, as a kernel's) counts it as saturated, exactly on the rows the float32 arithmetic
    predicts. The emulator decides on the exact x, 448·2^0 = 448, and never does, as multiply (1·448) never does."""
    g = torch.Generator().manual_seed(3)
    s = torch.rand(64, 40, generator=g, dtype=torch.float64) * -20  # x down to 256·e^-20, below 2^-10
    s[:, 0] = torch.rand(64, generator=g, dtype=torch.float64) * 40  # row maxima 0..40
    s[:, 1:] += s[:, :1]
    q, k, v = exact_scores(s.float().double())
    kw = dict(block_n=16, sm_scale=1.0, ksink=0, backend="emulator")
    for fmt in (None, "e4m3fn"):
        a = pcast.attention(q, k, v, scale=256.0, fmt=fmt, scale_mode="exp2_offset", **kw)
        b = pcast.attention(q, k, v, scale=256.0, fmt=fmt, scale_mode="multiply", **kw)
        assert all(torch.equal(getattr(a, n), getattr(b, n)) for n in DIAGNOSTICS)
        if fmt is None:
            assert float((a.out - b.out).abs().max()) <= 1e-5 * float(b.out.abs().max())
    e448 = pcast.attention(q, k, v, scale=448.0, scale_mode="exp2_offset", **kw)
    m448 = pcast.attention(q, k, v, scale=448.0, scale_mode="multiply", **kw)
    above = np.array([_offset_x_max(m, 448.0) > np.float32(log2_scale(448.0)) for m in s[:, 0].float().numpy()])
    _, loop448 = loop_attention(q, k, v, scale=448.0, scale_mode="exp2_offset", block_n=16, sm_scale=1.0, ksink=0)
    assert 0 < above.sum() < 64
    assert loop448["saturated"].view(-1).tolist() == above.astype(int).tolist()
    assert int(e448.saturated.sum()) == 0 and int(m448.saturated.sum()) == 0
    assert 2.0 ** log2_scale(448.0) != 448.0 and 2.0 ** log2_scale(256.0) == 256.0


# ------------------------------------------------------------------------- bad input

def _qkv():
    return torch.randn(2, 3, 8, 16), torch.randn(2, 3, 8, 16), torch.randn(2, 3, 8, 16)


@pytest.mark.parametrize("kwargs,match", [
    (dict(scale_mode="exp2"), "scale_mode='exp2'.*multiply, exp2_offset"),
    (dict(scale_mode=None), "scale_mode=None"),
    (dict(rescale_threshold=-1.0), "rescale_threshold=-1.0.*finite float >= 0"),
    (dict(rescale_threshold=float("inf")), "rescale_threshold=inf"),
    (dict(rescale_threshold=float("nan")), "rescale_threshold=nan"),
    (dict(rescale_threshold="8"), "rescale_threshold='8'"),
    (dict(rescale_threshold=True), "rescale_threshold=True"),
    (dict(sink_mode="start"), "sink_mode='start'.*init, final"),
    (dict(sink_logit=torch.zeros(3, 2)), r"sink_logit .*\[H\]=\(3,\) or \[B, H\]=\(2, 3\)"),
    (dict(sink_logit=torch.zeros(2)), "sink_logit"),
    (dict(sink_logit=torch.zeros(1, 2, 3)), "sink_logit"),
    (dict(sink_logit=torch.zeros(3, dtype=torch.float64)), "sink_logit .*float64.*float32"),
    (dict(sink_logit=[1.0, 2.0, 3.0]), "sink_logit .*list"),
    (dict(sink_logit=torch.tensor([1.0, float("nan"), 0.0])), "sink_logit contains NaN or inf"),
    (dict(sink_logit=torch.tensor([1.0, float("inf"), 0.0])), "sink_logit contains NaN or inf"),
    (dict(sink_logit=torch.zeros(3, device="meta")), "sink_logit must be on q's device"),
    (dict(qk_fmt="e4m3"), "qk_fmt='e4m3'.*None, e4m3fn"),
    (dict(v_fmt="fp8"), "v_fmt='fp8'.*None, e4m3fn"),
    (dict(qk_scale=0.0), "qk_scale=0.0.*'tensor' or a finite number > 0"),
    (dict(qk_scale="amax"), "qk_scale='amax'"),
    (dict(v_scale=-1.0), "v_scale=-1.0"),
    (dict(v_scale=float("nan")), "v_scale=nan"),
    (dict(v_scale=True), "v_scale=True"),
    (dict(policy="fa9"), "fa9"),
    (dict(policy=3), "policy=3.*allowed: None"),
])
def test_bad_policy_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pcast.attention(*_qkv(), **kwargs)
