"""V's scales over the whole tensor or along the sequence (``v_scale="tensor_global"`` and ``"mx_seq32"``;
docs/interfaces.md, "V's scales over the whole tensor or along the sequence"): the emulator against the loop
oracle (tests/support/loop_contract.py) bit for bit, the E8M0 rule on hand-computed values, what each option
changes, and the refusals.

Bit for bit needs the same P and the same sums on both sides: the exact inputs here have q = 0 (every score 0,
P = 1) or few non-zero values of V, so that P·V and the row sums are exact in float32 whatever the order.
"""

import pytest
import torch

import pcast
from pcast.contract import V_SCALES
from pcast.emulator.parts import operand_parts
from pcast.formats import get_format
from pcast.policies import Policy

from loop_contract import loop_attention
from loop_contract import operand_parts as loop_parts

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

NEW = ("tensor_global", "mx_seq32")


def _spread(shape, seed, low=-3, high=3):
    """Random signs times powers of two in [2^low, 2^high] times 1 + k/8: few bits each, so float32 sums of a
    few hundred are exact."""
    g = torch.Generator().manual_seed(seed)
    e = torch.randint(low, high + 1, shape, generator=g).to(torch.float32)
    m = 1 + torch.randint(0, 8, shape, generator=g).to(torch.float32) / 8
    s = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0)
    return s * m * torch.exp2(e)


def _bits(t):
    """float32 bits, -0 as +0 (the two quantizers may differ in the sign of a zero)."""
    return (t + 0.0).contiguous().view(torch.int32)


@pytest.mark.parametrize("how", NEW)
@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
def test_the_cast_equals_the_loop_oracle_bit_for_bit(how, fmt):
    g = torch.Generator().manual_seed(3)
    t = torch.randn(2, 3, 70, 16, generator=g) * torch.exp(4 * torch.randn(2, 3, 70, 16, generator=g))
    t[0, 0, 32:64] = 0.0  # a block whose amax is 0
    t[1, 2, :, 5] = 448.0 * 2.0 ** -3  # amax / 448 a power of two exactly: D = 2^-3, not 2^-2
    a, sa = loop_parts(t, fmt, how)
    b, sb = operand_parts(t, get_format(fmt), how)
    assert torch.equal(_bits(a), _bits(b)) and torch.equal(_bits(a * sa), _bits(b * sb))


def test_mx_seq32_scales_are_e8m0_rounded_up_per_32_keys_and_channel():
    t = torch.zeros(1, 1, 70, 3)
    t[0, 0, 5, 0] = 448.0 * 2.0 ** -3  # exactly 2^-3 · 448: D = 2^-3
    t[0, 0, 40, 0] = 448.0 * 2.0 ** -3 * (1 + 2.0 ** -20)  # just above: D = 2^-2
    t[0, 0, 69, 1] = 2.0 ** -20  # the last (short) block: 2^-20 / 448 -> 2^-28
    t[0, 0, 0, 2] = 2.0 ** 120  # E8M0's top: 2^120 / 448 -> 2^112
    _, d = operand_parts(t, get_format("e4m3fn"), "mx_seq32")
    assert d.shape == t.shape
    assert d[0, 0, :32, 0].eq(2.0 ** -3).all() and d[0, 0, 32:64, 0].eq(2.0 ** -2).all()
    assert d[0, 0, 64:, 0].eq(1.0).all()  # amax 0: 1
    assert d[0, 0, 64:, 1].eq(2.0 ** -28).all() and d[0, 0, :64, 1].eq(1.0).all()
    assert d[0, 0, :32, 2].eq(2.0 ** 112).all()


def test_tensor_global_takes_one_amax_where_tensor_takes_one_per_head():
    v = torch.ones(1, 2, 8, 4)
    v[0, 1] *= 2.0 ** 20  # head 1's amax pushes head 0's ones below E4M3's subnormals under one global scale
    f = get_format("e4m3fn")
    per_head = operand_parts(v, f, "tensor")
    whole = operand_parts(v, f, "tensor_global")
    assert torch.equal(per_head[0] * per_head[1], v)
    assert (whole[0] * whole[1])[0, 0].eq(0.0).all() and torch.equal((whole[0] * whole[1])[0, 1], v[0, 1])


CALLS = [  # (nq, nk, block_n, causal, order, heads, kv_heads)
    (16, 70, 32, True, "forward", 2, 2),
    (40, 96, 48, False, "reverse", 4, 2),
    (33, 129, 64, True, "reverse", 2, 1),
]


@pytest.mark.parametrize("how", NEW)
@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("v_fmt", ["e4m3fn", "e5m2"])
def test_attention_equals_the_loop_oracle_bit_for_bit(how, call, v_fmt):
    nq, nk, bn, causal, order, h, hkv = call
    q = torch.zeros(2, h, nq, 32)  # every score 0: P = 1, sums of V exact
    k = _spread((2, hkv, nk, 32), 1)
    v = _spread((2, hkv, nk, 32), 2, -4, 4)
    v[1, 0, :, 3] = 0.0
    v[0, 0, 5, 7] = 448.0  # amax 448·2^0: "tensor_global"'s s_v = 1, V' stays few-bit (sums exact)
    if v_fmt == "e4m3fn":  # channel 2: 2^-12 under a 2^8 in every block of 32 keys: D = 1, 2^-12 -> 0 in E4M3
        v[:, :, :, 2] = 2.0 ** -12
        v[:, :, ::32, 2] = 2.0 ** 8
    kw = dict(order=order, causal=causal, block_n=bn, v_fmt=v_fmt, v_scale=how, scale=256.0, fmt="e4m3fn",
              causal_align="bottom_right" if causal else None)
    emu = pcast.attention(q, k, v, backend="emulator", **kw)
    out, diag = loop_attention(q, k, v, **kw)
    assert torch.equal(_bits(emu.out), _bits(out))
    for name in ("underflow", "saturated", "terms"):
        assert torch.equal(getattr(emu, name), diag[name]), name


@pytest.mark.parametrize("how", NEW)
def test_random_calls_agree_with_the_loop_oracle(how):
    """General P (random scores), so P·V's float32 order may differ: within 1e-6 of max|out|, diagnostics equal."""
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, 50, 32, generator=g) for _ in range(3))
    v = v * torch.exp(3 * torch.randn(1, 2, 50, 32, generator=g))
    kw = dict(order="reverse", causal=True, block_n=32, v_fmt="e4m3fn", v_scale=how, qk_fmt="e4m3fn", scale=256.0,
              causal_align="bottom_right")
    emu = pcast.attention(q, k, v, backend="emulator", **kw)
    out, diag = loop_attention(q, k, v, **kw)
    assert (emu.out - out).abs().max() <= 1e-6 * out.abs().max()
    assert torch.equal(emu.underflow, diag["underflow"]) and torch.equal(emu.terms, diag["terms"])


def test_tensor_global_on_the_tensor_core_equals_the_loop_oracle():
    q = torch.zeros(1, 2, 16, 32)
    k = _spread((1, 2, 64, 32), 4)
    v = _spread((1, 2, 64, 32), 5, -6, 3)
    kw = dict(v_fmt="e4m3fn", v_scale="tensor_global", pv_arith="wgmma-sm90", block_n=64, scale=256.0,
              scale_mode="exp2_offset")
    emu = pcast.attention(q, k, v, backend="emulator", **kw)
    out, _ = loop_attention(q, k, v, **kw)
    assert torch.equal(_bits(emu.out), _bits(out))


def test_refusals_name_the_option():
    q = k = v = torch.ones(1, 1, 32, 32)
    with pytest.raises(ValueError, match="mx_seq32"):
        pcast.attention(q, k, v, backend="emulator", v_fmt="e4m3fn", v_scale="mx_seq32", pv_arith="wgmma-sm90",
                        block_n=64, scale=256.0, scale_mode="exp2_offset")
    with pytest.raises(ValueError, match="mx_seq32"):
        loop_attention(q, k, v, v_fmt="e4m3fn", v_scale="mx_seq32", pv_arith="wgmma-sm90")
    for bad in NEW:
        with pytest.raises(ValueError, match="qk_scale"):
            pcast.attention(q, k, v, backend="emulator", qk_fmt="e4m3fn", qk_scale=bad)
        with pytest.raises(ValueError, match="qk_scale"):
            Policy("x", qk_scale=bad)
        assert Policy("x", v_scale=bad).v_scale == bad and bad in V_SCALES
    with pytest.raises(ValueError, match="v_scale"):
        pcast.attention(q, k, v, backend="emulator", v_fmt="e4m3fn", v_scale="mx_seq16")
