"""The P-policy options of the Triton kernel (docs/interfaces.md, "P policies of deployed kernels").

``@triton.jit`` helpers that :mod:`pcast.triton.kernel` calls at its step markers (the
markers themselves stay in ``_attn_fwd_inner`` / ``_attn_fwd``), and the host-side operand
scales. Each helper takes its option as a constexpr; with the option off it emits none of the
option's operations, so a default call runs the plain contract.

* ``new_max``: the running-max rule, eager (``max(m, bm)``) or lazy (``rescale_threshold``).
* ``exp_block``: ``p = exp(s − m)`` or the exp2-offset ``x`` (``scale_mode``), and ``alpha``.
* ``init_state`` / ``sink_final``: a learned sink logit seeds ``(m, l)`` or joins ``l``
  after the last block (``sink_logit``, ``sink_mode``).
* ``split_range`` / ``partition_p``: the blocks of one split (``num_splits``, ``split_layout``) and
  partition-normalised P (``p_normalize="partition"``; docs/interfaces.md, "Decode-time attention").
* :func:`operand_scales`: the per-(batch, head) scales ``s_t``, computed on the host in float32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pcast.contract import LOG2E, SINK_MODES
from pcast.formats import FP8Format

__all__ = ["new_max", "exp_block", "init_state", "sink_final", "operand_scales", "SINK_MODE_CODE", "split_range",
           "partition_p"]

_LOG2E = tl.constexpr(LOG2E)  # pcast.contract.LOG2E, as a compile-time float32 constant
# The kernel's SINK_MODE constexpr: 0 = no sink logit, then 1 + the index in pcast.contract.SINK_MODES.
SINK_MODE_CODE = {None: 0, **{mode: i + 1 for i, mode in enumerate(SINK_MODES)}}
assert SINK_MODE_CODE["init"] == 1 and SINK_MODE_CODE["final"] == 2  # the kernel tests these numbers


@triton.jit
def new_max(m_i, bm, tau,
            LAZY: tl.constexpr,  # tau > 0: the max moves only when (bm - m)·LOG2E > tau
            ):
    """Step 2's running max: ``max(m, bm)``, or the lazy rule (``m == -inf`` or ``(bm - m)·LOG2E > tau``)."""
    if LAZY:
        move = (m_i == float("-inf")) | ((bm - m_i) * _LOG2E > tau)
        m_new = tl.where(move, bm, m_i)
    else:
        m_new = tl.maximum(m_i, bm)
    return m_new


@triton.jit
def exp_block(s, m_i, m_safe, log2s,
              EXP2_OFFSET: tl.constexpr,  # x = exp2(s·LOG2E - (m·LOG2E - log2 S)) instead of p = exp(s - m)
              ):
    """Step 2's exponentials: ``(p, alpha)`` (multiply) or ``(x, alpha)`` (exp2_offset), float32 in contract order."""
    if EXP2_OFFSET:
        p = tl.exp2(s * _LOG2E - (m_safe * _LOG2E - log2s)[:, None])
        alpha = tl.exp2(m_i * _LOG2E - m_safe * _LOG2E)
    else:
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
    return p, alpha


@triton.jit
def init_state(sink_ptr, log2s,
               BLOCK_M: tl.constexpr,  # query rows per program
               SINK_MODE: tl.constexpr,  # 0: no sink logit; 1: "init" seeds (m, l); 2: "final" (step 6)
               EXP2_OFFSET: tl.constexpr,  # the sink's own value is exp2(σ·LOG2E - (σ·LOG2E - log2 S)), not 1
               ):
    """The row state before the first block: ``(m, l) = (-inf, 0)``, or ``(σ, v_sink)`` for an init sink."""
    if SINK_MODE == 1:
        sig = tl.load(sink_ptr)
        m_i = tl.zeros([BLOCK_M], tl.float32) + sig
        if EXP2_OFFSET:
            l_i = tl.zeros([BLOCK_M], tl.float32) + tl.exp2(sig * _LOG2E - (sig * _LOG2E - log2s))
        else:
            l_i = tl.full([BLOCK_M], 1.0, tl.float32)
    else:
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
    return m_i, l_i


@triton.jit
def sink_final(l_i, m_i, sink_ptr, log2s,
               SINK_MODE: tl.constexpr,  # 2: "final" adds the sink to l with the final (possibly stale) max
               EXP2_OFFSET: tl.constexpr,  # add exp2(σ·LOG2E - (m·LOG2E - log2 S)) instead of exp(σ - m)
               ):
    """Step 6's sink term: ``l + exp(σ - m_safe)`` (or its exp2-offset form) for a final sink, else ``l``."""
    if SINK_MODE == 2:
        sig = tl.load(sink_ptr)
        m_safe = tl.where(m_i == float("-inf"), 0.0, m_i)
        if EXP2_OFFSET:
            l_i = l_i + tl.exp2(sig * _LOG2E - (m_safe * _LOG2E - log2s))
        else:
            l_i = l_i + tl.exp(sig - m_safe)
    return l_i


@triton.jit
def split_range(n_blocks, split,
                SPLITS: tl.constexpr,  # splits; 1: every block, in the kernel's original loop
                INTERLEAVED: tl.constexpr,  # block j in split j mod SPLITS (else contiguous ranges of cdiv(n, SPLITS))
                ):
    """``(n_iter, first block, stride)``: split ``split`` visits blocks ``first + i·stride``, i < n_iter."""
    if SPLITS == 1:
        n_iter = n_blocks
        blk0 = 0
        stride = 1
    elif INTERLEAVED:
        n_iter = tl.maximum(tl.cdiv(n_blocks - split, SPLITS), 0)
        blk0 = split
        stride = SPLITS
    else:
        c = tl.cdiv(n_blocks, SPLITS)
        blk0 = split * c
        n_iter = tl.maximum(tl.minimum(n_blocks - blk0, c), 0)
        stride = 1
    return n_iter, blk0, stride


@triton.jit
def partition_p(p, l_i,
                PARTITION: tl.constexpr,  # p / l_s (the split's exact sum; rows without keys: p itself, 0)
                ):
    """What step 3 casts before the scale: ``p``, or ``p / l_s`` (``tl.div_rn``: correctly rounded compiled too)."""
    if PARTITION:
        p = tl.div_rn(p, tl.where(l_i > 0.0, l_i, 1.0)[:, None])
    return p


# ============================================================================= host side


def _scale_of(t: torch.Tensor, fmt: FP8Format, scale) -> torch.Tensor:
    """float32 [B, H]: amax|t| per (batch, head) (``"tensor_global"``: over all of t) / max_finite in float32 (1 where
    amax is 0), or the float."""
    B, H = t.shape[:2]
    if scale == "mx_seq32":
        raise ValueError("v_scale='mx_seq32' is not allowed in the Triton kernel (one s_v per (batch, head)); "
                         "allowed: 'tensor', 'tensor_global' or a float")
    if isinstance(scale, str):  # "tensor" or "tensor_global", checked by pcast.attention
        amax = t.abs().amax(dim=(-2, -1))
        if scale == "tensor_global":  # one amax over the whole tensor, every (batch, head)'s
            amax = amax.amax().expand(B, H)
        s = amax / torch.tensor(fmt.max_finite, dtype=torch.float32, device=t.device)
        return torch.where(amax == 0, torch.ones_like(s), s)
    return torch.full((B, H), float(scale), dtype=torch.float32, device=t.device)


def operand_scales(q, k, v, *, qk_fmt: FP8Format | None, qk_scale, v_fmt: FP8Format | None,
                   v_scale) -> torch.Tensor:
    """float32 [B*H, 3]: the operand scales s_q, s_k, s_v of each (batch, head); 1 where no cast applies."""
    B, H = q.shape[:2]
    out = torch.ones(B * H, 3, dtype=torch.float32, device=q.device)
    if qk_fmt is not None:
        out[:, 0] = _scale_of(q, qk_fmt, qk_scale).reshape(-1)
        out[:, 1] = _scale_of(k, qk_fmt, qk_scale).reshape(-1)
    if v_fmt is not None:
        out[:, 2] = _scale_of(v, v_fmt, v_scale).reshape(-1)
    return out.contiguous()
