"""Split-KV decode in Triton (docs/interfaces.md, "Decode-time attention"): one program per (row block,
batch-head, split) runs the kernel's own steps 1-5 (:func:`pcast.triton.kernel._attn_fwd_inner`, over the
split's blocks: ``SPLITS``, ``INTERLEAVED``, ``PARTITION``) and writes its O_s and lse_s; a second kernel
merges them by their log-sum-exp in float32 (FlashAttention-3's combine). Partition normalisation first
takes each split's exact max and sum (:func:`_partition_stats`). One online split (only a bottom-right causal
mask comes here with it) normalises as the single pass does and skips the merge.

The single pass (:func:`pcast.triton.kernel._attn_fwd`) is untouched: its specialisations compile as
they did, with ``SPLITS=1`` inside.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from pcast.contract import DIAGNOSTICS, log2_scale
from pcast.formats import get_format
from pcast.formats.microscaling import is_mx
from pcast.triton.kernel import (_attn_fwd_inner, _launch, _load_operand, _store_diagnostics, launch_operands,
                                   tile_n, triton_cdiv)
from pcast.triton.policy import SINK_MODE_CODE, init_state, operand_scales, sink_final, split_range

__all__ = ["triton_split_attention"]


@triton.jit
def _split_scores(q, k_base, stride_kn, offs_m, offs_d, N_K, sm_scale, blk, causal_off, scale_ptr,
                  BLOCK_N: tl.constexpr, TILE_N: tl.constexpr, CAUSAL: tl.constexpr, QK_QUANT: tl.constexpr,
                  QK_MAN_BITS: tl.constexpr, QK_EMIN: tl.constexpr, QK_MAX_FINITE: tl.constexpr):
    """The scores of KV block ``blk``, masked keys -inf: the kernel's step 1, for the partition's first pass."""
    lane = tl.arange(0, TILE_N)
    offs_n = blk * BLOCK_N + lane
    key_ok = (lane < BLOCK_N) & (offs_n < N_K)
    kT = _load_operand(k_base + offs_n[None, :] * stride_kn + offs_d[:, None], key_ok[None, :], scale_ptr + 1,
                       QK_QUANT, QK_MAN_BITS, QK_EMIN, QK_MAX_FINITE)
    s = tl.dot(q, kT, input_precision="ieee") * sm_scale
    visible = key_ok[None, :]
    if CAUSAL:
        visible = visible & (offs_n[None, :] <= offs_m[:, None] + causal_off)
    return tl.where(visible, s, float("-inf"))


@triton.jit
def _partition_stats(q, k_base, stride_kn, offs_m, offs_d, N_K, sm_scale, split, causal_off, scale_ptr, m_i,
                     BLOCK_N: tl.constexpr, TILE_N: tl.constexpr, CAUSAL: tl.constexpr, QK_QUANT: tl.constexpr,
                     QK_MAN_BITS: tl.constexpr, QK_EMIN: tl.constexpr, QK_MAX_FINITE: tl.constexpr,
                     SPLITS: tl.constexpr, INTERLEAVED: tl.constexpr):
    """The split's exact row max (from ``m_i``: an init sink's σ or -inf) and ``Σ exp(s - m)`` (+ the seed's)."""
    n_iter, blk0, stride = split_range(tl.cdiv(N_K, BLOCK_N), split, SPLITS, INTERLEAVED)
    m = m_i
    for i in range(0, n_iter):
        s = _split_scores(q, k_base, stride_kn, offs_m, offs_d, N_K, sm_scale, blk0 + i * stride, causal_off,
                          scale_ptr, BLOCK_N, TILE_N, CAUSAL, QK_QUANT, QK_MAN_BITS, QK_EMIN, QK_MAX_FINITE)
        m = tl.maximum(m, tl.max(s, 1))
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    l_i = tl.exp(m_i - m_safe)  # the seed's term (0 without one)
    for i in range(0, n_iter):
        s = _split_scores(q, k_base, stride_kn, offs_m, offs_d, N_K, sm_scale, blk0 + i * stride, causal_off,
                          scale_ptr, BLOCK_N, TILE_N, CAUSAL, QK_QUANT, QK_MAN_BITS, QK_EMIN, QK_MAX_FINITE)
        l_i += tl.sum(tl.exp(s - m_safe[:, None]), 1)
    return m, l_i


@triton.jit
def _attn_fwd_split(Q, K, V, Part, Lse, Diag, Sink, OpScale,
                    stride_qz, stride_qh, stride_qm, stride_kz, stride_kh, stride_kn, stride_vz, stride_vh, stride_vn,
                    H, N_Q, N_K, sm_scale, p_scale, KSINK, tau, log2s, lse_off, causal_off,
                    HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TILE_N: tl.constexpr,
                    REVERSE: tl.constexpr,
                    CAUSAL: tl.constexpr, QUANT: tl.constexpr, MAN_BITS: tl.constexpr, EMIN: tl.constexpr,
                    MAX_FINITE: tl.constexpr, ROWSUM_ROUNDED: tl.constexpr, EXP2_OFFSET: tl.constexpr,
                    LAZY: tl.constexpr, SINK_MODE: tl.constexpr, QK_QUANT: tl.constexpr, QK_MAN_BITS: tl.constexpr,
                    QK_EMIN: tl.constexpr, QK_MAX_FINITE: tl.constexpr, V_QUANT: tl.constexpr,
                    V_MAN_BITS: tl.constexpr, V_EMIN: tl.constexpr, V_MAX_FINITE: tl.constexpr,
                    SPLITS: tl.constexpr, INTERLEAVED: tl.constexpr, PARTITION: tl.constexpr):
    """One split of BLOCK_M rows of one (batch, head): O_s into Part [SPLITS, B*H, N_Q, HEAD_D], lse_s into
    Lse [SPLITS, B*H, N_Q], its diagnostics into Diag [SPLITS, 7, B*H, N_Q] (int32)."""
    pid_m, pid_bh, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    z, h = pid_bh // H, pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    row_ok = offs_m < N_Q
    scale_ptr = OpScale + 3 * pid_bh
    q = _load_operand(Q + z * stride_qz + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :],
                      row_ok[:, None], scale_ptr, QK_QUANT, QK_MAN_BITS, QK_EMIN, QK_MAX_FINITE)
    m_i, l_i = init_state(Sink + pid_bh, log2s, BLOCK_M, SINK_MODE, EXP2_OFFSET)
    if SINK_MODE == 1:  # an init sink seeds split 0 only
        m_i = tl.where(split == 0, m_i, float("-inf"))
        l_i = tl.where(split == 0, l_i, 0.0)
    k_base = K + z * stride_kz + h * stride_kh
    if PARTITION:
        m_i, l_i = _partition_stats(q, k_base, stride_kn, offs_m, offs_d, N_K, sm_scale, split, causal_off,
                                    scale_ptr, m_i, BLOCK_N, TILE_N, CAUSAL, QK_QUANT, QK_MAN_BITS, QK_EMIN, QK_MAX_FINITE,
                                    SPLITS, INTERLEAVED)
    zero = tl.zeros([BLOCK_M], tl.int32)
    (acc, l_i, m_i, n_underflow, n_underflow_sink, n_saturated, n_terms, n_terms_sink, n_underflow_scale,
     n_groups_flushed) = _attn_fwd_inner(
        tl.zeros([BLOCK_M, HEAD_D], tl.float32), l_i, m_i, zero, zero, zero, zero, zero, zero, zero, q,
        k_base, V + z * stride_vz + h * stride_vh, stride_kn, stride_vn,
        offs_m, offs_d, N_K, sm_scale, p_scale, KSINK, tau, log2s, scale_ptr,
        HEAD_D, BLOCK_N, TILE_N, REVERSE, CAUSAL, QUANT, MAN_BITS, EMIN, MAX_FINITE, ROWSUM_ROUNDED, EXP2_OFFSET, LAZY,
        QK_QUANT, QK_MAN_BITS, QK_EMIN, QK_MAX_FINITE, V_QUANT, V_MAN_BITS, V_EMIN, V_MAX_FINITE, 0, 1, False,
        split, causal_off, SPLITS, INTERLEAVED, PARTITION)
    m_safe = tl.where(m_i == float("-inf"), 0.0, m_i)
    if PARTITION:
        o = acc / p_scale
        lse = m_safe + tl.log(l_i)
    else:
        if SPLITS == 1:  # one online split: the single pass's normalisation (a final sink joins l here)
            l_i = sink_final(l_i, m_i, Sink + pid_bh, log2s, SINK_MODE, EXP2_OFFSET)
        o = acc / l_i[:, None] if EXP2_OFFSET else acc / (l_i * p_scale)[:, None]
        lse = m_safe + tl.log(l_i) - lse_off
    rows = (split * tl.num_programs(1) + pid_bh) * N_Q + offs_m
    tl.store(Part + rows[:, None] * HEAD_D + offs_d[None, :], o, mask=row_ok[:, None])
    tl.store(Lse + rows, lse, mask=row_ok)
    _store_diagnostics(Diag + split * 7 * tl.num_programs(1) * N_Q, pid_bh, N_Q, offs_m, row_ok, n_underflow,
                       n_underflow_sink, n_saturated, n_terms, n_terms_sink, n_underflow_scale, n_groups_flushed)


@triton.jit
def _combine(Part, Lse, Out, LseOut, Sink, N_Q, BH,
             HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, SPLITS: tl.constexpr, SINK_FINAL: tl.constexpr):
    """The merge: M = max lse_s; w_s = exp(lse_s - M), summed in split order; a final sink joins the
    denominator once; out = Σ w_s·O_s / Σ w_s, lse = M + ln Σ w_s (float32)."""
    pid_m, pid_bh = tl.program_id(0), tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    row_ok = offs_m < N_Q
    big = tl.full([BLOCK_M], float("-inf"), tl.float32)
    for s in range(0, SPLITS):
        big = tl.maximum(big, tl.load(Lse + (s * BH + pid_bh) * N_Q + offs_m, mask=row_ok, other=0.0))
    den = tl.zeros([BLOCK_M], tl.float32)
    num = tl.zeros([BLOCK_M, HEAD_D], tl.float32)
    for s in range(0, SPLITS):
        rows = (s * BH + pid_bh) * N_Q + offs_m
        lse_s = tl.load(Lse + rows, mask=row_ok, other=0.0)
        o_s = tl.load(Part + rows[:, None] * HEAD_D + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        w = tl.exp(lse_s - big)
        den = den + w
        num = num + w[:, None] * tl.where((lse_s == float("-inf"))[:, None], 0.0, o_s)
    if SINK_FINAL:
        den = den + tl.exp(tl.load(Sink + pid_bh) - big)
    out_rows = pid_bh * N_Q + offs_m
    tl.store(Out + out_rows[:, None] * HEAD_D + offs_d[None, :], num / den[:, None], mask=row_ok[:, None])
    tl.store(LseOut + out_rows, big + tl.log(den), mask=row_ok)


def triton_split_attention(q, k, v, *, reverse, scale, fmt, causal, ksink, block_m, block_n, sm_scale,
                           rowsum_rounded, scale_mode="multiply", rescale_threshold=0.0, sink_logit=None,
                           sink_mode="final", qk_fmt=None, qk_scale="tensor", v_fmt=None, v_scale="tensor",
                           num_splits=1, split_layout="contiguous", p_normalize="online", causal_offset=0):
    """:func:`pcast.triton.kernel.triton_attention` with splits, partition P or a causal offset (FP8, bf16,
    fp16 or no P cast). Returns ``(out [B,H,Nq,d], diag dict of int64 [B,H,Nq] plus float32 lse)``.

    Microscaled FP4 P (nvfp4, mxfp4) and ``scale_mode="per_row"`` are refused before any work: their groups
    run in the single pass only."""
    if is_mx(fmt) or scale_mode == "per_row":
        name = getattr(fmt, "name", fmt)
        raise ValueError(f"fmt={name!r} with scale_mode={scale_mode!r} is not allowed in the Triton split path; "
                         "allowed: an FP8, bf16 or fp16 P format or None with scale_mode 'multiply' or "
                         "'exp2_offset'")
    B, H, Nq, d = q.shape
    Nk = k.shape[-2]
    q, k, v, dp = launch_operands(q, k, v)
    dev, bh = q.device, B * H
    part = torch.empty(num_splits, bh, Nq, dp, dtype=torch.float32, device=dev)
    lse = torch.empty(num_splits, bh, Nq, dtype=torch.float32, device=dev)
    diag = torch.zeros(num_splits, len(DIAGNOSTICS), bh, Nq, dtype=torch.int32, device=dev)
    sink = (torch.zeros(1, dtype=torch.float32, device=dev) if sink_logit is None
            else sink_logit.to(torch.float32).expand(B, H).reshape(bh).contiguous())
    exp2 = scale_mode == "exp2_offset"
    log2s = log2_scale(scale) if exp2 else 0.0
    e4m3 = get_format("e4m3fn")
    f, fqk, fv = (t if t is not None else e4m3 for t in (fmt, qk_fmt, v_fmt))
    _launch(_attn_fwd_split, (triton_cdiv(Nq, block_m), bh, num_splits), dev,
            q, k, v, part, lse, diag, sink,
            operand_scales(q, k, v, qk_fmt=qk_fmt, qk_scale=qk_scale, v_fmt=v_fmt, v_scale=v_scale),
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), H, Nq, Nk, float(sm_scale), float(scale), int(ksink),
            float(rescale_threshold), log2s, float(log2s * math.log(2.0)), int(causal_offset),
            HEAD_D=dp, BLOCK_M=block_m, BLOCK_N=block_n, TILE_N=tile_n(block_n), REVERSE=reverse, CAUSAL=causal, QUANT=fmt is not None,
            MAN_BITS=f.man_bits, EMIN=f.emin, MAX_FINITE=f.max_finite, ROWSUM_ROUNDED=rowsum_rounded,
            EXP2_OFFSET=exp2, LAZY=rescale_threshold > 0,
            SINK_MODE=SINK_MODE_CODE[None if sink_logit is None else sink_mode],
            QK_QUANT=qk_fmt is not None, QK_MAN_BITS=fqk.man_bits, QK_EMIN=fqk.emin, QK_MAX_FINITE=fqk.max_finite,
            V_QUANT=v_fmt is not None, V_MAN_BITS=fv.man_bits, V_EMIN=fv.emin, V_MAX_FINITE=fv.max_finite,
            SPLITS=num_splits, INTERLEAVED=split_layout == "interleaved", PARTITION=p_normalize == "partition")
    if num_splits == 1 and p_normalize == "online":
        out, lse_out = part[0], lse[0]
    else:
        out = torch.empty(bh, Nq, dp, dtype=torch.float32, device=dev)
        lse_out = torch.empty(bh, Nq, dtype=torch.float32, device=dev)
        _launch(_combine, (triton_cdiv(Nq, block_m), bh), dev, part, lse, out, lse_out, sink, Nq, bh,
                HEAD_D=dp, BLOCK_M=block_m, SPLITS=num_splits,
                SINK_FINAL=sink_logit is not None and sink_mode == "final")
    out = out.view(B, H, Nq, dp)[..., :d].contiguous()
    counts = diag.sum(0)
    return out, {**{n: counts[i].to(torch.int64).view(B, H, Nq) for i, n in enumerate(DIAGNOSTICS)},
                 "lse": lse_out.view(B, H, Nq)}
