"""Decode-time attention (docs/interfaces.md, "Decode-time attention"): split-KV, partition-normalised P,
the lse merge, causal alignment, bf16/fp16 P.

The emulator (kernels/emulator/splits.py) is checked against the loop oracle (tests/support/loop_contract.py,
written from the spec, sharing nothing with it but the quantizer) on odd shapes: every diagnostic equal,
outputs explained by pcast.conformance, lse equal to float32 rounding; the lse against the float64
reference; the merge against splits run as calls of their own. One torch thread.
"""

import math

import pytest
import torch

import pcast
import pcast.emulator.splits as splits
from pcast.conformance import explain
from pcast.contract import DIAGNOSTICS
from pcast.emulator.splits import split_blocks
from pcast.models.sinks import learned_sink
from loop_contract import loop_attention

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

EMU = {"backend": "emulator"}
N, D = 1000, 80  # 1000 keys: not a multiple of 16 or 64 (a partial last block); d = 80, not a power of two


def _inputs(nq, *, seed=0, heads=4, kv_heads=2, n=N, delta=8.0, ksink=4):
    """Grouped-query inputs with ``ksink`` sink keys whose scores sit about Δ above the rest."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads, nq, D, generator=g)
    k = torch.randn(1, kv_heads, n, D, generator=g)
    v = torch.randn(1, kv_heads, n, D, generator=g)
    if ksink:  # per key/value head, along its query heads' mean direction: scores about Δ higher
        qdir = q[0].mean(1).view(kv_heads, heads // kv_heads, D).mean(1)  # [H_kv, D]
        k[0, :, :ksink] += (delta * math.sqrt(D) * qdir / qdir.norm(dim=-1, keepdim=True) ** 2)[:, None, :]
    return q, k, v


@pytest.fixture(scope="module")
def decode():
    return {delta: _inputs(1, delta=delta) for delta in (0.0, 8.0, 14.0)}


def _three_way(q, k, v, **kw):
    """Emulator against the loop oracle; the lse against the float64 reference."""
    a = pcast.attention(q, k, v, **kw, **EMU)
    out, diag = loop_attention(q, k, v, **kw)
    # the emulator decides on exact values, the loop on its float32 ones: each difference in a count is explained
    b = type("R", (), {"out": out, "lse": diag["lse"], **{n: diag[n] for n in DIAGNOSTICS}})
    rep = explain(a, b, q, k, v, **{n: x for n, x in kw.items() if n not in ("block_m", "rowsum")})
    assert rep["explained"], (rep["why"], kw)
    assert torch.allclose(a.lse, diag["lse"], rtol=2e-6, atol=2e-6), kw
    ref_kw = {n: kw[n] for n in ("causal", "causal_align", "sink_logit", "sink_mode") if n in kw}
    if ref_kw.get("sink_mode") == "init":
        ref_kw.pop("sink_mode")
    r = pcast.attention(q, k, v, backend="reference", **ref_kw)
    # the lse does not depend on the cast, except through a rounded row sum
    assert (a.lse.double() - r.lse).abs().max() < 1e-5 * (1 + r.lse.abs().max()), kw
    return a


@pytest.mark.parametrize("num_splits", [1, 2, 3, 7, 64])
@pytest.mark.parametrize("layout", ["contiguous", "interleaved"])
@pytest.mark.parametrize("normalize", ["online", "partition"])
def test_decode_splits_agree(decode, num_splits, layout, normalize):
    """N = 1000, both block sizes, both orders, S in {1, 256, 448}, sink keys at Δ in {0, 8, 14}."""
    for bn, order, scale, delta in ((16, "forward", 256.0, 8.0), (64, "reverse", 1.0, 14.0),
                                    (16, "reverse", 448.0, 0.0), (64, "forward", 256.0, 14.0)):
        q, k, v = decode[delta]
        _three_way(q, k, v, num_splits=num_splits, split_layout=layout, p_normalize=normalize, block_n=bn,
                   order=order, scale=scale, ksink=4)


@pytest.mark.parametrize("sink_mode", ["init", "final"])
@pytest.mark.parametrize("normalize", ["online", "partition"])
def test_learned_sinks_with_splits(decode, sink_mode, normalize):
    q, k, v = decode[0.0]
    sig = learned_sink(6.0, heads=4)
    for ns, layout, order in ((3, "contiguous", "forward"), (7, "interleaved", "reverse"), (64, "contiguous", "reverse")):
        _three_way(q, k, v, num_splits=ns, split_layout=layout, order=order, p_normalize=normalize, block_n=16,
                   scale=256.0, sink_logit=sig, sink_mode=sink_mode)


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
def test_causal_alignments(align):
    """Causal with Nq = Nk (the two alignments agree) and decode (Nq = 1), with splits and partition."""
    q, k, v = _inputs(130, n=130, seed=3)
    qd, kd, vd = _inputs(1, n=300, seed=4)
    for ns, normalize in ((1, "online"), (3, "online"), (7, "partition")):
        a = _three_way(q, k, v, causal=True, causal_align=align, num_splits=ns, p_normalize=normalize, block_n=16,
                       split_layout="interleaved", scale=256.0, ksink=4)
        d = _three_way(qd, kd, vd, causal=True, causal_align=align, num_splits=ns, p_normalize=normalize,
                       block_n=16, scale=256.0, ksink=4)
        assert int(d.terms_sink.min() + d.terms.min()) == (300 if align == "bottom_right" else 1)
    other = "top_left" if align == "bottom_right" else "bottom_right"
    b = pcast.attention(q, k, v, causal=True, causal_align=other, num_splits=7, p_normalize="partition",
                          block_n=16, split_layout="interleaved", scale=256.0, ksink=4, **EMU)
    assert torch.equal(a.out, b.out)  # Nq = Nk: the same mask


@pytest.mark.parametrize("options", [
    dict(scale_mode="exp2_offset", scale=448.0, order="reverse"),
    dict(rescale_threshold=8.0, scale=1.0),
    dict(fmt="bf16", scale=1.0),
    dict(fmt="fp16", rowsum="rounded", scale=1.0),
    dict(fmt="bf16", p_normalize="partition", scale=1.0),
])
def test_policy_options_with_splits(decode, options):
    q, k, v = decode[8.0]
    for ns, layout in ((2, "contiguous"), (7, "interleaved")):
        _three_way(q, k, v, num_splits=ns, split_layout=layout, block_n=16, ksink=4, **options)


def test_one_split_is_todays_call(decode):
    """num_splits=1 (online) is the single pass, bit for bit, on every diagnostic and the output."""
    q, k, v = decode[8.0]
    for kw in (dict(order="reverse", scale=256.0), dict(scale_mode="exp2_offset", scale=448.0)):
        a = pcast.attention(q, k, v, ksink=4, **kw, **EMU)
        b = pcast.attention(q, k, v, ksink=4, num_splits=1, split_layout="interleaved", **kw, **EMU)
        assert all(torch.equal(getattr(a, n), getattr(b, n)) for n in (*DIAGNOSTICS, "out", "lse"))


def test_split_blocks_deal_every_block_once():
    for nblk, ns in ((63, 7), (16, 64), (5, 3), (1, 1)):
        for layout in ("contiguous", "interleaved"):
            parts = split_blocks(nblk, ns, layout)
            assert len(parts) == ns and sorted(j for p in parts for j in p) == list(range(nblk))
    assert split_blocks(5, 3, "contiguous") == [[0, 1], [2, 3], [4]]
    assert split_blocks(5, 3, "interleaved") == [[0, 3], [1, 4], [2]]
    assert split_blocks(2, 4, "contiguous") == [[0], [1], [], []]


def test_merge_of_separate_calls():
    """Contiguous splits are calls on their own key ranges: merging those calls' outputs by their lse gives
    the split call's output (the user's audit route)."""
    q, k, v = _inputs(5, n=640, ksink=0, seed=7)
    full = pcast.attention(q, k, v, num_splits=3, block_n=64, scale=256.0, order="reverse", **EMU)
    bounds = [(0, 256), (256, 512), (512, 640)]  # c = ceil(10 / 3) = 4 blocks of 64
    parts = [pcast.attention(q, k[:, :, a:b], v[:, :, a:b], block_n=64, scale=256.0, order="reverse", **EMU)
             for a, b in bounds]
    rows = lambda t: t.reshape(-1, *t.shape[3:])  # noqa: E731
    out, lse = splits.merge([rows(p.lse) for p in parts], [rows(p.out) for p in parts])
    assert torch.equal(out, rows(full.out)) and torch.equal(lse, rows(full.lse))


def test_explain_rejects_a_count_off_by_one_and_a_perturbed_merge_weight(decode, monkeypatch):
    q, k, v = decode[8.0]
    kw = dict(num_splits=7, split_layout="interleaved", block_n=16, scale=256.0, ksink=4)
    a = pcast.attention(q, k, v, **kw, **EMU)
    for n in DIAGNOSTICS:
        b = pcast.attention(q, k, v, **kw, **EMU)
        getattr(b, n)[0, 0, 0] += 1
        rep = explain(a, b, q, k, v, **kw)
        assert not rep["explained"], n
    real = splits.merge
    monkeypatch.setattr(splits, "merge", lambda lses, outs, sig=None: real([lses[0] + 1e-3, *lses[1:]], outs, sig))
    b = pcast.attention(q, k, v, **kw, **EMU)
    rep = explain(a, b, q, k, v, **kw)
    assert not rep["explained"] and "outputs differ" in rep["why"]


def test_lse_of_the_reference_and_causal_decode_mask():
    q, k, v = _inputs(1, n=200, ksink=0, seed=9)
    r = pcast.attention(q, k, v, backend="reference", causal=True, causal_align="bottom_right")
    full = pcast.attention(q, k, v, backend="reference")
    assert torch.equal(r.out, full.out) and torch.equal(r.lse, full.lse)
    s = torch.matmul(q.double(), k.double().repeat_interleave(2, 1).transpose(-1, -2)) / math.sqrt(D)
    assert torch.allclose(full.lse, torch.logsumexp(s, -1), rtol=0, atol=1e-12)


@pytest.mark.parametrize("bad, word", [
    (dict(num_splits=0), "num_splits"), (dict(num_splits=2.0), "num_splits"), (dict(num_splits=True), "num_splits"),
    (dict(split_layout="strided"), "split_layout"), (dict(p_normalize="exact"), "p_normalize"),
    (dict(p_normalize="partition", rescale_threshold=4.0), "rescale_threshold"),
    (dict(p_normalize="partition", scale_mode="exp2_offset"), "scale_mode"),
    (dict(p_normalize="partition", rowsum="rounded"), "rowsum"),
    (dict(causal=True), "causal_align"), (dict(causal_align="middle"), "causal_align"),
    (dict(num_splits=2, fmt="nvfp4", block_n=16), "num_splits"),
    (dict(causal=True, causal_align="bottom_right", fmt="nvfp4", block_n=16, backend="triton"), "backend"),
])
def test_bad_decode_input_is_named(bad, word):
    q, k, v = _inputs(1, n=64, ksink=0)
    kw = {**EMU, **bad}
    with pytest.raises(ValueError, match=word) as e:
        pcast.attention(q, k, v, **kw)
    assert "\n" not in str(e.value)


def test_bottom_right_needs_nq_at_most_nk():
    q, k, v = _inputs(80, n=64, ksink=0)
    with pytest.raises(ValueError, match="causal_align='bottom_right'"):
        pcast.attention(q, k, v, causal=True, causal_align="bottom_right", **EMU)


@pytest.mark.parametrize("name, dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_half_formats_round_as_torch_casts(name, dtype):
    """pcast.quantize (integer route) and the emulator's route against torch's own 16-bit casts, subnormals
    and float32 subnormal inputs included, saturating at the format's max."""
    from pcast.formats import HALF_FORMATS
    from pcast.formats.rounding import quantize_fast

    g = torch.Generator().manual_seed(1)
    x = torch.randn(50000, generator=g) * torch.exp2(torch.randint(-150, 128, (50000,), generator=g).float())
    x = x[torch.isfinite(x)]
    f = HALF_FORMATS[name]
    want = x.clamp(-f.max_finite, f.max_finite).to(dtype).float()
    assert torch.equal(pcast.quantize(x, name), want)
    assert torch.equal(quantize_fast(x, f), want)
