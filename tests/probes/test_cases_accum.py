"""The accumulation cases of T9 (:mod:`pcast.probes.cases_accum`): the decode/prefill drift's first mismatch
at kv_len 97 rebuilt by the loop oracle (an implementation of the contract that shares no code with the
emulator), the control and the fix, and the promotion intervals' order, by the emulator and by the loop oracle."""

import pytest
import torch

from pcast.probes import cases_accum as ca
from pcast.probes.cases import CASES

from loop_contract import loop_attention

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _loop_last_rows(length, decode, prefill, promote):
    q, k, v = (ca._fp8_grid(t)[:, :, :length] for t in ca._drift_inputs())
    kw = dict(qk_fmt="e4m3fn", qk_scale=1.0, v_fmt="e4m3fn", v_scale=1.0, pv_arith="wgmma-sm90", pv_promote=promote,
              scale=256.0, scale_mode="exp2_offset", causal=True)
    dec, _ = loop_attention(q[:, :, -1:], k, v, block_n=decode, causal_align="bottom_right", **kw)
    pre, _ = loop_attention(q, k, v, block_n=prefill, **kw)
    return dec[0, 0, -1], pre[0, 0, -1]


def test_the_loop_oracle_finds_the_first_mismatch_at_97_with_promotion():
    """Decode (96-key tiles) and prefill (192) agree up to kv_len 96 and split at 97 once each tile is
    promoted; at the prefill's width the decode agrees (the fix)."""
    for n in (95, 96):
        a, b = _loop_last_rows(n, 96, 192, 1)
        assert torch.equal(a, b), n
    a, b = _loop_last_rows(97, 96, 192, 1)
    assert not torch.equal(a, b)
    a, b = _loop_last_rows(97, 192, 192, 1)
    assert torch.equal(a, b)


@pytest.mark.heavy  # the five sweeps (about 45 s); the loop oracle's test above checks 97 at a smaller size
def test_the_emulator_sweep_agrees():
    r = ca.tile_drift_sweep()
    assert r["first"] == 97 and 97 in r["mismatched"]
    assert ca.tile_drift_sweep("fp8-fixed")["mismatched"] == ()
    # the control: at one kBlockN the Triton kernel's fixed tiles give decode the prefill's bits at every length
    bf16 = ca.tile_drift_sweep("bf16")
    assert bf16["mismatched"] == () and bf16["fraction"] == 0.0
    # on the emulator only its row-count-dependent float32 matmuls differ: within 1e-6, and none at one shape
    assert max(ca.tile_drift_sweep("bf16-emulator")["delta"].values(), default=0.0) < 1e-6
    assert ca.tile_drift_sweep("bf16-rows")["mismatched"] == ()


def test_promotion_intervals_order_the_error():
    e = ca.promotion_errors()
    assert e[1] < e[4] < e[64] <= e[0]


def test_the_cases_are_registered():
    keys = [c.key for c in CASES]
    assert "fa3-fp8-two-level-accumulation" in keys and "fa3-fp8-decode-prefill-drift" in keys
    assert ca.Beside("x", 0.5, 2, lambda: 0.5).evaluate() == (0.5, "INCONCLUSIVE")


def test_the_loop_oracle_orders_the_intervals_too():
    """The promotion intervals' order by the loop oracle on a smaller fixture of the same kind (4 rows, 8,192
    keys, head_dim 64, block_n 64: 128 blocks), each error against the loop's own float32 P·V."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 4, 64, generator=g)
    k, v = (torch.randn(1, 1, 8192, 64, generator=g) for _ in range(2))
    kw = dict(qk_fmt="e4m3fn", v_fmt="e4m3fn", scale=256.0, scale_mode="exp2_offset", block_n=64)
    ref = loop_attention(q, k, v, **kw)[0].double()
    err = {n: float((loop_attention(q, k, v, pv_arith="wgmma-sm90", pv_promote=n, **kw)[0].double() - ref).norm()
                    / ref.norm()) for n in (0, 1, 4, 64)}
    assert err[1] < err[4] < err[64] < err[0]
