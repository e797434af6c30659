"""The result of one attention call: the output, the per-row diagnostics and what ran."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["AttentionResult"]


@dataclass
class AttentionResult:
    """Output and per-row diagnostics of one attention call.

    A key's unrounded value is p (``scale_mode="multiply"``) or x (``"exp2_offset"``); x is p·S or
    the exp2_offset x. A learned sink logit is not a key and is never counted.

    Attributes:
        out: float32 [B, H, Nq, d] (float64 for the reference backend).
        underflow: int64 [B, H, Nq]: unmasked non-sink keys (position >= ksink) with unrounded value > 0
            but p_q == 0.
        underflow_sink: int64 [B, H, Nq]: the same for sink keys.
        saturated: int64 [B, H, Nq]: unmasked entries with x above the format's max finite value.
        terms: int64 [B, H, Nq]: unmasked non-sink keys with unrounded value > 0.
        terms_sink: int64 [B, H, Nq]: unmasked sink keys with unrounded value > 0.
        underflow_scale: int64 [B, H, Nq]: the non-sink underflows whose group scale flushed to 0
            (microscaled ``fmt`` only; 0 otherwise).
        groups_flushed: int64 [B, H, Nq]: groups with a key's x > 0 whose scale flushed to 0 (idem).
        backend: what actually ran: "triton-compiled", "triton-interpreted", "emulator" or "reference".
        mse: with ``reference=True``, the mean squared error of ``out`` against the float64 reference of
            the same call (:func:`pcast.reference.reference_attention`, the same mask, sm_scale and sink
            logit); None otherwise.
        mse_heads: with ``reference=True``, float64 [B, H]: the same per (batch, head); None otherwise.
        lse: float32 [B, H, Nq] (float64 for the reference): each row's natural-log softmax normaliser,
            the sink logit included; None where the backend does not produce it.
        input_dtype: the dtype of the q, k, v the caller passed (float32, bfloat16 or float16; every backend
            computes from them widened to float32).
    """

    out: torch.Tensor
    underflow: torch.Tensor
    underflow_sink: torch.Tensor
    saturated: torch.Tensor
    terms: torch.Tensor
    terms_sink: torch.Tensor
    backend: str
    underflow_scale: torch.Tensor | None = None
    groups_flushed: torch.Tensor | None = None
    mse: float | None = None
    mse_heads: torch.Tensor | None = None
    lse: torch.Tensor | None = None
    input_dtype: torch.dtype = torch.float32

    def __post_init__(self):  # a result built without the microscaling diagnostics: zeros
        for name in ("underflow_scale", "groups_flushed"):
            if getattr(self, name) is None:
                setattr(self, name, torch.zeros_like(self.underflow))
