"""Diagnoses that never overclaim: a kernel the contract cannot describe (P scaled per KV block and row by
300 / that block row's max before the E4M3 cast, divided back after P·V: a dynamic scale whose target is not
the format's largest value) is "outside the model" for both assert_policy and the fingerprint, and no option is
named without its confidence; the same kernel at 448 is the contract's ``scale_mode="per_row"`` and is named so;
a kernel one option away from its declaration gets that option with its confidence."""

import re

import pytest
import torch
from own_kernels import make_kernel

from pcast.probes import assert_policy, fingerprint, small_probes

OUTSIDE = "outside the model: no option of the contract reproduces these rows (best distance"


def dynamic_per_block(q, k, v, sink_logit=None, target=300.0):
    """Reverse KV-block order (64 keys), float32 online softmax; each block's P times ``target`` / its row max
    (per block) cast to E4M3 by torch, the block's P·V divided back by that factor. Written here, not the
    package's."""
    q32, k32, v32 = (t.float() for t in (q, k, v))
    s = (q32 @ k32.transpose(-1, -2)) / q.shape[-1] ** 0.5
    m = torch.full(s.shape[:-1], float("-inf"))
    acc, rowsum = torch.zeros(*s.shape[:-1], v.shape[-1]), torch.zeros(s.shape[:-1])
    for j in reversed(range(0, s.shape[-1], 64)):
        sb = s[..., j:j + 64]
        m_new = torch.maximum(m, sb.amax(-1))
        alpha = torch.exp(m - m_new)
        p = torch.exp(sb - m_new[..., None])
        factor = target / p.amax(-1).clamp(min=1e-30)
        p8 = (p * factor[..., None]).clamp(max=448.0).to(torch.float8_e4m3fn).float()
        acc = acc * alpha[..., None] + (p8 @ v32[..., j:j + 64, :]) / factor[..., None]
        rowsum = rowsum * alpha + p.sum(-1)
        m = m_new
    return (acc / rowsum[..., None]).to(q.dtype)


def test_the_per_block_kernel_at_448_is_per_row_reverse():
    fp = fingerprint(lambda q, k, v, sink_logit=None: dynamic_per_block(q, k, v, target=448.0), d=64,
                     dtype=torch.bfloat16, small=True)
    assert fp.policy is None and not fp.outside, str(fp)
    assert (fp.params["scale_mode"].value, fp.params["scale_mode"].confidence) == ("per_row", 1.0), str(fp)
    assert fp.params["order"].value == "reverse", str(fp)


def test_the_dynamic_per_block_kernel_is_outside_the_model_for_assert_policy():
    with pytest.raises(AssertionError) as err:
        assert_policy(dynamic_per_block, "fa3", d=64, dtype=torch.bfloat16)
    text = str(err.value)
    assert OUTSIDE in text and "looks like" not in text
    line = next(ln for ln in text.splitlines() if OUTSIDE in ln)
    assert "=" not in line or "confidence 0: it does not pass either" in line, line


def test_the_dynamic_per_block_kernel_is_outside_the_model_for_the_fingerprint():
    fp = fingerprint(dynamic_per_block, d=64, dtype=torch.bfloat16)
    text = str(fp)
    assert fp.policy is None and fp.outside and OUTSIDE in text
    assert fp.explains == {} and "looks like" not in text
    # every option line carries its confidence (0: no value of its grid reproduces the rows)
    options = text.split("options:\n")[1].split("\ntolerance")[0].splitlines()
    assert options and all(re.search(r"confidence 0\.00 \(matching: none\)$", line) for line in options), options


def test_one_option_away_names_it_with_its_confidence():
    """A forward S = 1 kernel declared as forward S = 256 (block 64): the diagnosis names scale = 1 with its
    confidence, and nothing else."""
    fn = make_kernel(order="forward", scale=1.0, block_n=64)
    declared = {"order": "forward", "scale": 256.0, "block_n": 64}
    with pytest.raises(AssertionError) as err:
        assert_policy(fn, declared, d=64, dtype=torch.bfloat16, probes=small_probes())
    last = str(err.value).splitlines()[-1]
    assert re.fullmatch(r"the kernel looks like scale = 1 \(confidence 1\); declared 256", last), last
