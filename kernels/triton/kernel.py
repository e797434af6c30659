"""The Triton kernels and their launchers: compiled on a CUDA GPU, interpreted on CPU.

First the ``@triton.jit`` sources: the bit-exact FP8 rounding helper ``fp8_round``, a
quantize kernel, Triton's own cast (for documenting its behaviour), and the forward
attention kernel with the P-cast contract (:func:`_attn_fwd`, whose KV loop is
:func:`_attn_fwd_inner`; each contract step is marked ``# step N: name``, as in the
emulator and the test oracle; the P-policy options of docs/interfaces.md, "P policies of
deployed kernels", enter at those markers as constexprs and runtime arguments, their helpers in
:mod:`pcast.triton.policy`; microscaled FP4 P, nvfp4 / mxfp4 and ``scale_mode="per_row"``,
enters at steps 3-5 through :mod:`pcast.triton.fp4`). Then the launchers (:func:`triton_attention`,
:func:`triton_quantize`, :func:`triton_builtin_cast`): CUDA tensors launch the kernels
compiled; CPU tensors launch them through Triton's interpreter (see :func:`pcast.triton.interpret.interpreting`),
so no one has to set ``TRITON_INTERPRET`` by hand.

Why a hand-written rounding: Triton's interpreter converts float32 to
``tl.float8e4nv`` wrongly (it truncates subnormals, drops mantissa carries and
turns overflow into garbage), so the kernel rounds with integer/float ops that
behave the same interpreted and compiled. See :mod:`pcast.formats.rounding` for the
algorithm; the two are tested bit-identical.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from pcast.contract import DIAGNOSTICS, log2_scale
from pcast.formats import FP8Format, get_format
from pcast.reference import expand_kv
from pcast.formats.microscaling import MXFormat
from pcast.triton.interpret import interpreted, interpreting
from pcast.triton.rounding import fp8_round
from pcast.triton.fp4 import MX_CODE, cast_p, per_row_div
from pcast.triton.policy import (SINK_MODE_CODE, exp_block, init_state, new_max, operand_scales, partition_p,
                                   sink_final, split_range)

__all__ = ["triton_attention", "attention_launch", "launch_operands", "triton_quantize", "triton_builtin_cast", "fp8_round",
           "LAUNCH_OPTIONS", "attention_num_warps"]

# ============================================================================= @triton.jit sources


@triton.jit
def _quantize_kernel(X, Y, N,
                     MAN_BITS: tl.constexpr,  # format: stored mantissa bits
                     EMIN: tl.constexpr,  # format: exponent of the smallest normal
                     MAX_FINITE: tl.constexpr,  # format: saturation value
                     BLOCK: tl.constexpr,  # elements per program
                     ):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(X + offs, mask=mask, other=0.0)
    tl.store(Y + offs, fp8_round(x, MAN_BITS, EMIN, MAX_FINITE), mask=mask)


@triton.jit
def _builtin_cast_kernel(X, Y, N, BLOCK: tl.constexpr):
    """Triton's own float32 -> float8e4nv -> float32 conversion (for documenting its behaviour)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(X + offs, mask=mask, other=0.0)
    tl.store(Y + offs, x.to(tl.float8e4nv).to(tl.float32), mask=mask)


@triton.jit
def _count_diagnostics(n_underflow, n_underflow_sink, n_saturated, n_terms, n_terms_sink,  # [BLOCK_M] int32 counts
                       p, x, pq,  # [BLOCK_M, BLOCK_N]: p, p*S and p_q of one KV block
                       visible,  # [BLOCK_M, BLOCK_N] keys not masked out
                       offs_n, KSINK,  # key positions of the block; keys < KSINK are sinks
                       QUANT: tl.constexpr,  # p*S was rounded (otherwise nothing saturates)
                       MAX_FINITE: tl.constexpr,  # FP8 format: saturation value
                       ):
    """Add one KV block to the per-row diagnostics (not a contract step: they change nothing)."""
    sink = (offs_n < KSINK)[None, :]
    pos = p > 0.0
    under = pos & (pq == 0.0)
    n_underflow += tl.sum((under & ~sink).to(tl.int32), 1)
    n_underflow_sink += tl.sum((under & sink).to(tl.int32), 1)
    n_terms += tl.sum((pos & ~sink).to(tl.int32), 1)
    n_terms_sink += tl.sum((pos & sink).to(tl.int32), 1)
    if QUANT:
        n_saturated += tl.sum((visible & (x > MAX_FINITE)).to(tl.int32), 1)
    return n_underflow, n_underflow_sink, n_saturated, n_terms, n_terms_sink


@triton.jit
def _load_operand(ptrs, mask, scale_ptr,
                  QUANT: tl.constexpr,  # cast to FP8 on load: fp8_round(t / s) * s (False: a plain load)
                  MAN_BITS: tl.constexpr, EMIN: tl.constexpr, MAX_FINITE: tl.constexpr,  # that FP8 format
                  ):
    """Load an operand tile (masked entries 0); with QUANT put it on the FP8 grid scaled by s = *scale_ptr.
    ``tl.div_rn``, not ``/``: compiled, a float32 ``/`` is the approximate ``div.full.f32``."""
    t = tl.load(ptrs, mask=mask, other=0.0)
    if QUANT:
        s = tl.load(scale_ptr)  # s_t of this (batch, head)
        t = fp8_round(tl.div_rn(t, s), MAN_BITS, EMIN, MAX_FINITE) * s
    return t


@triton.jit
def _attn_fwd_inner(acc, l_i, m_i,  # running state: [BLOCK_M, HEAD_D] accumulator, row sum, row max
                    n_underflow, n_underflow_sink, n_saturated, n_terms, n_terms_sink,  # diagnostics, then the FP4 ones:
                    n_underflow_scale, n_groups_flushed,  # non-sink keys in flushed groups, flushed groups
                    q,  # [BLOCK_M, HEAD_D] query rows (already cast when QK_QUANT)
                    k_base, v_base, stride_kn, stride_vn,  # K and V of this (batch, head), their row strides
                    offs_m, offs_d,  # query positions, head-dimension offsets
                    N_K, sm_scale, p_scale, KSINK, tau, log2s, scale_ptr,  # as in _attn_fwd (scale_ptr: s_q, s_k, s_v)
                    HEAD_D: tl.constexpr,  # head dimension (power of two, 16..256)
                    BLOCK_N: tl.constexpr, TILE_N: tl.constexpr,  # keys per KV block; its power-of-two tile
                    REVERSE: tl.constexpr,  # visit KV blocks last to first
                    CAUSAL: tl.constexpr,  # top-left causal mask: key j visible to query i iff j <= i
                    QUANT: tl.constexpr,  # round p*S to the FP8 grid (False: no rounding)
                    MAN_BITS: tl.constexpr, EMIN: tl.constexpr, MAX_FINITE: tl.constexpr,  # P's format (as _attn_fwd)
                    ROWSUM_ROUNDED: tl.constexpr,  # l sums p_q / S (exp2_offset: p_q) instead of the unrounded value
                    EXP2_OFFSET: tl.constexpr,  # scale_mode="exp2_offset": x = exp2(s·LOG2E - (m·LOG2E - log2 S))
                    LAZY: tl.constexpr,  # rescale_threshold > 0: the max moves only when (bm - m)·LOG2E > tau
                    QK_QUANT: tl.constexpr, QK_MAN_BITS: tl.constexpr, QK_EMIN: tl.constexpr,  # K cast: on, format
                    QK_MAX_FINITE: tl.constexpr,  # K cast format: saturation value
                    V_QUANT: tl.constexpr, V_MAN_BITS: tl.constexpr, V_EMIN: tl.constexpr,  # V cast: on, format
                    V_MAX_FINITE: tl.constexpr, MX: tl.constexpr, GROUP: tl.constexpr,  # MX: 0, nvfp4 1, mxfp4 2
                    PER_ROW: tl.constexpr,  # scale_mode="per_row": x = p·S_r per row and block (nvfp4)
                    split, causal_off,  # this program's split; causal: key j visible to row i iff j <= i + off
                    SPLITS: tl.constexpr, INTERLEAVED: tl.constexpr, PARTITION: tl.constexpr,  # pcast.triton.splits
                    ):
    """Steps 1-5 and the diagnostics over one split's KV blocks (SPLITS = 1: all) for BLOCK_M rows; returns the
    state in argument order. PARTITION: m_i, l_i come in as the split's exact max and sum."""
    n_iter, blk0, stride = split_range(tl.cdiv(N_K, BLOCK_N), split, SPLITS, INTERLEAVED)
    for i in range(0, n_iter):
        blk = blk0 + (n_iter - 1 - i if REVERSE else i) * stride
        offs_n = blk * BLOCK_N + tl.arange(0, TILE_N)
        key_ok = (tl.arange(0, TILE_N) < BLOCK_N) & (offs_n < N_K)  # the tile's lanes past BLOCK_N hold no key
        kT = _load_operand(k_base + offs_n[None, :] * stride_kn + offs_d[:, None], key_ok[None, :], scale_ptr + 1,
                           QK_QUANT, QK_MAN_BITS, QK_EMIN, QK_MAX_FINITE)
        v = _load_operand(v_base + offs_n[:, None] * stride_vn + offs_d[None, :], key_ok[:, None], scale_ptr + 2,
                          V_QUANT, V_MAN_BITS, V_EMIN, V_MAX_FINITE)
        # step 1: scores
        s = tl.dot(q, kT, input_precision="ieee") * sm_scale  # fp32 with exact products (no TF32)
        visible = (key_ok[None, :] & (offs_n[None, :] <= offs_m[:, None] + causal_off)) if CAUSAL else key_ok[None, :]
        s = tl.where(visible, s, float("-inf"))
        # step 2: running max
        m_new = m_i if PARTITION else new_max(m_i, tl.max(s, 1), tau, LAZY)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that have seen no key yet
        p, alpha = exp_block(s, m_i, m_safe, log2s, EXP2_OFFSET)  # p: exp(s - m), or x under EXP2_OFFSET
        # step 3: cast
        x, pq, d_blk, n_saturated, n_underflow_scale, n_groups_flushed = cast_p(  # d_blk: S, or S_r per row
            partition_p(p, l_i, PARTITION), p_scale, offs_n, KSINK, n_saturated, n_underflow_scale, n_groups_flushed, QUANT, MAN_BITS, EMIN,
            MAX_FINITE, EXP2_OFFSET, MX, GROUP, PER_ROW)
        # step 4: row sum
        rs = tl.sum(pq, 1)
        l_rnd = rs if EXP2_OFFSET else tl.div_rn(rs, tl.broadcast_to(d_blk, rs.shape))  # / S (or S_r; exp2: / 1)
        l_i = l_i if PARTITION else l_i * alpha + (l_rnd if ROWSUM_ROUNDED else tl.sum(p, 1))  # partition: exact
        # step 5: accumulate
        acc = acc * alpha[:, None] + per_row_div(tl.dot(pq, v, input_precision="ieee"), d_blk, PER_ROW)
        m_i = m_new
        n_underflow, n_underflow_sink, n_saturated, n_terms, n_terms_sink = _count_diagnostics(  # (on p, or x)
            n_underflow, n_underflow_sink, n_saturated, n_terms, n_terms_sink, p, x, pq, visible, offs_n, KSINK,
            QUANT, MAX_FINITE)
    return (acc, l_i, m_i, n_underflow, n_underflow_sink, n_saturated, n_terms, n_terms_sink, n_underflow_scale,
            n_groups_flushed)


@triton.jit
def _store_diagnostics(Diag, pid_bh, N_Q, offs_m, row_ok,
                       n_underflow, n_underflow_sink, n_saturated, n_terms, n_terms_sink, n_underflow_scale,
                       n_groups_flushed):
    """One plane per name of pcast.contract.DIAGNOSTICS, in that order (not a contract step)."""
    plane = tl.num_programs(1) * N_Q
    dbase = Diag + pid_bh * N_Q + offs_m
    tl.store(dbase, n_underflow, mask=row_ok)
    tl.store(dbase + plane, n_underflow_sink, mask=row_ok)
    tl.store(dbase + 2 * plane, n_saturated, mask=row_ok)
    tl.store(dbase + 3 * plane, n_terms, mask=row_ok)
    tl.store(dbase + 4 * plane, n_terms_sink, mask=row_ok)
    tl.store(dbase + 5 * plane, n_underflow_scale, mask=row_ok)
    tl.store(dbase + 6 * plane, n_groups_flushed, mask=row_ok)


@triton.jit
def _attn_fwd(Q, K, V, Out, Diag,
              Sink,  # [B*H] float32 learned sink logits (read only when SINK_MODE > 0)
              OpScale,  # [B*H, 3] float32 operand scales s_q, s_k, s_v (read only under QK_QUANT / V_QUANT)
              stride_qz, stride_qh, stride_qm,  # Q strides: batch, head, row (last dim contiguous)
              stride_kz, stride_kh, stride_kn,  # K strides
              stride_vz, stride_vh, stride_vn,  # V strides
              stride_oz, stride_oh, stride_om,  # Out strides
              H, N_Q, N_K,  # heads, query length, key length
              sm_scale,  # score scale, usually 1/sqrt(d)
              p_scale,  # S: P is multiplied by S before the FP8 cast
              KSINK,  # keys at positions < KSINK count as sinks in the diagnostics
              tau,  # rescale_threshold (log2 units; LAZY only)
              log2s,  # pcast.contract.log2_scale(S): the exp2 offset (EXP2_OFFSET only)
              HEAD_D: tl.constexpr,  # head dimension (power of two, 16..256)
              BLOCK_M: tl.constexpr,  # query rows per program
              BLOCK_N: tl.constexpr, TILE_N: tl.constexpr,  # keys per KV block (a multiple of 16); its tile (2^k)
              REVERSE: tl.constexpr,  # visit KV blocks last to first
              CAUSAL: tl.constexpr,  # top-left causal mask: key j visible to query i iff j <= i
              QUANT: tl.constexpr,  # round p*S to the FP8 grid (False: no rounding)
              MAN_BITS: tl.constexpr, EMIN: tl.constexpr, MAX_FINITE: tl.constexpr,  # FP8 format of P
              ROWSUM_ROUNDED: tl.constexpr,  # l sums p_q / S (exp2_offset: p_q) instead of the unrounded value
              EXP2_OFFSET: tl.constexpr,  # scale_mode="exp2_offset": S enters inside exp2; out = acc / l
              LAZY: tl.constexpr,  # rescale_threshold > 0: lazy rescaling (the max may stay stale)
              SINK_MODE: tl.constexpr,  # 0: no sink logit; 1: "init" (seeds m and l); 2: "final" (joins l at step 6)
              QK_QUANT: tl.constexpr, QK_MAN_BITS: tl.constexpr, QK_EMIN: tl.constexpr,  # Q, K cast: on, format
              QK_MAX_FINITE: tl.constexpr,  # Q, K cast format: saturation value
              V_QUANT: tl.constexpr, V_MAN_BITS: tl.constexpr, V_EMIN: tl.constexpr,  # V cast: on, format
              V_MAX_FINITE: tl.constexpr,  # V cast format: saturation value
              MX: tl.constexpr, GROUP: tl.constexpr,  # P microscaled: 0 no, 1 nvfp4, 2 mxfp4; keys per group
              PER_ROW: tl.constexpr,  # scale_mode="per_row": x = p·S_r, S_r = 2688 / the block's row max of p
              ):
    """BLOCK_M query rows of one (batch, head) over all KV blocks. Diag: int32 [7, B*H, N_Q] (DIAGNOSTICS)."""
    pid_m, pid_bh = tl.program_id(0), tl.program_id(1)
    z = pid_bh // H
    h = pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    row_ok = offs_m < N_Q
    scale_ptr = OpScale + 3 * pid_bh  # s_q of this (batch, head); s_k and s_v follow it
    q = _load_operand(Q + z * stride_qz + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :],
                      row_ok[:, None], scale_ptr, QK_QUANT, QK_MAN_BITS, QK_EMIN, QK_MAX_FINITE)
    m_i, l_i = init_state(Sink + pid_bh, log2s, BLOCK_M, SINK_MODE, EXP2_OFFSET)
    acc = tl.zeros([BLOCK_M, HEAD_D], tl.float32)
    zero = tl.zeros([BLOCK_M], tl.int32)  # each of the seven diagnostic counts starts at 0
    (acc, l_i, m_i, n_underflow, n_underflow_sink, n_saturated, n_terms, n_terms_sink, n_underflow_scale,
     n_groups_flushed) = _attn_fwd_inner(
        acc, l_i, m_i, zero, zero, zero, zero, zero, zero, zero, q,
        K + z * stride_kz + h * stride_kh, V + z * stride_vz + h * stride_vh, stride_kn, stride_vn,
        offs_m, offs_d, N_K, sm_scale, p_scale, KSINK, tau, log2s, scale_ptr,
        HEAD_D, BLOCK_N, TILE_N, REVERSE, CAUSAL, QUANT, MAN_BITS, EMIN, MAX_FINITE, ROWSUM_ROUNDED, EXP2_OFFSET,
        LAZY, QK_QUANT, QK_MAN_BITS, QK_EMIN, QK_MAX_FINITE, V_QUANT, V_MAN_BITS, V_EMIN, V_MAX_FINITE, MX, GROUP,
        PER_ROW, 0, 0, 1, False, False)
    # step 6: normalise
    l_i = sink_final(l_i, m_i, Sink + pid_bh, log2s, SINK_MODE, EXP2_OFFSET)
    den = l_i if EXP2_OFFSET else l_i * p_scale
    out = tl.div_rn(acc, tl.broadcast_to(den[:, None], acc.shape))  # IEEE: a float32 / is div.full.f32
    tl.store(Out + z * stride_oz + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :], out,
             mask=row_ok[:, None])
    _store_diagnostics(Diag, pid_bh, N_Q, offs_m, row_ok, n_underflow, n_underflow_sink, n_saturated, n_terms,
                       n_terms_sink, n_underflow_scale, n_groups_flushed)


# ============================================================================= launchers


# The compile options every launch passes (compiled and interpreted alike; the interpreter ignores them).
# enable_fp_fusion=False: no a·b + c is contracted into an FMA outside tl.dot, and LLVM writes every float32
# multiply and add with an explicit ``.rn`` (ptxas runs with --fmad=false), so compiled p, x and l are the
# contract's float32 roundings. Every tl.dot on float32 passes input_precision="ieee" in its source.
LAUNCH_OPTIONS = {"enable_fp_fusion": False}


def attention_num_warps(block_m: int, block_n: int, head_d: int) -> int:
    """Warps of the attention kernel: one per 1024 floats of tile state (s or p, acc and q, a K or V
    tile), 4 to 16. The ieee dots keep their tiles in registers: at 64 x 64 x 64, 4 warps spill 7 KiB
    on sm_90 and 8 spill 16 B on sm_100; 16 do not spill on sm_89, sm_90 or sm_100 (about 90 registers).
    Numerics do not depend on it beyond the order of tl.sum."""
    state = block_m * block_n + 2 * block_m * head_d + block_n * head_d
    return min(16, max(4, 1 << (max(state // 1024, 1) - 1).bit_length()))


@functools.lru_cache(maxsize=None)
def _launch(kernel, grid, device: torch.device, *args, **kwargs):
    """Launch ``kernel`` compiled on CUDA tensors, interpreted on CPU tensors."""
    if device.type == "cuda":
        return kernel[grid](*args, **kwargs)
    with interpreting():
        return interpreted(kernel.fn)[grid](*args, **kwargs)


def triton_quantize(x: torch.Tensor, fmt: str | FP8Format = "e4m3fn", *, block: int = 1 << 16) -> torch.Tensor:
    """Round float32 ``x`` to the FP8 grid with the Triton helper ``fp8_round``."""
    f = get_format(fmt)
    if x.dtype != torch.float32:
        raise ValueError(f"x must be float32, got {x.dtype}")
    xc = x.contiguous().view(-1)
    y = torch.empty_like(xc)
    n = xc.numel()
    if n:
        grid = (triton_cdiv(n, block),)
        _launch(_quantize_kernel, grid, x.device, xc, y, n, MAN_BITS=f.man_bits, EMIN=f.emin,
                MAX_FINITE=f.max_finite, BLOCK=block, **LAUNCH_OPTIONS)
    return y.view(x.shape)


def triton_builtin_cast(x: torch.Tensor, *, block: int = 1 << 12) -> torch.Tensor:
    """Triton's built-in ``.to(tl.float8e4nv)`` round trip. Wrong when interpreted; see tests."""
    xc = x.contiguous().view(-1)
    y = torch.empty_like(xc)
    n = xc.numel()
    _launch(_builtin_cast_kernel, (triton_cdiv(n, block),), x.device, xc, y, n, BLOCK=block, **LAUNCH_OPTIONS)
    return y.view(x.shape)


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def tile_n(block_n: int) -> int:
    """The KV tile the attention kernels hold a block of ``block_n`` keys in: the next power of two (tl.arange
    needs one); its lanes past ``block_n`` are masked out like keys past N."""
    return 1 << (block_n - 1).bit_length()


def launch_operands(q, k, v):
    """q, k, v as every attention program reads them: K and V expanded to q's heads (grouped-query
    attention: each query head gets its K, V copy), d zero-padded to the next power of two (tl.arange
    needs one; zero products add exact 0), contiguous. Returns ``(q, k, v, padded d)``."""
    H, d = q.shape[1], q.shape[-1]
    k, v = expand_kv(k, H), expand_kv(v, H)
    dp = 1 << (d - 1).bit_length()
    if dp != d:
        q, k, v = (torch.nn.functional.pad(t, (0, dp - d)) for t in (q, k, v))
    return (*(t.contiguous() for t in (q, k, v)), dp)


def attention_launch(q, k, v, *, reverse: bool, scale: float, fmt: FP8Format | MXFormat | None, causal: bool,
                     ksink: int, block_m: int, block_n: int, sm_scale: float, rowsum_rounded: bool,
                     scale_mode: str = "multiply", rescale_threshold: float = 0.0, sink_logit=None,
                     sink_mode: str = "final", qk_fmt: FP8Format | None = None, qk_scale="tensor",
                     v_fmt: FP8Format | None = None, v_scale="tensor"):
    """Everything :func:`triton_attention` launches, without launching: ``(grid, args, kwargs, out, diag)``.

    ``args`` and ``kwargs`` are ``_attn_fwd``'s arguments (constexprs and :data:`LAUNCH_OPTIONS` in kwargs);
    ``out`` and ``diag`` are the buffers the kernel writes. :mod:`pcast.triton.aot` compiles exactly this call.
    """
    B, H, Nq, d = q.shape
    Nk = k.shape[-2]
    q, k, v, dp = launch_operands(q, k, v)
    out = torch.empty_like(q)
    diag = torch.zeros(len(DIAGNOSTICS), B * H, Nq, dtype=torch.int32, device=q.device)
    op_scale = operand_scales(q, k, v, qk_fmt=qk_fmt, qk_scale=qk_scale, v_fmt=v_fmt, v_scale=v_scale)
    sink = (torch.zeros(1, dtype=torch.float32, device=q.device) if sink_logit is None
            else sink_logit.to(torch.float32).expand(B, H).reshape(B * H).contiguous())  # [H] or [B, H]
    exp2_offset = scale_mode == "exp2_offset"
    e4m3 = get_format("e4m3fn")  # format constants of a cast that is off (QUANT, QK_QUANT or V_QUANT False)
    mx = isinstance(fmt, MXFormat)  # microscaled P: fp8_round takes its E2M1 elements' parameters
    f, fqk, fv = (t if t is not None else e4m3 for t in (fmt.element if mx else fmt, qk_fmt, v_fmt))
    args = (q, k, v, out, diag, sink, op_scale,
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
            H, Nq, Nk, float(sm_scale), float(scale), int(ksink), float(rescale_threshold),
            log2_scale(scale) if exp2_offset else 0.0)
    kwargs = dict(
        HEAD_D=dp, BLOCK_M=block_m, BLOCK_N=block_n, TILE_N=tile_n(block_n), REVERSE=reverse, CAUSAL=causal,
        QUANT=fmt is not None and not mx, MAN_BITS=f.man_bits, EMIN=f.emin, MAX_FINITE=f.max_finite,
        ROWSUM_ROUNDED=rowsum_rounded, EXP2_OFFSET=exp2_offset, LAZY=rescale_threshold > 0,
        SINK_MODE=SINK_MODE_CODE[None if sink_logit is None else sink_mode],
        QK_QUANT=qk_fmt is not None, QK_MAN_BITS=fqk.man_bits, QK_EMIN=fqk.emin, QK_MAX_FINITE=fqk.max_finite,
        V_QUANT=v_fmt is not None, V_MAN_BITS=fv.man_bits, V_EMIN=fv.emin, V_MAX_FINITE=fv.max_finite,
        MX=MX_CODE[fmt.name] if mx else 0, GROUP=fmt.group if mx else 1, PER_ROW=scale_mode == "per_row",
        num_warps=attention_num_warps(block_m, tile_n(block_n), dp), **LAUNCH_OPTIONS)
    return (triton_cdiv(Nq, block_m), B * H), args, kwargs, out, diag


def triton_attention(q, k, v, **kw):
    """Launch the attention kernel. Arguments are validated by :func:`pcast.attention`.

    q [B,H,Nq,d], k and v [B,H_kv,Nk,d] (H_kv dividing H; expanded here): float32, one device; d a
    multiple of 16, zero-padded here to the next power of two and cut back on return. ``sink_logit``:
    None or float32 [B, H] on that device. The keywords are :func:`attention_launch`'s: the policy options
    of docs/interfaces.md ("P policies of deployed kernels"); the operand scales are computed there, in
    float32. ``fmt`` may be an :class:`~pcast.formats.microscaling.MXFormat` (docs/interfaces.md, "P in
    FP4 with microscaling"). Returns ``(out [B,H,Nq,d], diag dict of int64 [B,H,Nq])``.
    """
    B, H, Nq, d = q.shape
    grid, args, kwargs, out, diag = attention_launch(q, k, v, **kw)
    _launch(_attn_fwd, grid, q.device, *args, **kwargs)
    out = out if out.shape[-1] == d else out[..., :d].contiguous()
    return out, {n: diag[i].to(torch.int64).view(B, H, Nq) for i, n in enumerate(DIAGNOSTICS)}
