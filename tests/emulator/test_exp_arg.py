"""How exp2_offset forms exp2's argument (``exp_arg``; docs/interfaces.md, "Semantics"): the emulator's fused
multiply-add against the loop oracle's rational one bit for bit, whole calls against the loop oracle, and the
one-hot row whose output the fma moves off 1 (float64 expectations, computed here)."""

from fractions import Fraction

import numpy as np
import pytest
import torch

import pcast
from pcast.conformance import explain
from pcast.contract import LOG2E
from pcast.emulator.ieee import fma32

from loop_contract import loop_attention
from three_way import as_result

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _fma_exact(a: float, c: float) -> float:
    """float32 nearest ``a·LOG2E + c`` (exact rational), ties to even: written here on its own."""
    e = Fraction(float(LOG2E)) * Fraction(a) + Fraction(c)
    lo = np.float32(float(e))
    cands = (lo, np.nextafter(lo, np.float32(np.inf)), np.nextafter(lo, np.float32(-np.inf)))
    return float(min(cands, key=lambda y: (abs(Fraction(float(y)) - e), int(y.view(np.int32)) & 1)))


def test_fma32_rounds_once():
    """fma32 is the correctly rounded a·LOG2E + c, near cancellation (the winning key) and far from it."""
    g = torch.Generator().manual_seed(5)
    a = (torch.randn(3000, generator=g) * 40).float()
    c = (torch.randn(3000, generator=g) * 60).float()
    c[:1500] = -(a[:1500].double() * float(LOG2E)).float()  # c = -float32(a·LOG2E): the rounding's remainder
    c[1500:1600] = c[1500:1600] * 2.0 ** 40  # |c| far above |a·LOG2E|
    got = fma32(a, LOG2E, c)
    want = torch.tensor([_fma_exact(x, y) for x, y in zip(a.tolist(), c.tolist())])
    assert torch.equal(got, want)
    assert (got[:1500] != 0).sum() > 1400  # the remainder is rarely zero
    assert torch.isneginf(fma32(torch.tensor([float("-inf")]), LOG2E, torch.tensor([3.0]))).all()


@pytest.mark.parametrize("fmt,scale,causal", [("e4m3fn", 1.0, False), ("e4m3fn", 256.0, True), (None, 1.0, True),
                                              ("bf16", 256.0, False)])
def test_fma_against_loop(fmt, scale, causal):
    """Emulator against the loop oracle under exp_arg="fma": the same counts, every output difference explained
    by pcast.conformance as for the other options (their block weights and exp2 differ in the last bits), and
    the fma moves outputs the rounded form keeps."""
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(1, 2, 48, 32, generator=g) * 2 for _ in range(3))
    kw = dict(scale_mode="exp2_offset", fmt=fmt, scale=scale, causal=causal, block_n=32)
    emu = pcast.attention(q, k, v, backend="emulator", exp_arg="fma", **kw)
    out, diag = loop_attention(q, k, v, exp_arg="fma", **kw)
    for n in ("terms", "underflow", "saturated"):
        assert torch.equal(getattr(emu, n), diag[n]), n
    rep = explain(as_result(out, diag), emu, q, k, v, **kw)  # every difference explained, as check_three's
    assert rep["explained"], rep["why"]
    assert rep["max_rel_diff"] <= 1e-5 or rep["fragile_elements"] > 0
    rounded = pcast.attention(q, k, v, backend="emulator", **kw)
    assert (rounded.out != emu.out).any()


def _one_hot(s_win: float):
    """One query row, one key scoring s_win (sm_scale 1), the others 200 below it (x underflows to 0), V = 1."""
    q = torch.zeros(1, 1, 1, 16)
    q[..., 0] = 1.0
    k = torch.zeros(1, 1, 64, 16)
    k[0, 0, :, 0] = s_win - 200.0
    k[0, 0, 7, 0] = s_win
    return q, k, torch.ones(1, 1, 64, 16)


@pytest.mark.parametrize("s_win", [30.0, 7.25, 101.3])
def test_one_hot_row(s_win):
    """A saturated row with 16-bit P and the float32 row sum: "rounded" gives 1 exactly; "fma" gives
    bf16(x)/x = 1/x with x = 2^(m·L - float32(m·L)) != 1, bit for bit with the loop oracle."""
    q, k, v = _one_hot(s_win)
    kw = dict(scale_mode="exp2_offset", fmt="bf16", sm_scale=1.0, block_n=32)
    assert pcast.attention(q, k, v, backend="emulator", **kw).out.eq(1.0).all()
    fma = pcast.attention(q, k, v, backend="emulator", exp_arg="fma", **kw).out
    loop, _ = loop_attention(q, k, v, exp_arg="fma", **kw)
    assert torch.equal(fma, loop)
    m = float(np.float32(s_win))
    r = float(Fraction(m) * Fraction(float(LOG2E)) - Fraction(float(np.float32(m * float(LOG2E)))))
    ulp = np.spacing(np.float32(m * float(LOG2E)))
    assert 0 < abs(r) <= ulp / 2
    assert fma[0, 0, 0, 0].item() == pytest.approx(2.0 ** -r, rel=3e-7)
    assert fma.ne(1.0).all()


def test_refusals():
    q = k = v = torch.randn(1, 1, 16, 16)
    with pytest.raises(ValueError, match="exp_arg='fma' is not allowed with scale_mode='multiply'"):
        pcast.attention(q, k, v, backend="emulator", exp_arg="fma")
    with pytest.raises(ValueError, match="exp_arg='fma' is not allowed with backend='triton-interpreted'"):
        pcast.attention(q, k, v, backend="triton", scale_mode="exp2_offset", exp_arg="fma")
    with pytest.raises(ValueError, match="exp_arg='fused' is not allowed"):
        pcast.attention(q, k, v, backend="emulator", scale_mode="exp2_offset", exp_arg="fused")
