"""The P-policy options (docs/interfaces.md, "P policies of deployed kernels") in the Triton kernel.

The interpreted kernel is checked against the two independent implementations of the contract,
the emulator and the plain loop of tests/support/loop_contract.py, on every option and on combinations,
with odd shapes; every difference must be explained by :func:`pcast.conformance.explain`
(whose float64 model follows the same options). Then, for each option, that ``explain`` rejects
a real difference: it is no rubber stamp. Shapes are small: the interpreter is slow.
"""

import math

import numpy as np
import pytest
import torch

import pcast
from pcast.conformance import (EX2_APPROX_REL_ERR, EXP_REL_ERR_CPU, compare, explain, exp_rel_err_for,
                                 fragile_elements)
from pcast.conformance.model import cast_operand
from pcast.contract import LOG2E

from loop_contract import cast_operand as loop_cast_operand
from loop_contract import loop_attention
from three_way import as_result, check_three, copy_result, model, sink_inputs


# ------------------------------------------------------------------------- three implementations agree
# (Nq, Nk, d) odd on purpose: Nk not a multiple of block_n, Nq != Nk.

SINK2 = torch.tensor([8.0, 5.0])  # one learned sink logit per head (shape [H])


@pytest.mark.parametrize("case", [
    dict(scale_mode="exp2_offset", scale=256.0),
    dict(scale_mode="exp2_offset", scale=448.0, order="reverse", causal=True, rowsum="rounded", block_n=128),
    dict(scale_mode="exp2_offset", scale=100.0, fmt="e5m2"),  # log2 S not an integer: S' = 2^log2_scale(S)
    dict(rescale_threshold=8.0, scale=256.0),  # FA4's lazy rescaling: x reaches S·2^8 > 448
    dict(rescale_threshold=3.0, order="reverse", block_n=16, causal=True),
    dict(sink_logit=SINK2, sink_mode="init", order="reverse", scale=256.0),
    dict(sink_logit=SINK2, sink_mode="final", scale_mode="exp2_offset", scale=256.0, causal=True),
    dict(qk_fmt="e4m3fn", v_fmt="e4m3fn"),
    dict(qk_fmt="e5m2", qk_scale=0.25, v_fmt="e4m3fn", v_scale=0.01, order="reverse", block_n=16, nq=50),
], ids=lambda c: ",".join(f"{k}={'σ' if k == 'sink_logit' else v}" for k, v in c.items()))
def test_each_option_three_implementations_agree(case):
    case = dict(case)
    q, k, v = sink_inputs(len(str(case)), case.pop("nq", 100), 150, 32)
    kw = dict(order="forward", scale=1.0, fmt="e4m3fn", causal=False, ksink=4, block_n=64)
    kw.update(case)
    tri, _, _, _ = check_three(q, k, v, **kw)
    if kw.get("rescale_threshold", 0.0) > 3 and kw["scale"] == 256.0:
        assert int(tri.saturated.sum()) > 0  # the comparison covered saturation above max_finite


@pytest.mark.parametrize("case", [
    # an FA4-like policy: exp2 offset, lazy, reverse, plus an init sink, FP8 operands and a rounded row sum
    dict(scale_mode="exp2_offset", rescale_threshold=8.0, scale=256.0, order="reverse", sink_mode="init",
         qk_fmt="e4m3fn", v_fmt="e4m3fn", rowsum="rounded", block_m=32),
    # lazy with a final sink, causal, Nq > Nk, d = 16, blocks of 128 keys
    dict(rescale_threshold=1.5, scale=16.0, sink_mode="final", causal=True, block_n=128, v_fmt="e5m2",
         nq=130, nk=90, d=16),
    # vLLM-like: S = 1, forward, init sink, E5M2 P, block_n 16, Nq < Nk
    dict(sink_mode="init", fmt="e5m2", block_n=16, block_m=16, nq=40, nk=120),
])
def test_combinations_three_implementations_agree(case):
    case = dict(case)
    nq, nk, d = case.pop("nq", 100), case.pop("nk", 150), case.pop("d", 32)
    q, k, v = sink_inputs(nq + nk + d, nq, nk, d, b=2, h=1)
    sink = torch.tensor([[7.0], [9.0]])  # [B, H]
    kw = dict(order="forward", scale=1.0, fmt="e4m3fn", causal=False, ksink=4, block_n=64, sink_logit=sink)
    kw.update(case)
    tri, emu, _, _ = check_three(q, k, v, **kw)
    assert int(tri.underflow.sum()) > 0  # the comparison covered real underflow


def test_compare_passes_the_options_and_explains():
    q, k, v = sink_inputs(21, 64, 80, 16, h=1)
    rep = compare(q, k, v, order="reverse", scale=256.0, ksink=4, scale_mode="exp2_offset", rescale_threshold=8.0,
                  sink_logit=torch.tensor([6.0]), sink_mode="init", qk_fmt="e4m3fn", v_fmt="e4m3fn")
    assert rep["kernel_backend"] == "triton-interpreted"
    assert rep["explained"], rep["why"]
    with pytest.raises(ValueError, match="unknown keywords.*'scale_modes'"):
        compare(q, k, v, scale_modes="exp2_offset")


def test_operand_cast_in_kernel_is_the_contracts_cast():
    """Without a P cast (fmt=None), the kernel with FP8 Q, K, V equals the float64 reference on the
    cast operands q', k', v' (built here with pcast.quantize): the in-kernel cast is the contract's."""
    q, k, v = sink_inputs(22, 70, 90, 32, h=2)
    kw = dict(qk_fmt="e4m3fn", v_fmt="e5m2", v_scale=0.125)
    out = pcast.attention(q, k, v, fmt=None, backend="triton", **kw).out.double()
    qc, kc = cast_operand(q, "e4m3fn"), cast_operand(k, "e4m3fn")
    vc = cast_operand(v, "e5m2", 0.125)
    ref = pcast.attention(qc, kc, vc, backend="reference").out
    assert float((out - ref).abs().max()) <= 1e-5 * float(ref.abs().max())
    plain = pcast.attention(q, k, v, backend="reference").out
    assert float((plain - ref).abs().max()) > 1e-3 * float(ref.abs().max())  # the cast did change the operands
    # the model's cast and the loop oracle's are the same numbers
    assert torch.equal(cast_operand(v, "e5m2", 0.125), loop_cast_operand(v, "e5m2", 0.125))
    assert torch.equal(cast_operand(q, "e4m3fn"), loop_cast_operand(q, "e4m3fn"))


def test_v_scale_tensor_global_in_kernel_and_mx_seq32_refused():
    """``v_scale="tensor_global"``: the kernel's per-(batch, head) s_v all set to one amax over the whole V, the
    contract's cast (the float64 reference on v' built by the model's cast); ``"mx_seq32"`` is refused by name."""
    q, k, v = sink_inputs(23, 40, 70, 32, h=2)
    v[0, 1] *= 2.0 ** 12  # heads of different amax: the global scale differs from the per-head one
    out = pcast.attention(q, k, v, fmt=None, backend="triton", v_fmt="e4m3fn", v_scale="tensor_global").out.double()
    ref = pcast.attention(q, k, cast_operand(v, "e4m3fn", "tensor_global"), backend="reference").out
    assert float((out - ref).abs().max()) <= 1e-5 * float(ref.abs().max())
    with pytest.raises(ValueError, match="mx_seq32"):
        pcast.attention(q, k, v, backend="triton", v_fmt="e4m3fn", v_scale="mx_seq32")


# ------------------------------------------------------------------------- a fragile lazy walk

def walk_inputs(c, *, nq=4, d=16, block_n=16):
    """Two KV blocks seen by identical query rows with exact scores (sm_scale=1): block 0's max is 0,
    block 1's is ``c``; the other scores step down by 1 from each block's max."""
    q = torch.zeros(1, 1, nq, d)
    q[..., 0] = 1.0
    k = torch.zeros(1, 1, 2 * block_n, d)
    k[0, 0, :block_n, 0] = -torch.arange(block_n, dtype=torch.float32)
    k[0, 0, block_n:, 0] = c - torch.arange(block_n, dtype=torch.float32)
    v = torch.randn(1, 1, 2 * block_n, d, generator=torch.Generator().manual_seed(3))
    return q, k, v, dict(order="forward", scale=1.0, fmt="e4m3fn", block_n=block_n, sm_scale=1.0, ksink=0)


def test_a_lazy_decision_at_tau_makes_the_row_walk_fragile_and_is_said():
    tau = 1.0
    q, k, v, kw = walk_inputs(float(np.float32(tau / LOG2E)))  # (bm - m)·LOG2E is tau up to rounding
    kw["rescale_threshold"] = tau
    fr = model(q, k, **kw)
    assert bool(fr["walk_fragile"].all())
    _, _, _, reps = check_three(q, k, v, **kw)
    assert all(r["walk_fragile_rows"] == 4 and "lazy-rescale decision" in r["why"] for r in reps.values())
    # Either walk is correct there: the eager walk (the max moves) is explained against the lazy model...
    eager = pcast.attention(q, k, v, backend="emulator", **{**kw, "rescale_threshold": 0.0})
    lazy = pcast.attention(q, k, v, backend="emulator", **kw)
    assert explain(eager, lazy, q, k, v, **kw)["explained"]
    # ...but a terms difference never is.
    eager.terms = eager.terms.clone()
    eager.terms[0, 0, 1] += 1
    assert not explain(eager, lazy, q, k, v, **kw)["explained"]


@pytest.mark.parametrize("c", [0.5, 2.0])
def test_a_clear_lazy_decision_is_not_fragile_and_the_other_walk_is_rejected(c):
    """(bm - m)·LOG2E = c·LOG2E, far from tau = 1: no walk fragility; the eager walk is a real difference."""
    q, k, v, kw = walk_inputs(c / LOG2E)
    kw["rescale_threshold"] = 1.0
    assert not bool(model(q, k, **kw)["walk_fragile"].any())
    lazy = pcast.attention(q, k, v, backend="emulator", **kw)
    loop = as_result(*loop_attention(q, k, v, **kw))
    assert explain(loop, lazy, q, k, v, **kw)["explained"]
    if c < 1.0:  # stale max: lazy and eager walks differ, and explain must say no
        eager = pcast.attention(q, k, v, backend="emulator", **{**kw, "rescale_threshold": 0.0})
        assert not explain(eager, lazy, q, k, v, **kw)["explained"]


# ------------------------------------------------------------------------- explain rejects real differences

def _pair(kw_a, kw_b, *, seed=31, nq=64, nk=96, d=16):
    q, k, v = sink_inputs(seed, nq, nk, d, h=2)
    align = {"causal_align": "top_left"} if nq < nk else {}  # Nq < Nk: the top-left mask, named
    kw_a, kw_b = {**kw_a, **align}, {**kw_b, **align}
    a = pcast.attention(q, k, v, backend="emulator", ksink=4, **kw_a)
    b = as_result(*loop_attention(q, k, v, ksink=4, **kw_b))
    return q, k, v, a, b


@pytest.mark.parametrize("with_option,without", [
    (dict(rescale_threshold=8.0, scale=256.0), dict(scale=256.0)),
    (dict(sink_logit=SINK2, sink_mode="init"), dict(sink_logit=SINK2, sink_mode="final")),
    (dict(sink_logit=SINK2, sink_mode="final"), dict()),
    (dict(qk_fmt="e4m3fn"), dict()),
    (dict(v_fmt="e4m3fn"), dict()),
    (dict(v_fmt="e4m3fn", v_scale=1.0), dict(v_fmt="e4m3fn")),  # same format, other scale
], ids=["lazy", "sink-init-vs-final", "sink-final", "qk-cast", "v-cast", "v-scale"])
def test_explain_rejects_a_side_without_the_option(with_option, without):
    q, k, v, a, b = _pair(with_option, without)
    assert explain(a, as_result(*loop_attention(q, k, v, ksink=4, **with_option)), q, k, v, ksink=4,
                   **with_option)["explained"]  # the same call on both sides is explained...
    rep = explain(a, b, q, k, v, ksink=4, **with_option)
    assert not rep["explained"], rep  # ...the call without the option is not


@pytest.mark.parametrize("option", [
    dict(scale_mode="exp2_offset", scale=256.0), dict(rescale_threshold=8.0, scale=256.0),
    dict(sink_logit=SINK2, sink_mode="init"), dict(sink_logit=SINK2, sink_mode="final"), dict(qk_fmt="e4m3fn"),
    dict(v_fmt="e5m2")], ids=["exp2_offset", "lazy", "sink-init", "sink-final", "qk-cast", "v-cast"])
def test_explain_rejects_perturbations_beyond_the_bound(option):
    """exp2_offset and multiply are the same numbers up to float32 roundings (so a side run without
    it is no real difference); for it, and every option, a perturbation beyond the bound is caught:
    an output in a row without fragile elements, an underflow count in a row without fragile
    underflow, a saturation count where no x is near max_finite, and a terms count anywhere."""
    q, k, v, a, b = _pair(option, option)
    fr = model(q, k, **option)
    assert explain(a, b, q, k, v, ksink=4, fragile=fr, **option)["explained"]
    clean = (~fr["fragile"].any(-1)).nonzero()[0].tolist()
    no_uf = ((fr["fragile_underflow"].sum(-1) == 0) & (fr["fragile_saturation"].sum(-1) == 0)).nonzero()[0].tolist()
    for field, row, delta in (("out", clean, 1e-3), ("underflow", no_uf, 1), ("underflow_sink", no_uf, 1),
                              ("saturated", no_uf, 1), ("terms", [0, 0, 0], 1)):
        bad = copy_result(a)
        t = getattr(bad, field)
        t[tuple(row)] += delta * (float(t.abs().max()) if field == "out" else 1)
        assert not explain(bad, b, q, k, v, ksink=4, fragile=fr, **option)["explained"], field


def test_saturation_difference_is_allowed_only_near_max_finite():
    """Lazy rescaling with S = 256 saturates; a count one higher is explained only in a row that holds an
    x within the error bound of max_finite (where two implementations may disagree), and only by one."""
    kw = dict(rescale_threshold=8.0, scale=256.0)
    q, k, v, a, b = _pair(kw, kw)
    assert int(a.saturated.sum()) > 0
    fr = model(q, k, **kw)
    row = tuple((fr["fragile_saturation"].sum(-1) == 0).nonzero()[0].tolist())
    bad = copy_result(a)
    bad.saturated[row] += 1
    assert not explain(bad, b, q, k, v, ksink=4, fragile=fr, **kw)["explained"]
    fr["fragile_saturation"][row + (7,)] = True  # now one element of that row sits at the threshold
    assert explain(bad, b, q, k, v, ksink=4, fragile=fr, **kw)["explained"]
    bad.saturated[row] += 1
    assert not explain(bad, b, q, k, v, ksink=4, fragile=fr, **kw)["explained"]


def test_a_flush_to_zero_of_tiny_x_is_explained_only_under_exp2_offset():
    """Compiled, tl.exp2 is ex2.approx.ftz.f32: x below 2^-126 may become 0 and drop out of terms and
    underflow. Scores 90..100 below the max put x there (2^-130..2^-144, subnormal on a CPU);
    a side that flushed them is explained under exp2_offset, not under multiply (tl.exp, no ftz)."""
    q, k, v, kw = walk_inputs(0.0)
    k[0, 0, 16:, 0] = -90.0 - torch.arange(16, dtype=torch.float32) * 0.6  # block 1: s = -90 .. -99
    for mode, flushable in (("exp2_offset", True), ("multiply", False)):
        call = {**kw, "scale_mode": mode}
        a = pcast.attention(q, k, v, backend="emulator", **call)
        fr = model(q, k, **call)
        n_tiny = int((fr["x"][0, 0, 0] < 2.0**-126).sum())
        assert n_tiny == 16 and int(a.terms[0, 0, 0]) == 32
        flushed = copy_result(a)
        flushed.terms -= n_tiny
        flushed.underflow -= n_tiny
        assert explain(flushed, a, q, k, v, **call)["explained"] == flushable, mode
        flushed.terms -= 1  # one more than can flush: never explained
        assert not explain(flushed, a, q, k, v, **call)["explained"]


# ------------------------------------------------------------------------- the exp error bounds

def test_cpu_exp_and_exp2_stay_within_the_documented_bound():
    """numpy (what the interpreter runs) and torch float32 exp / exp2 against float64, on 2e6 arguments
    in [-100, 1] (fixed seed): the measured maximum must stay within EXP_REL_ERR_CPU."""
    x = np.random.default_rng(0).uniform(-100.0, 1.0, 2_000_000).astype(np.float32)
    x64 = x.astype(np.float64)
    for name, f32, f64 in (("np.exp", np.exp(x), np.exp(x64)), ("np.exp2", np.exp2(x), np.exp2(x64)),
                           ("torch.exp", torch.exp(torch.from_numpy(x)).numpy(), np.exp(x64)),
                           ("torch.exp2", torch.exp2(torch.from_numpy(x)).numpy(), np.exp2(x64))):
        normal = f64 > 2.0**-126  # subnormal results carry an absolute, not a relative, error
        rel = np.abs(f32[normal].astype(np.float64) - f64[normal]) / f64[normal]
        assert 0 < rel.max() <= EXP_REL_ERR_CPU, name


def test_exp_rel_err_is_picked_by_backend():
    cpu = exp_rel_err_for("triton-interpreted", scale=256.0)
    gpu = exp_rel_err_for("triton-compiled", scale=256.0)
    gpu_lazy = exp_rel_err_for("triton-compiled", scale=256.0, rescale_threshold=8.0)
    assert cpu == EXP_REL_ERR_CPU == exp_rel_err_for("emulator")
    assert EX2_APPROX_REL_ERR < gpu < gpu_lazy  # ex2.approx plus the rounding of its argument y·LOG2E
    assert exp_rel_err_for("triton-compiled", scale_mode="exp2_offset") == max(EX2_APPROX_REL_ERR, EXP_REL_ERR_CPU)
    q, k, _ = sink_inputs(5, 64, 64, 16)
    fr_cpu = fragile_elements(q, k, scale=256.0, exp_rel_err=cpu)
    fr_gpu = fragile_elements(q, k, scale=256.0, exp_rel_err=gpu)
    assert bool((fr_gpu["fragile"] >= fr_cpu["fragile"]).all())  # a larger bound never loses a fragile element
    assert math.isclose(float(fr_cpu["x"].max()), 256.0)
