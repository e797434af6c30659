"""The exact reference: float64 softmax attention, no blocking, no rounding."""

from __future__ import annotations

import math

import torch

__all__ = ["reference_attention", "causal_mask", "expand_kv"]


def expand_kv(t: torch.Tensor, heads: int) -> torch.Tensor:
    """Grouped-query attention: key/value tensor ``t`` [B, H_kv, N, d] as [B, heads, N, d], query head
    h reading key/value head ``h // (heads / H_kv)``; ``t`` itself when H_kv == heads."""
    kv = t.shape[1]
    return t if kv == heads else t.repeat_interleave(heads // kv, dim=1)


def causal_mask(nq: int, nk: int, device=None) -> torch.Tensor:
    """Boolean [nq, nk] mask of visible keys, top-left aligned like torch SDPA's ``is_causal``:
    key ``j`` is visible to query ``i`` iff ``j <= i``."""
    i = torch.arange(nq, device=device)[:, None]
    j = torch.arange(nk, device=device)[None, :]
    return j <= i


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                        sm_scale: float | None = None, sink_logit: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q kᵀ · sm_scale) v computed in float64, with an optional learned sink logit.

    Args:
        q: [B, H, Nq, d] (any float dtype; promoted to float64).
        k: [B, H_kv, Nk, d], H_kv dividing H (grouped-query attention, :func:`expand_kv`).
        v: [B, H_kv, Nk, d].
        causal: top-left aligned causal mask (key j visible to query i iff j <= i).
        sm_scale: score scale, default 1/sqrt(d).
        sink_logit: None, or [H] or [B, H]: a logit σ_h with no key and no value, so
            ``exp(σ_h - M)`` joins each row's softmax denominator (M the row's max).

    Returns:
        float64 tensor [B, H, Nq, d].
    """
    d = q.shape[-1]
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(d)
    q64, k64, v64 = q.double(), expand_kv(k, q.shape[1]).double(), expand_kv(v, q.shape[1]).double()
    s = torch.matmul(q64, k64.transpose(-1, -2)) * sm_scale
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], device=s.device), float("-inf"))
    if sink_logit is None:
        p = torch.softmax(s, dim=-1)
    else:
        # the sink as one more column of the softmax, dropped before P·V (it has no value vector)
        sig = sink_logit.double().expand(q.shape[:2])[..., None, None].expand(*s.shape[:-1], 1)
        p = torch.softmax(torch.cat([s, sig], dim=-1), dim=-1)[..., :-1]
    return torch.matmul(p, v64)
