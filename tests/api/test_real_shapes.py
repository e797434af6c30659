"""Shapes of real models: grouped-query attention and head dimensions that are
multiples of 16 but not powers of two (80, 96, ...), in all three implementations.

The loop oracle indexes the key/value head of each query head itself (``h // (H / H_kv)``) and
never pads d; the emulator and the Triton kernel expand K and V with repeat_interleave, and the
kernel zero-pads d to a power of two. They must agree as every other call does (diagnostics
identical or explained, outputs within 1e-5 relative or explained), and match the float64
reference when P is not rounded. Odd shapes: Nq != Nk, Nk not a multiple of block_n, causal.
"""

import math

import pytest
import torch

import pcast
from pcast.reference import reference_attention

from three_way import check_three


def gqa_inputs(seed, *, b=2, h=4, hkv=2, nq=37, nk=70, d=80):
    """q [b, h, nq, d]; k, v [b, hkv, nk, d]; key 0 of every key/value head is a sink (scores ~6 higher)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, nq, d, generator=g)
    k = torch.randn(b, hkv, nk, d, generator=g)
    v = torch.randn(b, hkv, nk, d, generator=g)
    qm = q.mean(2).reshape(b, hkv, h // hkv, d).mean(2)  # the mean query of each key/value head's group
    k[:, :, 0] += qm * (6.0 * math.sqrt(d) / qm.pow(2).sum(-1, keepdim=True))
    return q, k, v


CASES = {
    "gqa-d80-paper": (dict(h=4, hkv=2, d=80), dict(order="forward", scale=1.0, block_n=16)),
    "mqa-d96-reverse-causal": (dict(h=4, hkv=1, d=96), dict(order="reverse", scale=256.0, causal=True)),
    "mha-d48-fa4-casts": (dict(h=2, hkv=2, d=48, nq=50, nk=130),
                          dict(order="reverse", scale=256.0, scale_mode="exp2_offset", rescale_threshold=8.0,
                               qk_fmt="e4m3fn", v_fmt="e4m3fn", block_n=128)),
    "gqa-d112-sink-init": (dict(h=4, hkv=2, d=112), dict(sink_logit=torch.tensor([7.0, 5.0, 9.0, 6.0]),
                                                          sink_mode="init", order="forward", scale=1.0)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_three_implementations_agree_on_real_shapes(case):
    shape, kw = CASES[case]
    q, k, v = gqa_inputs(len(case), **shape)
    tri, emu, _, _ = check_three(q, k, v, fmt="e4m3fn", ksink=1, **kw)
    assert tri.out.shape == q.shape and int(emu.terms.sum()) > 0
    assert int(emu.underflow.sum()) > 0  # the comparison covered real underflow


@pytest.mark.parametrize("d,hkv", [(80, 2), (96, 1), (208, 4)])
def test_unrounded_matches_the_float64_reference(d, hkv):
    q, k, v = gqa_inputs(d + hkv, h=4, hkv=hkv, d=d, nq=33, nk=65)
    ref = reference_attention(q, k, v, causal=True)
    # the reference of the expanded heads, written out: query head h uses key/value head h // (4 / hkv)
    idx = torch.arange(4) // (4 // hkv)
    assert torch.equal(ref, reference_attention(q, k[:, idx], v[:, idx], causal=True))
    for backend in ("emulator", "triton"):
        out = pcast.attention(q, k, v, fmt=None, causal=True, causal_align="top_left", backend=backend).out.double()
        assert float((out - ref).abs().max()) <= 1e-5 * float(ref.abs().max()), backend


def test_gqa_is_multi_head_attention_on_repeated_heads():
    """Bit for bit: a GQA call equals the MHA call on K, V repeated per group (the casts' scales
    are per key/value head, so repeating first changes nothing)."""
    q, k, v = gqa_inputs(5, h=4, hkv=2, d=64)
    idx = torch.arange(4) // 2
    for backend in ("emulator", "triton"):
        a = pcast.attention(q, k, v, policy="sage2", v_fmt="e4m3fn", qk_fmt="e4m3fn", ksink=1, backend=backend)
        b = pcast.attention(q, k[:, idx].contiguous(), v[:, idx].contiguous(), policy="sage2", v_fmt="e4m3fn",
                              qk_fmt="e4m3fn", ksink=1, backend=backend)
        assert torch.equal(a.out, b.out) and torch.equal(a.underflow, b.underflow), backend


@pytest.mark.parametrize("qshape,kshape,match", [
    ((1, 4, 8, 80), (1, 3, 8, 80), r"k shape \(1, 3, 8, 80\) does not match .*H_kv dividing H = 4"),
    ((1, 4, 8, 72), (1, 4, 8, 72), r"head dimension d=72 is not allowed; allowed: a multiple of 16 from 16 to 256"),
    ((1, 4, 8, 272), (1, 4, 8, 272), r"head dimension d=272 is not allowed"),
    ((2, 4, 8, 64), (1, 4, 8, 64), r"k shape \(1, 4, 8, 64\) does not match"),
])
def test_bad_shapes_name_the_problem(qshape, kshape, match):
    with pytest.raises(ValueError, match=match):
        pcast.attention(torch.zeros(qshape), torch.zeros(kshape), torch.zeros(kshape), backend="emulator")


def test_the_wrong_head_mapping_is_a_real_difference():
    """Teeth: K, V tiled (query head h reading key/value head h mod H_kv) instead of grouped
    (h // (H / H_kv)) is caught by pcast.conformance.explain against the right call."""
    from pcast.conformance import explain
    from pcast.conformance.model import fragile_elements

    q, k, v = gqa_inputs(9, h=4, hkv=2, d=80)
    kw = dict(order="forward", scale=1.0, fmt="e4m3fn", causal=False, ksink=1, block_n=64)
    right = pcast.attention(q, k, v, backend="emulator", **kw)
    tiled = pcast.attention(q, k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1), backend="emulator", **kw)
    fr = fragile_elements(q, k, **{c: kw[c] for c in ("order", "scale", "fmt", "causal", "block_n")})
    assert explain(right, right, q, k, v, fragile=fr, **kw)["explained"]
    assert not explain(tiled, right, q, k, v, fragile=fr, **kw)["explained"]
