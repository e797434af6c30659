"""FP8-P attention kernels written here as a kernel team writes its own, without the package's code: plain torch,
a blockwise loop over KV blocks with a running max, P cast to E4M3 by torch's own float8 dtype (saturating at 448
first, as cvt.satfinite), float32 arithmetic as on a GPU, any head dimension, bf16 or fp16 inputs widened to
float32, grouped-query heads. The tests fingerprint them and check that the instrument reads their options back.

``make_kernel(**options)`` returns ``fn(q, k, v, *, sink_logit=None) -> out [B, H, Nq, d]`` (float32):
order "forward"/"reverse"; scale S; how S is applied ("multiply": x = exp(s - m)·S; "exp2_offset":
x = exp2(s·log2e - (m·log2e - log2 S))); tau, the lazy rescale threshold in log2 units (0: eager); block_n;
sinks: "final" (a learned sink logit joins the row sum after the last block), "ignore" (the keyword is taken and
ignored) or "none" (the kernel has no such keyword: calling it with sink_logit raises TypeError).
"""

from __future__ import annotations

import math

import torch

LOG2E = torch.tensor(math.log2(math.e), dtype=torch.float32)  # log2(e) as the float32 a kernel multiplies by
E4M3_MAX = 448.0


def _e4m3(x: torch.Tensor) -> torch.Tensor:
    """x >= 0 rounded to E4M3 (RNE by torch's float8 conversion), saturating at 448."""
    return x.clamp(max=E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32)


def _attention(q, k, v, sink_logit, *, order, scale, scale_mode, tau, block_n):
    q, k, v = (t.to(torch.float32) for t in (q, k, v))
    B, H, Nq, d = q.shape
    group = H // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    Nk = k.shape[2]
    sm = torch.tensor(1.0 / math.sqrt(d), dtype=torch.float32)
    log2s = torch.tensor(math.log2(scale), dtype=torch.float32)
    exp2 = scale_mode == "exp2_offset"
    m = torch.full((B, H, Nq), -math.inf)
    l = torch.zeros(B, H, Nq)
    acc = torch.zeros(B, H, Nq, d)
    starts = list(range(0, Nk, block_n))
    for j0 in (reversed(starts) if order == "reverse" else starts):
        kb, vb = k[:, :, j0:j0 + block_n], v[:, :, j0:j0 + block_n]
        s = torch.einsum("bhqd,bhkd->bhqk", q.double(), kb.double()).to(torch.float32) * sm  # exact products
        bm = s.amax(-1)
        if tau > 0:  # lazy: the max moves only when the block's max exceeds it by more than tau (log2 units)
            m_new = torch.where((m == -math.inf) | ((bm - m) * LOG2E > tau), bm, m)
        else:
            m_new = torch.maximum(m, bm)
        if exp2:
            x = torch.exp2(s * LOG2E - (m_new * LOG2E - log2s)[..., None])
            u = x  # the row sum takes the unrounded x
            alpha = torch.exp2(m * LOG2E - m_new * LOG2E)
        else:
            u = torch.exp(s - m_new[..., None])  # the row sum takes the unrounded p
            x = u * scale
            alpha = torch.exp(m - m_new)
        alpha = torch.where(m == -math.inf, torch.zeros_like(alpha), alpha)
        pq = _e4m3(x)
        l = l * alpha + u.sum(-1)
        acc = acc * alpha[..., None] + torch.einsum("bhqk,bhkd->bhqd", pq.double(), vb.double()).to(torch.float32)
        m = m_new
    if sink_logit is not None:
        sig = sink_logit.to(torch.float32).expand(B, H)[..., None]
        l = l + (torch.exp2(sig * LOG2E - (m * LOG2E - log2s)) if exp2 else torch.exp(sig - m))
    return acc / (l if exp2 else l * scale)[..., None]


def make_kernel(*, order="forward", scale=1.0, scale_mode="multiply", tau=0.0, block_n=64, sinks="final"):
    opts = dict(order=order, scale=float(scale), scale_mode=scale_mode, tau=float(tau), block_n=int(block_n))
    if sinks == "none":
        def fn(q, k, v):
            return _attention(q, k, v, None, **opts)
    elif sinks == "ignore":
        def fn(q, k, v, *, sink_logit=None):
            return _attention(q, k, v, None, **opts)
    else:
        def fn(q, k, v, *, sink_logit=None):
            return _attention(q, k, v, sink_logit, **opts)
    return fn


# The kernels of the acceptance, each with the options the instrument must read back.
KERNELS = {
    # forward order, P = exp2(s·log2e - (m·log2e - 8)), lazy rescale tau = 8, 128-key blocks
    "forward-offset8-lazy8": (dict(order="forward", scale=256.0, scale_mode="exp2_offset", tau=8.0, block_n=128),
                              dict(order="forward", scale=256.0, rescale_threshold=8.0, block_n=128)),
    # reverse order, S = 256 by a multiply after exp, eager rescale, 128-key blocks
    "reverse-s256-multiply": (dict(order="reverse", scale=256.0, scale_mode="multiply", block_n=128),
                              dict(order="reverse", scale=256.0, rescale_threshold=0.0, block_n=128)),
    # FlashAttention-3's P path (reverse, exp2 offset 8, 160-key tiles) with no learned-sink keyword at all
    "fa3-no-sinks": (dict(order="reverse", scale=256.0, scale_mode="exp2_offset", block_n=160, sinks="none"),
                     dict(order="reverse", scale=256.0, block_n=160)),
    # 192-key tiles, forward, S = 1
    "forward-s1-tile192": (dict(order="forward", scale=1.0, scale_mode="multiply", block_n=192),
                           dict(order="forward", scale=1.0, block_n=192)),
    # FlashAttention-3's P path at S = 128 (offset 7): must never be labelled fa3
    "fa3-s128": (dict(order="reverse", scale=128.0, scale_mode="exp2_offset", block_n=160),
                 dict(order="reverse", scale=128.0, block_n=160)),
}
