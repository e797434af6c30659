"""A decoder's capture: Q, K after the rotary embedding, and V, from a tiny random Llama.

Independent oracle: the attention module's own output before ``o_proj`` (a forward pre-hook on
``o_proj``, which the capture does not touch), against softmax attention recomputed here in
float64 from the captured tensors with an explicit causal mask and an explicit GQA expansion.
No weights are downloaded: the model is built from a config with a fixed seed.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
from pcast.models import decoder  # noqa: E402

HEADS, KV_HEADS, LAYERS, HIDDEN = 4, 2, 2, 64
D = HIDDEN // HEADS


@pytest.fixture(scope="module")
def llama():
    cfg = transformers.LlamaConfig(hidden_size=HIDDEN, intermediate_size=128, num_attention_heads=HEADS,
                                   num_key_value_heads=KV_HEADS, num_hidden_layers=LAYERS, vocab_size=100,
                                   max_position_embeddings=128, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to(torch.float32).eval()
    ids = torch.randint(0, 100, (2, 24), generator=torch.Generator().manual_seed(1))
    return model, ids


def _module_outputs(model, ids):
    """Each layer's attention output before o_proj, [B, H, N, d], and the projections' raw q."""
    seen, handles = {}, []
    for i, layer in enumerate(model.model.layers):
        att = layer.self_attn

        def pre(_m, args, i=i):
            b, n, _ = args[0].shape
            seen[f"out{i}"] = args[0].detach().view(b, n, HEADS, D).transpose(1, 2)

        def q_hook(_m, _args, y, i=i):
            b, n, _ = y.shape
            seen[f"rawq{i}"] = y.detach().view(b, n, HEADS, D).transpose(1, 2)

        handles += [att.o_proj.register_forward_pre_hook(pre), att.q_proj.register_forward_hook(q_hook)]
    try:
        with torch.no_grad():
            logits = model(input_ids=ids, use_cache=False).logits
    finally:
        for h in handles:
            h.remove()
    return seen, logits


def _recompute(q, k, v):
    """Causal softmax(q kᵀ / sqrt(d)) v in float64; query head h reads kv head h // (H / H_kv)."""
    group = q.shape[1] // k.shape[1]
    k, v = (t.double().repeat_interleave(group, dim=1) for t in (k, v))
    n = q.shape[-2]
    s = q.double() @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def test_capture_recomputes_the_modules_attention(llama):
    model, ids = llama
    seen, logits = _module_outputs(model, ids)
    cap = decoder.capture(model, ids)
    assert list(cap) == [f"layer{i}/{t}" for i in range(LAYERS) for t in ("k", "q", "v")]
    for i in range(LAYERS):
        q, k, v = cap[f"layer{i}/q"], cap[f"layer{i}/k"], cap[f"layer{i}/v"]
        assert q.shape == (2, HEADS, 24, D) and k.shape == v.shape == (2, KV_HEADS, 24, D)
        assert q.dtype == torch.float32
        err = (_recompute(q, k, v) - seen[f"out{i}"].double()).abs().max().item()
        assert err < 1e-5, f"layer {i}: recomputed attention differs by {err:.3g}"
        # post-RoPE: the captured q is not the projection's output (position 0 is unrotated)
        assert torch.equal(q[:, :, 0], seen[f"rawq{i}"][:, :, 0])
        assert (q[:, :, 1:] - seen[f"rawq{i}"][:, :, 1:]).abs().max() > 1e-3
    # the forward pass under capture is the model's own: same logits, implementation restored
    _, again = _module_outputs(model, ids)
    assert torch.equal(logits, again)
    assert model.config._attn_implementation == "eager"


def test_unrotated_or_noncausal_recompute_fails(llama):
    """The oracle can fail: unrotated q, k, or no causal mask, miss the module's output."""
    model, ids = llama
    seen, _ = _module_outputs(model, ids)
    cap = decoder.capture(model, ids)
    q, k, v = cap["layer1/q"], cap["layer1/k"], cap["layer1/v"]
    ref = seen["out1"].double()
    full = torch.softmax(q.double() @ k.double().repeat_interleave(2, 1).transpose(-1, -2) / math.sqrt(D), -1)
    assert (full @ v.double().repeat_interleave(2, 1) - ref).abs().max() > 1e-3
    assert (_recompute(seen["rawq1"], k, v) - ref).abs().max() > 1e-3


def test_metadata_and_bad_input(llama):
    model, ids = llama
    meta = decoder.metadata(model)
    assert float(meta["sm_scale"]) == D ** -0.5
    assert (meta["heads"], meta["kv_heads"], meta["head_dim"], meta["causal"]) == ("4", "2", "16", "top_left")
    with pytest.raises(ValueError, match="input_ids"):
        decoder.capture(model, ids.float())
    assert model.config._attn_implementation == "eager"
