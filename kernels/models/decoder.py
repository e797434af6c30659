"""A decoder's attention inputs: Q and K after the rotary embedding, and V, from a causal LM.

A BERT encoder's Q, K, V are its projections' outputs (:func:`pcast.models.realmodel.capture`
hooks them). A decoder such as Llama rotates Q and K (RoPE) after the projections, so hooks on
``q_proj`` / ``k_proj`` would record the unrotated tensors, whose scores are not the model's.
:func:`capture` records instead what the attention function itself receives: transformers calls
every attention implementation as ``fn(module, query, key, value, attention_mask, scaling=...)``
with ``query`` and ``key`` already rotated (``apply_rotary_pos_emb`` runs in the attention
module's forward, before the call). The helper registers a recording attention function under
:data:`CAPTURE_NAME` that stores ``query``, ``key``, ``value`` per layer and then hands them to
the model's own implementation (eager, sdpa, ...) with the model's own mask, so the forward pass
and its output are unchanged.

Layout (grouped-query attention): ``layer{L}/q`` is [B, H, N, d]; ``layer{L}/k`` and
``layer{L}/v`` are [B, H_kv, N, d] at the model's own key/value head count. Query head ``h``
reads key/value head ``h // (H // H_kv)`` (transformers' ``repeat_kv``;
:func:`pcast.reference.expand_kv` and ``pcast-audit`` use the same mapping). The attention is
causal, top-left aligned (key ``j`` visible to query ``i`` iff ``j <= i``): audit the file with
``pcast-audit FILE --causal``. The score scale is the module's ``scaling`` (``1/sqrt(d)`` for
Llama), returned by :func:`metadata`.

Works for transformers models whose attention modules call the attention interface with a
``layer_idx`` attribute (Llama, Mistral, Qwen2, Gemma and their kin). Needs ``transformers``.
"""

from __future__ import annotations

import contextlib
import sys

import torch

from .realmodel import attention_swapped

__all__ = ["CAPTURE_NAME", "capture", "metadata"]

CAPTURE_NAME = "pcast_capture"  # the name the recording attention function is registered under


def _delegate(module, implementation: str):
    """The attention function the model would have called: its own eager one, or a registered one."""
    # lazy: transformers is not part of the slim install
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if implementation == "eager":
        fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
        if fn is None:
            raise TypeError(f"{type(module).__name__}'s module defines no eager_attention_forward; "
                            "load the model with attn_implementation='sdpa' instead")
        return fn
    return ALL_ATTENTION_FUNCTIONS[implementation]


@contextlib.contextmanager
def _recording(model, store: dict, dtype):
    # lazy: transformers is not part of the slim install
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    before = model.config._attn_implementation or "eager"
    if before == CAPTURE_NAME:
        raise RuntimeError("capture is already running on this model (nested capture)")
    if before not in ALL_MASK_ATTENTION_FUNCTIONS:
        raise ValueError(f"attn_implementation={before!r} has no mask function in transformers; "
                         "allowed: eager, sdpa, or another implementation with a registered mask")

    def record(module, query, key, value, attention_mask, *args, **kwargs):
        layer = getattr(module, "layer_idx", None)
        if layer is None:
            raise TypeError(f"{type(module).__name__} has no layer_idx; cannot name its layer")
        for name, t in (("q", query), ("k", key), ("v", value)):
            key_name = f"layer{layer}/{name}"
            if key_name in store:
                raise RuntimeError(f"{key_name} recorded twice in one forward pass")
            store[key_name] = t.detach().to(dtype).contiguous() if dtype is not None else t.detach().clone()
        return _delegate(module, before)(module, query, key, value, attention_mask, *args, **kwargs)

    with attention_swapped(model, CAPTURE_NAME, record):
        yield


@torch.no_grad()
def capture(model, input_ids: torch.Tensor, *, dtype: torch.dtype | None = torch.float32) -> dict[str, torch.Tensor]:
    """``layer{L}/q`` [B, H, N, d] and ``layer{L}/k``, ``layer{L}/v`` [B, H_kv, N, d] of every layer.

    Q and K after the rotary embedding, exactly as the model's attention receives them (see the
    module docstring for the GQA mapping and the causal alignment). ``input_ids``: [B, N] token
    ids of unpadded sequences (one forward pass, no cache). ``dtype``: the tensors' dtype
    (float32 by default; None keeps the model's own dtype).
    """
    if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2 or input_ids.dtype != torch.long:
        raise ValueError(f"input_ids must be a [B, N] torch.long tensor, got "
                         f"{getattr(input_ids, 'dtype', type(input_ids).__name__)} "
                         f"{tuple(getattr(input_ids, 'shape', ()))}")
    store: dict[str, torch.Tensor] = {}
    with _recording(model, store, dtype):
        model(input_ids=input_ids, use_cache=False)
    if not store:
        raise RuntimeError(f"{type(model).__name__} never called the attention interface; nothing captured")
    return dict(sorted(store.items(), key=lambda kv: (int(kv[0].split("/")[0][5:]), kv[0])))


def metadata(model) -> dict[str, str]:
    """safetensors metadata for a :func:`capture` file: the score scale, heads, kv heads, causal, model."""
    cfg = model.config
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    scales = {float(m.scaling) for m in model.modules() if hasattr(m, "scaling") and hasattr(m, "layer_idx")}
    if len(scales) > 1:
        raise ValueError(f"the attention modules use {len(scales)} different score scales {sorted(scales)}; "
                         "one file holds one sm_scale: capture and audit the layers separately")
    sm_scale = scales.pop() if scales else d ** -0.5
    return {"sm_scale": repr(sm_scale), "heads": str(heads), "kv_heads": str(kv), "head_dim": str(d),
            "causal": "top_left", "model": str(getattr(cfg, "_name_or_path", "") or cfg.model_type)}
