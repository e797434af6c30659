"""The deploy-mode FP8 attention kernel (``backend="triton-fp8"``): the shape of a deployed FP8 kernel.

Unlike the faithful kernel (:mod:`pcast.triton.kernel`: software rounding, float32 P·V), this one

* applies S inside exp2, as FlashAttention-3 does: ``x = exp2(s·LOG2E - (m·LOG2E - log2 S))``, with
  ``log2 S`` a compile-time constant (``LOG2S``), so that S = 1 compiles the offset away;
* casts x to E4M3 with the hardware conversion (``.to(tl.float8e4nv)``: ``cvt.rn.satfinite.e4m3x2.f32``);
* multiplies P·V on the FP8 tensor core: V is cast to E4M3 on the host with its per-(batch, head) scale
  ``s_v = amax|v| / 448`` and stored transposed (keys contiguous: K-major, as ``wgmma`` needs both FP8
  operands); the accumulator is rescaled by alpha and handed to the MMA (``tl.dot(p, v, acc)``), as
  FlashAttention-3 does; out = acc·s_v / l, l the row sum of the unrounded x.

Scores are the faithful kernel's (float32 ieee dot), the max is eager, the order forward or reverse. It
only runs compiled (``mma``/``wgmma``/``tcgen05`` have no interpreter): without a CUDA GPU of capability
8.9 or more :func:`triton_fp8_attention` raises; ``pcast-gpu-check --compile-only`` and
:func:`pcast.aot.compile_attention` compile it on a CPU. Diagnostics: none (they would cost work).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pcast.contract import LOG2E, log2_scale
from pcast.formats import get_format
from pcast.triton.kernel import LAUNCH_OPTIONS, attention_num_warps, launch_operands, triton_cdiv

__all__ = ["deploy_launch", "deploy_num_warps", "triton_fp8_attention", "NO_GPU_MESSAGE"]

_LOG2E = tl.constexpr(LOG2E)
NO_GPU_MESSAGE = ("backend='triton-fp8' runs only compiled, on a CUDA GPU with capability >= 8.9, and none is "
                  "present; compile it without one with `pcast-gpu-check --compile-only` or "
                  "pcast.aot.compile_attention(target, backend='triton-fp8')")


@triton.jit
def _attn_fwd_fp8(Q, K, Vt, Out, VScale,
                  stride_qz, stride_qh, stride_qm, stride_kz, stride_kh, stride_kn,
                  stride_vz, stride_vh, stride_vd,  # Vt: [B, H, HEAD_D, N_K] e4m3, keys contiguous
                  stride_oz, stride_oh, stride_om,
                  H, N_Q, N_K, sm_scale,
                  HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  REVERSE: tl.constexpr, CAUSAL: tl.constexpr,
                  LOG2S: tl.constexpr,  # log2 S: the exp2 offset (0.0: S = 1, no offset compiled)
                  ):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    z = pid_bh // H
    h = pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    row_ok = offs_m < N_Q
    q = tl.load(Q + z * stride_qz + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_D], tl.float32)
    k_base = K + z * stride_kz + h * stride_kh
    v_base = Vt + z * stride_vz + h * stride_vh
    n_blocks = tl.cdiv(N_K, BLOCK_N)
    for i in range(0, n_blocks):
        blk = n_blocks - 1 - i if REVERSE else i
        offs_n = blk * BLOCK_N + tl.arange(0, BLOCK_N)
        key_ok = offs_n < N_K
        kT = tl.load(k_base + offs_n[None, :] * stride_kn + offs_d[:, None], mask=key_ok[None, :], other=0.0)
        vT = tl.load(v_base + offs_d[:, None] * stride_vd + offs_n[None, :], mask=key_ok[None, :], other=0.0)
        # step 1: scores
        s = tl.dot(q, kT, input_precision="ieee") * sm_scale
        visible = key_ok[None, :]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= offs_m[:, None])
        s = tl.where(visible, s, float("-inf"))
        # step 2: running max, x = exp2(s·LOG2E - (m·LOG2E - log2 S))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        if LOG2S == 0.0:
            row = m_safe * _LOG2E
        else:
            row = m_safe * _LOG2E - LOG2S
        x = tl.exp2(s * _LOG2E - row[:, None])
        alpha = tl.exp2(m_i * _LOG2E - m_safe * _LOG2E)
        # step 3: cast (hardware, round to nearest even, satfinite)
        p8 = x.to(tl.float8e4nv)
        # step 4: row sum of the unrounded x
        l_i = l_i * alpha + tl.sum(x, 1)
        # step 5: accumulate on the FP8 tensor core
        acc = tl.dot(p8, tl.trans(vT), acc * alpha[:, None])
        m_i = m_new
    # step 6: normalise (V's scale once, at the end)
    out = tl.div_rn(acc * tl.load(VScale + pid_bh), tl.broadcast_to(l_i[:, None], acc.shape))
    tl.store(Out + z * stride_oz + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :], out,
             mask=row_ok[:, None])


def deploy_num_warps(block_m: int, block_n: int, head_d: int, capability: int) -> int:
    """The faithful kernel's warps (16 at 64 x 64 x 64: 8 spill a few registers on sm_89 and sm_90), but at
    most 8 on Blackwell (``capability`` 100 and up): Triton emits tcgen05.mma for 4 or 8 warps only. There
    the launch also passes ``maxnreg=255``: without it ptxas settles on 128 registers and spills at S = 1."""
    return min(8 if capability >= 100 else 16, attention_num_warps(block_m, block_n, head_d))


def _check_options(fmt, scale_mode, rescale_threshold, sink_logit, qk_fmt, v_fmt, rowsum_rounded) -> None:
    """The policy options the deploy kernel implements; anything else is a one-line error."""
    allowed = (("fmt", getattr(fmt, "name", fmt), "e4m3fn"), ("scale_mode", scale_mode, "exp2_offset"),
               ("rescale_threshold", rescale_threshold, 0.0), ("sink_logit", sink_logit, None),
               ("qk_fmt", qk_fmt, None), ("v_fmt", getattr(v_fmt, "name", v_fmt), "e4m3fn"),
               ("rowsum", "rounded" if rowsum_rounded else "unrounded", "unrounded"))
    for name, got, want in allowed:
        if got != want:
            raise ValueError(f"{name}={got!r} is not allowed with backend='triton-fp8'; allowed: {want!r}")


def deploy_launch(q, k, v, *, reverse, scale, fmt, causal, block_m, block_n, sm_scale, rowsum_rounded,
                  scale_mode, rescale_threshold=0.0, sink_logit=None, qk_fmt=None, v_fmt=None, v_scale="tensor",
                  capability=None, **_ignored):
    """``(grid, args, kwargs, out)`` of the deploy kernel's launch (the keywords: the Triton launcher's) on a
    GPU of compute ``capability`` (89, 90, 100; default: the CUDA tensors' device's)."""
    _check_options(fmt, scale_mode, rescale_threshold, sink_logit, qk_fmt, v_fmt, rowsum_rounded)
    if block_n & (block_n - 1):
        raise ValueError(f"block_n={block_n!r} is not allowed with backend='triton-fp8'; allowed: a power of two "
                         "(the deploy kernel's tile)")
    if capability is None:
        major, minor = torch.cuda.get_device_capability(q.device)
        capability = 10 * major + minor
    B, H, Nq, d = q.shape
    Nk = k.shape[-2]
    q, k, v, dp = launch_operands(q, k, v)
    e4m3 = get_format("e4m3fn")
    amax = v.abs().amax(dim=(-2, -1), keepdim=True)
    # divide by a tensor, as the emulator's operand cast does: CUDA would multiply by a rounded reciprocal
    s_v = (amax / torch.full_like(amax, e4m3.max_finite) if v_scale == "tensor"
           else torch.full_like(amax, float(v_scale)))
    s_v = torch.where(amax == 0, torch.ones_like(s_v), s_v)
    vt = (v / s_v).to(torch.float8_e4m3fn).transpose(-1, -2).contiguous()  # [B, H, d, Nk], keys contiguous
    out = torch.empty_like(q)
    args = (q, k, vt, out, s_v.reshape(B * H).contiguous(),
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            vt.stride(0), vt.stride(1), vt.stride(2), out.stride(0), out.stride(1), out.stride(2),
            H, Nq, Nk, float(sm_scale))
    kwargs = dict(HEAD_D=dp, BLOCK_M=block_m, BLOCK_N=block_n, REVERSE=reverse, CAUSAL=causal,
                  LOG2S=float(log2_scale(scale)), num_warps=deploy_num_warps(block_m, block_n, dp, capability),
                  **({"maxnreg": 255} if capability >= 100 else {}), **LAUNCH_OPTIONS)
    return (triton_cdiv(Nq, block_m), B * H), args, kwargs, out


def triton_fp8_attention(q, k, v, **kw):
    """Run the deploy kernel on a CUDA GPU (capability >= 8.9). Returns ``out`` [B, H, Nq, d] float32."""
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)):
        raise RuntimeError(NO_GPU_MESSAGE)
    d = q.shape[-1]
    q, k, v = (t.cuda() for t in (q, k, v))
    grid, args, kwargs, out = deploy_launch(q, k, v, **kw)
    _attn_fwd_fp8[grid](*args, **kwargs)
    return out if out.shape[-1] == d else out[..., :d].contiguous()
