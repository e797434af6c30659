"""The package's front door: public names listed, and the MSE against the float64 reference in one call."""

import pytest
import torch

import pcast
from pcast.models.sinks import make_inputs


def test_dir_and_all_list_the_lazy_public_names():
    for name in ("attention", "attention_calls", "attention_values", "quantize", "AttentionResult",
                 "reference_attention", "Policy", "POLICIES"):
        assert name in pcast.__all__ and name in dir(pcast)
    for name in pcast.__all__:  # every listed name resolves
        assert getattr(pcast, name) is not None


@pytest.mark.parametrize("kw", [dict(order="forward", scale=1.0), dict(policy="fa3", causal=True),
                                dict(policy="vllm-unified-1c98a49", sink_logit=torch.full((2,), 6.0))])
def test_reference_true_gives_the_mse_of_a_separate_reference_call(kw):
    q, k, v = make_inputs(3, heads=2, n=128, d=32, ksink=1, delta=8.0, sink_v_scale=0.0)
    r = pcast.attention(q, k, v, ksink=1, backend="emulator", reference=True, **kw)
    sink = kw.get("sink_logit")
    ref = pcast.reference_attention(q, k, v, causal=kw.get("causal", False),
                                      sink_logit=None if sink is None else sink.expand(1, 2).contiguous())
    per_head = ((r.out.double() - ref) ** 2).mean(dim=(-2, -1))
    assert r.mse_heads.shape == (1, 2) and torch.equal(r.mse_heads, per_head)
    assert r.mse == float(((r.out.double() - ref) ** 2).mean()) and r.mse > 0
    plain = pcast.attention(q, k, v, ksink=1, backend="emulator", **kw)
    assert plain.mse is None and plain.mse_heads is None and torch.equal(plain.out, r.out)


def test_reference_must_be_a_bool_and_is_not_a_multi_call_keyword():
    q, k, v = make_inputs(3, n=64, d=32)
    with pytest.raises(ValueError, match="reference=1 is not allowed; allowed: True or False"):
        pcast.attention(q, k, v, reference=1)
    with pytest.raises(ValueError, match=r"reference=True is not allowed; allowed: False"):
        pcast.attention_calls(q, k, [v], [{}], reference=True)
