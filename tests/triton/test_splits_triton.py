"""The Triton kernel's split-KV decode (kernels/triton/splits.py) against the emulator, interpreted on CPU:
identical diagnostics up to explained rounding, outputs and lse within pcast.conformance's bounds.

A small covering set (the interpreter is slow): both layouts and orders, both normalisations, more splits
than blocks, both sink modes, exp2_offset, lazy rescaling, bf16 P, bottom-right decode and a causal Nq = Nk
call, grouped-query heads and d = 80.
"""

import pytest
import torch

import pcast
from pcast.conformance import explain

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _inputs(nq, nk, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, nq, 80, generator=g)
    k = torch.randn(1, 1, nk, 80, generator=g) * 1.5
    v = torch.randn(1, 1, nk, 80, generator=g)
    k[0, :, :4] += 3.0 * q[0, 0, -1] / q[0, 0, -1].norm()  # four sink keys above the rest
    return q, k, v


SIG = torch.full((2,), 5.0)
CASES = {
    "contiguous-forward-more-splits-than-blocks": dict(num_splits=16, scale=256.0),  # 13 blocks
    "interleaved-reverse-partition": dict(num_splits=3, split_layout="interleaved", order="reverse",
                                          p_normalize="partition"),
    "decode-bottom-right-exp2-final-sink": dict(num_splits=1, causal=True, causal_align="bottom_right",
                                                scale_mode="exp2_offset", scale=448.0, sink_logit=SIG),
    "init-sink-lazy": dict(num_splits=7, sink_logit=SIG, sink_mode="init", rescale_threshold=8.0, scale=256.0),
    "bf16-bottom-right-partition-init": dict(num_splits=2, causal=True, causal_align="bottom_right", fmt="bf16",
                                             p_normalize="partition", sink_logit=SIG, sink_mode="init"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_split_kernel_agrees_with_the_emulator(case):
    kw = dict(CASES[case], block_n=16, ksink=4)
    q, k, v = _inputs(1, 200)
    a = pcast.attention(q, k, v, backend="triton", block_m=16, **kw)
    assert a.backend == "triton-interpreted" and a.lse is not None
    b = pcast.attention(q, k, v, backend="emulator", **kw)
    rep = explain(a, b, q, k, v, **kw)
    assert rep["explained"], rep["why"]
    assert int(a.terms.sum() + a.terms_sink.sum()) > 0


def test_split_kernel_causal_square():
    """Nq = Nk causal (top-left), interleaved splits over several row blocks."""
    q, k, v = _inputs(40, 40, seed=1)
    kw = dict(num_splits=3, split_layout="interleaved", causal=True, block_n=16, ksink=4, scale=256.0)
    a = pcast.attention(q, k, v, backend="triton", block_m=16, **kw)
    b = pcast.attention(q, k, v, backend="emulator", **kw)
    rep = explain(a, b, q, k, v, **kw)
    assert rep["explained"], rep["why"]


def test_triton_rounds_half_formats_like_kernels_quantize():
    from pcast.formats import HALF_FORMATS
    from pcast.triton.kernel import triton_quantize

    g = torch.Generator().manual_seed(2)
    x = torch.randn(4096, generator=g) * torch.exp2(torch.randint(-150, 128, (4096,), generator=g).float())
    x = x[torch.isfinite(x)]
    for name, f in HALF_FORMATS.items():
        assert torch.equal(triton_quantize(x, f), pcast.quantize(x, name)), name


@pytest.mark.parametrize("fmt,scale_mode", [("nvfp4", "multiply"), ("mxfp4", "multiply"), ("nvfp4", "per_row")])
def test_split_path_refuses_fp4_p_before_any_work(fmt, scale_mode, monkeypatch):
    """The split launcher names the argument and what is allowed, and launches nothing."""
    from pcast.formats.microscaling import get_mx_format
    from pcast.triton import splits

    def no_launch(*a, **kw):
        raise AssertionError("a kernel was launched")

    monkeypatch.setattr(splits, "_launch", no_launch)
    q, k, v = _inputs(1, 64)
    with pytest.raises(ValueError, match=rf"^fmt='{fmt}' with scale_mode='{scale_mode}' is not allowed in the "
                                         r"Triton split path; allowed: .*FP8") as e:
        splits.triton_split_attention(q, k, v, reverse=False, scale=1.0, fmt=get_mx_format(fmt), causal=False,
                                      ksink=4, block_m=16, block_n=16, sm_scale=0.1, rowsum_rounded=False,
                                      scale_mode=scale_mode, num_splits=2)
    assert "\n" not in str(e.value)
