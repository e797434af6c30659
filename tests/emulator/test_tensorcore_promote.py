"""The promotion interval of the tensor core's P·V (``pv_promote``; docs/interfaces.md, "The tensor core's P·V
arithmetic"): the emulator against the loop oracle bit for bit, and what the interval changes.

Bit for bit needs the same P on both sides: the logits here are float32 values whose product with log2(e)
is an integer, so every exp2 of ``scale_mode="exp2_offset"`` (P and the rescale alpha) is a power of two,
exact in both implementations, and the row sums are exact too. What is left to differ is step 5.
"""

import pytest
import torch

import pcast
from pcast.contract import LOG2E

from loop_contract import loop_attention

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

D = 64


def _logit(n: int) -> float:
    """A float32 s with float32(s·LOG2E) == n exactly (the nearest float32 to n / log2 e, moved by ulps)."""
    s = torch.tensor(n / float(LOG2E), dtype=torch.float32)
    for _ in range(64):
        t = float(s * LOG2E)
        if t == n:
            return float(s)
        s = torch.nextafter(s, torch.tensor(float("inf") if t < n else float("-inf")))
    raise AssertionError(n)


def _inputs(nq=16, nk=230, seed=0, low=-12):
    """q = 8·e_i (sm_scale 1/8), k holding the logits (integers in log2 units from ``low`` to 0, each row's
    max in a late block so alpha moves), v random E4M3 values."""
    g = torch.Generator().manual_seed(seed)
    n = torch.randint(low, 1, (nq, nk), generator=g)
    n[:, 0] = -3
    n[torch.arange(nq), 100 + 7 * torch.arange(nq)] = 2  # the max arrives late: alpha = 2^-5 there
    table = {int(i): _logit(int(i)) for i in n.unique()}
    logits = n.to(torch.float32).apply_(lambda i: table[int(i)])
    q = torch.zeros(1, 1, nq, D)
    q[0, 0, torch.arange(nq), torch.arange(nq)] = 8.0
    k = torch.zeros(1, 1, nk, D)
    k[0, 0, :, :nq] = logits.T
    v = pcast.quantize(torch.randn(1, 1, nk, D, generator=g) * 3, "e4m3fn")
    return q, k, v


@pytest.mark.parametrize("arith", ["wgmma-sm90", "mma-sm89", "tcgen05-sm100"])
@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("causal", [False, True])
def test_emulator_equals_the_loop_oracle_bit_for_bit(arith, order, causal):
    q, k, v = _inputs()
    outs = {}
    for promote in (0, 1, 2, 64):
        kw = dict(v_fmt="e4m3fn", v_scale=1.0, pv_arith=arith, pv_promote=promote, order=order, scale=256.0,
                  scale_mode="exp2_offset", block_n=32 if arith == "mma-sm89" else 64, causal=causal,
                  causal_align="bottom_right" if causal else None)
        emu = pcast.attention(q, k, v, backend="emulator", **kw)
        loop, diag = loop_attention(q, k, v, **kw)
        assert torch.equal(emu.out.view(torch.int32), loop.view(torch.int32)), promote
        assert torch.equal(emu.lse, diag["lse"])
        outs[promote] = emu.out
    # the interval is not ignored: promoting every block differs from never; 64 >= the blocks is never
    assert torch.equal(outs[64], outs[0])
    if arith != "tcgen05-sm100":  # (25 alignment bits: little left to lose on these sums)
        assert not torch.equal(outs[1], outs[0])


def test_promotion_every_block_takes_each_block_from_a_fresh_accumulator():
    """A hand-made dot: one block adds 2^10, the next 2^-4 (wgmma-sm90, 13 alignment bits): carried in the
    MMA's accumulator the 2^-4 falls below the grid 2^(10 - 13) and is lost; promoted every block, it is
    added in float32."""
    q = torch.zeros(1, 1, 1, D)
    q[0, 0, 0, 0] = 8.0
    k = torch.zeros(1, 1, 64, D)
    k[0, 0, 32, 0] = _logit(-6)  # key 32: x = 2^(8 - 6) = 4; every other key x = 256
    v = torch.zeros(1, 1, 64, D)
    v[0, 0, 0, 0] = 4.0  # block one: 256·4 = 2^10
    v[0, 0, 32, 0] = 2.0 ** -6  # block two: 4·2^-6 = 2^-4
    kw = dict(v_fmt="e4m3fn", v_scale=1.0, pv_arith="wgmma-sm90", scale=256.0, scale_mode="exp2_offset",
              block_n=32, backend="emulator")
    l = torch.tensor(63 * 256.0 + 4.0)
    never = pcast.attention(q, k, v, **kw).out[0, 0, 0, 0]
    every = pcast.attention(q, k, v, pv_promote=1, **kw).out[0, 0, 0, 0]
    assert float(never) == float(torch.tensor(2.0 ** 10) / l)
    assert float(every) == float(torch.tensor(2.0 ** 10 + 2.0 ** -4) / l)
