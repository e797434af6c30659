"""The exact reference: float64 softmax attention, no blocking, no rounding."""

from __future__ import annotations

import math

import torch

__all__ = ["reference_attention", "reference_lse", "reference_mse", "reference_stack", "causal_mask", "expand_kv"]


def expand_kv(t: torch.Tensor, heads: int) -> torch.Tensor:
    """Grouped-query attention: key/value tensor ``t`` [B, H_kv, N, d] as [B, heads, N, d], query head
    h reading key/value head ``h // (heads / H_kv)``; ``t`` itself when H_kv == heads."""
    kv = t.shape[1]
    return t if kv == heads else t.repeat_interleave(heads // kv, dim=1)


def causal_mask(nq: int, nk: int, device=None, *, offset: int = 0) -> torch.Tensor:
    """Boolean [nq, nk] mask of visible keys: key ``j`` is visible to query ``i`` iff ``j <= i + offset``.
    ``offset=0`` is top-left aligned like torch SDPA's ``is_causal``; ``Nk - Nq`` is bottom-right
    (:func:`pcast.contract.causal_offset`)."""
    i = torch.arange(nq, device=device)[:, None]
    j = torch.arange(nk, device=device)[None, :]
    return j <= i + offset


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                        sm_scale: float | None = None, sink_logit: torch.Tensor | None = None,
                        causal_offset: int = 0) -> torch.Tensor:
    """softmax(q kᵀ · sm_scale) v computed in float64, with an optional learned sink logit.

    Args:
        q: [B, H, Nq, d] (any float dtype; promoted to float64).
        k: [B, H_kv, Nk, d], H_kv dividing H (grouped-query attention, :func:`expand_kv`).
        v: [B, H_kv, Nk, d].
        causal: causal mask (key j visible to query i iff j <= i + causal_offset; 0: top-left).
        sm_scale: score scale, default 1/sqrt(d).
        sink_logit: None, or [H] or [B, H]: a logit σ_h with no key and no value, so
            ``exp(σ_h - M)`` joins each row's softmax denominator (M the row's max).

    Returns:
        float64 tensor [B, H, Nq, d].

    Heads are computed a few at a time (at most :data:`HEAD_CHUNK_ELEMS` scores at once), each on its own, so
    the memory stays that of a few heads' scores; the values are those of one batched computation.
    """
    k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
    return _by_heads(q, k, sink_logit, v.shape[-1], lambda b, h, sig: _attend(
        q[b, h], k[b, h], v[b, h], causal, sm_scale, causal_offset, sig))


def _by_heads(q, k, sink_logit, width: int | None, fn):
    """``fn(b, h, sig)`` of each group of heads (b: a batch index as a slice of one, h: a slice of heads, sig
    the group's sink logits [1, h] or None) into a float64 [B, H, Nq, width] (None: [B, H, Nq])."""
    B, H, nq = q.shape[:3]
    sig = None if sink_logit is None else sink_logit.double().expand(B, H)
    step = max(1, HEAD_CHUNK_ELEMS // max(1, nq * k.shape[-2]))
    out = torch.empty((B, H, nq) + (() if width is None else (width,)), dtype=torch.float64, device=q.device)
    for b in range(B):
        for h0 in range(0, H, step):
            bs, hs = slice(b, b + 1), slice(h0, min(H, h0 + step))
            out[bs, hs] = fn(bs, hs, None if sig is None else sig[bs, hs])
    return out


#: The most float64 scores :func:`reference_attention` holds at once (its heads are computed in groups).
HEAD_CHUNK_ELEMS = 1 << 25


def _attend(q, k, v, causal, sm_scale, causal_offset, sig):
    """:func:`reference_attention` of heads [1, h, Nq, d] (k, v expanded to them), ``sig`` [1, h] or None."""
    s = _scores(q, k, causal, sm_scale, causal_offset)
    if sig is None:
        p = torch.softmax(s, dim=-1)
    else:
        # the sink as one more column of the softmax, dropped before P·V (it has no value vector)
        col = sig[..., None, None].expand(*s.shape[:-1], 1)
        p = torch.softmax(torch.cat([s, col], dim=-1), dim=-1)[..., :-1]
    return torch.matmul(p, v.double())


def _scores(q, k, causal, sm_scale, causal_offset):
    """float64 scores ``q·kᵀ·sm_scale``, masked keys -inf."""
    sm_scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    s = torch.matmul(q.double(), expand_kv(k, q.shape[1]).double().transpose(-1, -2)) * sm_scale
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], device=s.device, offset=causal_offset),
                          float("-inf"))
    return s


def reference_lse(q, k, *, causal=False, sm_scale=None, sink_logit=None, causal_offset: int = 0) -> torch.Tensor:
    """float64 [B, H, Nq]: each row's natural-log softmax normaliser ``logsumexp`` of its visible scores,
    with the sink logit as one more column (heads a few at a time, as :func:`reference_attention`)."""
    k = expand_kv(k, q.shape[1])

    def lse(b, h, sig):
        s = _scores(q[b, h], k[b, h], causal, sm_scale, causal_offset)
        if sig is not None:
            s = torch.cat([s, sig[..., None, None].expand(*s.shape[:-1], 1)], dim=-1)
        return torch.logsumexp(s, dim=-1)
    return _by_heads(q, k, sink_logit, None, lse)


def bits_of(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32) if t.dtype == torch.float32 else t.contiguous().view(torch.int64)


def _leading(a: torch.Tensor, b: torch.Tensor) -> int | None:
    """The number of leading rows (keys) in which [N, d] tensors ``a`` and ``b`` differ (0: equal)."""
    rows = (bits_of(a) != bits_of(b)).any(-1).nonzero()
    return 0 if rows.numel() == 0 else int(rows[-1]) + 1


def _exp_diff(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``exp(a - b)`` for float64 a <= b, without the rounding of ``a - b`` (0 where a is -inf).

    ``a - b`` rounds by up to half an ulp of the difference (about 1e-15 absolute at |a - b| = 16),
    and exp turns that into a relative error of the same size, common to every key it scales. Knuth's
    TwoSum gives the rounding error ``e`` exactly, so ``exp(a - b) = exp(d)·(1 + e)`` to float64."""
    d = a - b
    bp = d - a
    e = (a - (d - bp)) + (-b - bp)
    w = torch.exp(d)
    w = w + w * e
    return torch.where(torch.isneginf(a), torch.zeros_like(w), w)


def _match(g: int, anchors, qf, kf, vf) -> tuple[int, int] | None:
    """The first anchor whose queries equal item g's and whose keys and values equal g's from some key
    ``c`` < Nk on, with that ``c`` (at least 1), else None."""
    for a in anchors:
        if torch.equal(bits_of(qf[g]), bits_of(qf[a])):
            c = max([_leading(kf[g], kf[a])] + [_leading(v[g], v[a]) for v in vf])
            if c < kf.shape[1]:
                return a, max(c, 1)
    return None


def _tail_sums(q, k, values, sm_scale: float, vis):
    """An anchor's float64 partial sums over keys ``k`` [n, d] (the keys it shares): their max per row
    ``m_t``, ``Z_t = Σ exp(s - m_t)`` and ``A_t = Σ exp(s - m_t)·v`` per value tensor (``vis``: visible keys)."""
    s_t = torch.matmul(q.double(), k.double().t()) * sm_scale
    if vis is not None:
        s_t = s_t.masked_fill(~vis, float("-inf"))
    m_t = s_t.amax(-1, keepdim=True)
    e_t = torch.exp(s_t - torch.where(torch.isneginf(m_t), torch.zeros_like(m_t), m_t))
    return m_t, e_t.sum(-1, keepdim=True), [torch.matmul(e_t, v.double()) for v in values]


def reference_stack(q: torch.Tensor, k: torch.Tensor, values, *, causal: bool = False, sm_scale: float | None = None,
                    sink_logit: torch.Tensor | None = None) -> list[torch.Tensor]:
    """:func:`reference_attention` of q and k against each value tensor of ``values``, for a stack whose
    items share most of their keys (a Δ sweep: items differ only in their first keys, the sinks).

    Each (batch, head) item is matched against earlier "anchor" items: an item whose q equals an anchor's
    and whose keys and values equal the anchor's from key ``c`` on (c < Nk) reuses the anchor's float64
    partial sums over those keys, with their own max ``m_t``: ``Z_t = Σ_j exp(s_j - m_t)`` and
    ``A_t = Σ_j exp(s_j - m_t)·v_j`` (j >= c), and adds its own first ``c`` keys (and sink logit)::

        m = max(m_t, max_(j<c) s_j, σ);  out = (e^(m_t-m)·A_t + Σ_(j<c) e^(s_j-m)·v_j) / (e^(m_t-m)·Z_t + Σ_(j<c) e^(s_j-m) + e^(σ-m))

    All in float64: the same softmax in another order of operations (a few float64 ulps from
    :func:`reference_attention`, measured in tests/reference/test_reference_stack.py). Items without an anchor
    are computed in full. Shapes as :func:`reference_attention`; ``values``: a list or tuple of v
    tensors. Returns one float64 [B, H, Nq, d] tensor per value tensor.
    """
    B, H, Nq, d = q.shape
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(d)
    Nk = k.shape[-2]
    G = B * H
    qf = q.reshape(G, Nq, d)
    kf = expand_kv(k, H).reshape(G, Nk, d)
    vf = [expand_kv(v, H).reshape(G, Nk, -1) for v in values]
    sig = None if sink_logit is None else sink_logit.double().expand(B, H).reshape(G)
    vis = causal_mask(Nq, Nk, device=q.device) if causal else None
    outs = [torch.empty(G, Nq, v.shape[-1], dtype=torch.float64, device=q.device) for v in vf]
    anchors: dict[int, dict] = {}  # anchor item -> its keys from c on: {c: (m_t, Z_t, [A_t per value])}
    for g in range(G):
        match = _match(g, anchors, qf, kf, vf)
        if match is None:
            anchors[g] = {}
            sg = None if sig is None else sig[g:g + 1]
            for out, v in zip(outs, vf):
                out[g] = reference_attention(qf[g][None, None], kf[g][None, None], v[g][None, None], causal=causal,
                                             sm_scale=sm_scale, sink_logit=None if sg is None else sg[None])[0, 0]
            continue
        a, c = match
        if c not in anchors[a]:
            anchors[a][c] = _tail_sums(qf[a], kf[a, c:], [v[a, c:] for v in vf], sm_scale,
                                       None if vis is None else vis[:, c:])
        m_t, z_t, a_t = anchors[a][c]
        s_h = torch.matmul(qf[g].double(), kf[g, :c].double().t()) * sm_scale
        if vis is not None:
            s_h = s_h.masked_fill(~vis[:, :c], float("-inf"))
        m = torch.maximum(m_t, s_h.amax(-1, keepdim=True))
        if sig is not None:
            m = torch.maximum(m, sig[g].expand_as(m))
        w_t = _exp_diff(m_t, m)
        e_h = torch.exp(s_h - m)
        den = w_t * z_t + e_h.sum(-1, keepdim=True)
        if sig is not None:
            den = den + torch.exp(sig[g] - m)
        for out, v, at in zip(outs, vf, a_t):
            out[g] = (w_t * at + torch.matmul(e_h, v[g, :c].double())) / den
    return [out.view(B, H, Nq, -1) for out in outs]


def reference_mse(out: torch.Tensor, q, k, v, *, causal: bool = False, sm_scale: float | None = None,
                  sink_logit: torch.Tensor | None = None, causal_offset: int = 0) -> tuple[float, torch.Tensor]:
    """``(mse, mse_heads)`` of ``out`` [B, H, Nq, d] against :func:`reference_attention` of the same call:
    the mean squared error over everything, and float64 [B, H] per (batch, head)."""
    ref = reference_attention(q, k, v, causal=causal, sm_scale=sm_scale, sink_logit=sink_logit,
                              causal_offset=causal_offset)
    err = (out.double() - ref.to(out.device)) ** 2
    return float(err.mean()), err.mean(dim=(-2, -1))
