"""The one input contract of pcast.attention (pcast.api_inputs): float32, bf16 and fp16 tensors, named, Policy
or dict policies, and any block size that is a positive multiple of 16, the emulator against the loop oracle
at real kernels' tiles (96, 160, 192)."""

import math
from types import SimpleNamespace

import pytest
import torch

import pcast
from pcast.conformance import explain
from pcast.api import triton_blocks
from pcast.api_inputs import as_policy, check_inputs, parse_dtype
from pcast.contract import DIAGNOSTICS
from pcast.policies import POLICIES

from loop_contract import loop_attention

pytestmark = pytest.mark.usefixtures("one_thread")


def _inputs(seed=3, nq=24, nk=300, d=32, h=2, h_kv=1, delta=6.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, h, nq, d, generator=g)
    k = torch.randn(1, h_kv, nk, d, generator=g)
    v = torch.randn(1, h_kv, nk, d, generator=g)
    k[:, :, 0] += delta * math.sqrt(d) * q.mean((1, 2))[:, None] / q.mean((1, 2)).pow(2).sum()
    return q, k, v


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_inputs_are_the_float32_call_on_their_widened_values(dtype):
    q, k, v = (t.to(dtype) for t in _inputs())
    sink = torch.tensor([2.0, 3.0], dtype=dtype)
    r = pcast.attention(q, k, v, policy="fa3", sink_logit=sink, backend="emulator", reference=True)
    w = pcast.attention(q.float(), k.float(), v.float(), policy="fa3", sink_logit=sink.float(), backend="emulator",
                        reference=True)
    assert r.input_dtype == dtype and w.input_dtype == torch.float32 and r.out.dtype == torch.float32
    assert torch.equal(r.out, w.out) and r.mse == w.mse
    assert all(torch.equal(getattr(r, n), getattr(w, n)) for n in DIAGNOSTICS)
    res = pcast.attention_calls(q, k, [v], [{"policy": "fa3"}, {"scale": 16.0}], backend="emulator")
    assert torch.equal(res[0][0].out, pcast.attention(q, k, v, policy="fa3", backend="emulator").out)
    assert res[1][0].input_dtype == dtype


def test_a_dict_policy_is_the_policy_it_spells():
    q, k, v = _inputs()
    fields = {"order": "reverse", "scale": 256.0, "scale_mode": "exp2_offset", "block_n": 160}
    a = pcast.attention(q, k, v, policy=fields, backend="emulator")
    b = pcast.attention(q, k, v, policy=POLICIES["fa3"], backend="emulator")
    assert torch.equal(a.out, b.out)
    assert as_policy(fields).name == "options" and as_policy(fields, "mine").name == "mine"
    assert check_inputs(q, k, v, policy="fa3").policy is POLICIES["fa3"]


@pytest.mark.parametrize("bad, words", [
    (dict(k="bf16"), "q, k and v must have one dtype"),
    (dict(q="int"), "q must be float32, bfloat16 or float16, got torch.int32"),
    (dict(block_n=100), "block_n=100 is not allowed; allowed: a positive multiple of 16"),
    (dict(block_m=0), "block_m=0 is not allowed"),
    (dict(policy={"order": "reverse", "bogus": 1}), "allowed keys: order"),
    (dict(policy={"block_n": 40}), "block_n=40 is not allowed"),
    (dict(policy=3), "policy=3 is not allowed"),
])
def test_bad_input_is_named_before_any_work(bad, words):
    q, k, v = _inputs()
    q = q.to(torch.int32) if bad.pop("q", None) else q
    k = k.bfloat16() if bad.pop("k", None) else k
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        pcast.attention(q, k, v, backend="emulator", **bad)


def test_dtype_names():
    assert parse_dtype("bf16") is torch.bfloat16 and parse_dtype("float16") is torch.float16
    assert parse_dtype(torch.float32) is torch.float32
    with pytest.raises(ValueError, match="dtype='int8' is not allowed"):
        parse_dtype("int8")


def test_the_triton_kernels_take_blocks_up_to_256_and_auto_runs_the_emulator_for_larger_ones():
    assert triton_blocks(192, 160, "auto", "triton-compiled") == ("triton-compiled", 128)  # block_m moves nothing
    assert triton_blocks(64, 320, "auto", "triton-compiled") == ("emulator", 64)
    assert triton_blocks(512, 320, "emulator", "emulator") == ("emulator", 256)
    with pytest.raises(ValueError, match="block_n=320 is not allowed with backend='triton'"):
        triton_blocks(64, 320, "triton", "triton-interpreted")


def test_the_interpreted_triton_kernel_at_tiles_no_power_of_two_equals_the_emulator():
    # 96 keys held in a 128-key tile, its last 32 lanes masked: bit for bit the emulator (the interpreter runs
    # the kernel's float32 operations on the CPU)
    q, k, v = _inputs(nq=16, nk=200, d=16)
    for kw in (dict(order="reverse", scale=256.0, scale_mode="exp2_offset", block_n=96, block_m=48),
               dict(order="forward", scale=16.0, block_n=80, rescale_threshold=4.0, num_splits=2)):
        t = pcast.attention(q, k, v, ksink=1, backend="triton", **kw)
        e = pcast.attention(q, k, v, ksink=1, backend="emulator", **kw)
        assert t.backend == "triton-interpreted"
        assert all(torch.equal(getattr(t, n), getattr(e, n)) for n in DIAGNOSTICS), kw
        assert float((t.out - e.out).abs().max()) <= 1e-6 * float(e.out.abs().max()), kw


@pytest.mark.parametrize("order, block_n, options", [
    ("forward", 96, dict(scale=256.0, rescale_threshold=8.0, scale_mode="exp2_offset")),
    ("reverse", 160, dict(scale=256.0, scale_mode="exp2_offset")),
    ("reverse", 192, dict(scale=448.0)),
    ("forward", 48, dict(scale=1.0, causal=True, causal_align="bottom_right")),
])
def test_real_kernels_tiles_match_the_loop_oracle(order, block_n, options):
    q, k, v = _inputs(nk=500)
    emu = pcast.attention(q, k, v, order=order, block_n=block_n, ksink=1, backend="emulator", **options)
    out, diag = loop_attention(q, k, v, order=order, block_n=block_n, ksink=1, **options)
    # the emulator decides on exact values, the loop on its float32 ones: every difference explained
    rep = explain(emu, SimpleNamespace(out=out, **diag), q, k, v, order=order, block_n=block_n, ksink=1, **options)
    assert rep["explained"], rep["why"]
    other = pcast.attention(q, k, v, order=order, block_n=128, ksink=1, backend="emulator", **options)
    assert not torch.equal(emu.underflow, other.underflow) or not torch.equal(emu.out, other.out)  # the tile shows
