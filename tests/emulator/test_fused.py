"""The compiled P path (:mod:`pcast.emulator.fused`) equals the eager path bit for bit.

Every call runs twice, compiled and eager (``fused.ENABLED`` off), and every output bit, every count and the
log-sum-exp must be the same. The options are those the three-way conformance tests cover (each option alone
and in combination): every scale mode with the P path compiled, τ, sinks in both modes, causal masks, FP8
operands, the FP8 formats and none, both row sums, block sizes from 16 to 192 (Nk not a multiple), d from 16
to 128; and the multi-result entry points (several value tensors, several scales, a Δ stack
through the multi-call engine). Each covered call must have gone through the compiled pass.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import pcast
from pcast.contract import DIAGNOSTICS
from pcast.emulator import fused

_SINK = torch.tensor([[8.0, 5.0]])  # [B, H]


def _inputs(seed, nq=70, nk=150, d=32, delta=7.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, nq, d, generator=g)
    k = torch.randn(1, 2, nk, d, generator=g)
    v = torch.randn(1, 2, nk, d, generator=g)
    k[:, :, :4] += q.mean(2, keepdim=True) * (delta * d ** 0.5 / q.mean(2).pow(2).sum(-1)[..., None, None])
    return q, k, v


def _bits(r) -> list:
    out = [r.out.contiguous().view(torch.int32), r.lse.contiguous().view(torch.int32)]
    return out + [getattr(r, n) for n in DIAGNOSTICS if getattr(r, n) is not None]


@pytest.fixture
def compiled_calls(monkeypatch):
    """Counts the chunks the compiled pass ran."""
    seen = []
    real = fused.p_rows
    monkeypatch.setattr(fused, "p_rows", lambda *a: seen.append(1) or real(*a))
    return seen


def _both(run, monkeypatch):
    a = run()
    monkeypatch.setattr(fused, "ENABLED", False)
    b = run()
    monkeypatch.setattr(fused, "ENABLED", True)
    return a, b


def _assert_same(a, b):
    for x, y in zip(_bits(a), _bits(b), strict=True):
        assert torch.equal(x, y)


_GRID = list(itertools.product(["forward", "reverse"], ["multiply", "exp2_offset"], [0.0, 8.0],
                               [None, "init", "final"], [False, True], ["unrounded", "rounded"]))


@pytest.mark.parametrize("order,mode,tau,sink,causal,rowsum", _GRID)
def test_option_grid(order, mode, tau, sink, causal, rowsum, monkeypatch, compiled_calls):
    q, k, v = _inputs(len(_GRID))
    kw = dict(order=order, scale=256.0, scale_mode=mode, rescale_threshold=tau, causal=causal, rowsum=rowsum,
              ksink=4, backend="emulator", causal_align="bottom_right" if causal else None)
    if sink:
        kw.update(sink_logit=_SINK, sink_mode=sink)
    a, b = _both(lambda: pcast.attention(q, k, v, **kw), monkeypatch)
    assert compiled_calls
    _assert_same(a, b)
    assert int(a.underflow.sum()) > 0


@pytest.mark.parametrize("case", [
    dict(scale=1.0), dict(scale=448.0), dict(scale=100.0, scale_mode="exp2_offset", fmt="e5m2"),
    dict(scale=1 / 256), dict(fmt="e4m3fnuz", scale=128.0), dict(fmt=None), dict(rescale_threshold=3.0, scale=448.0),
    dict(block_n=16), dict(block_n=128, causal=True, causal_align="bottom_right"), dict(block_n=192), dict(block_n=48, nk=97),
    dict(qk_fmt="e4m3fn", v_fmt="e4m3fn"), dict(qk_fmt="e5m2", qk_scale=0.25, v_fmt="e4m3fn", v_scale=0.01),
    dict(sm_scale=0.1), dict(d=16), dict(d=128), dict(nq=130, nk=90, causal=True, causal_align="top_left"),
], ids=str)
def test_each_option(case, monkeypatch, compiled_calls):
    case = dict(case)
    q, k, v = _inputs(7, nq=case.pop("nq", 70), nk=case.pop("nk", 150), d=case.pop("d", 32))
    kw = {**dict(order="forward", scale=256.0, ksink=4, backend="emulator"), **case}
    a, b = _both(lambda: pcast.attention(q, k, v, **kw), monkeypatch)
    assert compiled_calls
    _assert_same(a, b)


def test_several_values_scales_and_calls(monkeypatch, compiled_calls):
    q, k, v = _inputs(3)
    v2 = torch.randn_like(v)
    a, b = _both(lambda: pcast.attention_values(q, k, (v, v2), scale=256.0, ksink=4), monkeypatch)
    for x, y in zip(a, b, strict=True):
        _assert_same(x, y)
    a, b = _both(lambda: pcast.attention_scales(q, k, (v, v2), scales=(1.0, 256.0, 448.0), ksink=4), monkeypatch)
    for xs, ys in zip(a, b, strict=True):
        for x, y in zip(xs, ys, strict=True):
            _assert_same(x, y)
    calls = [dict(order=o, scale=s, ksink=4) for o in ("forward", "reverse") for s in (1.0, 256.0)]
    a, b = _both(lambda: pcast.attention_calls(q, k, (v,), calls), monkeypatch)
    for xs, ys in zip(a, b, strict=True):
        for x, y in zip(xs, ys, strict=True):
            _assert_same(x, y)
    assert compiled_calls


def test_not_covered_runs_eager(monkeypatch, compiled_calls):
    q, k, v = _inputs(4)
    for kw in (dict(fmt="bf16"), dict(fmt="nvfp4", scale_mode="per_row"), dict(fmt="nvfp4"), dict(num_splits=2),
               dict(pv_arith="wgmma-sm90", v_fmt="e4m3fn")):
        pcast.attention(q, k, v, ksink=4, backend="emulator", **kw)
    assert not compiled_calls


def _recorded_p_rows(monkeypatch):
    """The compiled pass's results (p_q times its block weight, the row sums, the final max, the counts) of each
    chunk, in call order: every value of the P path before step 5's matmul."""
    seen = []
    real = fused.p_rows

    def record(*a):
        out = real(*a)
        seen.append(out)
        return out

    monkeypatch.setattr(fused, "p_rows", record)
    return seen


def test_thread_count_does_not_matter(monkeypatch):
    """What the contract promises across thread counts (docs/reproducibility.md): the counts, the log-sum-exp
    and every value of the P path before P·V (p_q times its block weight, the row sums, the final max), bit for
    bit. The output is a float32 BLAS product of those values (MKL's P·V bits change with its thread count on
    Intel), so it is held to a float32 summation's error, not to its bits."""
    q, k, v = _inputs(5, nq=256, nk=1024, d=64)
    seen = _recorded_p_rows(monkeypatch)
    kw = dict(scale=256.0, ksink=4, backend="emulator")
    old = torch.get_num_threads()
    runs = []
    try:
        for threads in (2, 1):
            torch.set_num_threads(threads)
            start = len(seen)
            runs.append((pcast.attention(q, k, v, **kw), seen[start:]))
    finally:
        torch.set_num_threads(old)
    (a, pa), (b, pb) = runs
    assert len(pa) == len(pb) > 0  # the compiled pass ran every chunk
    for ca, cb in zip(pa, pb, strict=True):
        for xa, xb in zip(ca, cb, strict=True):
            for ta, tb in zip(xa if isinstance(xa, list) else [xa], xb if isinstance(xb, list) else [xb], strict=True):
                assert ta.dtype == tb.dtype and torch.equal(ta, tb)
    assert torch.equal(a.lse.view(torch.int32), b.lse.view(torch.int32))
    for name in DIAGNOSTICS:
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert int(a.underflow.sum()) > 0
    # P·V: the same operands, so the outputs differ by at most two float32 summations' errors over Nk keys
    bound = 2 * 1024 * 2.0 ** -24 * (torch.softmax(q @ k.transpose(-1, -2) / 8.0, -1) @ v.abs())
    assert bool(((a.out - b.out).abs() <= bound).all())
