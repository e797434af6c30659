"""Parts of the steps that the emulator and its engines share: the running max in visiting order, the
max in force under step 2's update rule (lazy rescaling, a seeded max), the operand casts of Q, K, V, and
step 4's block weights and sink term (for a call ``c`` laid out by :mod:`pcast.emulator.core`)."""

from __future__ import annotations

import torch

from pcast.contract import LOG2E, MX_SEQ_BLOCK, float32
from pcast.emulator import ieee
from pcast.formats import FP8Format
from pcast.formats.rounding import quantize_fast

__all__ = ["running_max", "previous_max", "max_in_force", "operand_cast", "operand_parts", "mx_seq_scales",
           "block_weights", "sink_term"]


def running_max(block_max: torch.Tensor, reverse: bool) -> torch.Tensor:
    """Running max seen by each block in visiting order. block_max: [..., nblk]."""
    if reverse:
        return torch.flip(torch.cummax(torch.flip(block_max, [-1]), dim=-1).values, [-1])
    return torch.cummax(block_max, dim=-1).values


def previous_max(m: torch.Tensor, reverse: bool, first: torch.Tensor | None = None) -> torch.Tensor:
    """[rows, nblk] the max in force before each block of ``m`` [rows, nblk] in visiting order: ``first``
    [rows] (the max a row starts with) before the first block visited, -inf where None."""
    first = torch.full_like(m[:, :1], float("-inf")) if first is None else first[:, None].to(m.dtype)
    return torch.cat([m[:, 1:], first], 1) if reverse else torch.cat([first, m[:, :-1]], 1)


def max_in_force(block_max: torch.Tensor, reverse: bool, tau: float = 0.0,
                 m0: torch.Tensor | None = None) -> torch.Tensor:
    """The max in force when each block is processed, under step 2's update rule.

    block_max: [rows, nblk] float32 row maxima of each block; ``m0`` [rows]: the max each row
    starts with (a sink logit, ``sink_mode="init"``), else -inf. In visiting order, the max
    moves to a block's max ``bm`` when it is -inf or when ``(bm - m)·LOG2E > tau`` in float32;
    otherwise it stays (stale). With ``tau = 0`` and no ``m0`` this is :func:`running_max`.
    """
    rows, nblk = block_max.shape
    t = torch.tensor(float32(tau), dtype=torch.float32, device=block_max.device)
    m = torch.full((rows,), float("-inf"), device=block_max.device) if m0 is None else m0.to(torch.float32)
    out = torch.empty_like(block_max)
    for j in (range(nblk - 1, -1, -1) if reverse else range(nblk)):
        bm = block_max[:, j]
        m = torch.where(torch.isneginf(m) | ((bm - m) * LOG2E > t), bm, m)
        out[:, j] = m
    return out


def operand_cast(t: torch.Tensor, fmt: FP8Format, how) -> torch.Tensor:
    """``t' = quantize(t / s_t, fmt)·s_t`` with one float32 ``s_t`` per (batch, head) of t [B, H, N, d]:
    ``amax|t| / max_finite`` for ``how="tensor"`` (1 where the amax is 0; ``"tensor_global"``: the amax of all
    of t), else the float ``how``; ``"mx_seq32"``: one E8M0 ``s_t`` per 32 keys per channel
    (:func:`pcast.emulator.parts.mx_seq_scales`)."""
    tq, st = operand_parts(t, fmt, how)
    return tq.mul_(st)


def mx_seq_scales(t: torch.Tensor, fmt: FP8Format) -> torch.Tensor:
    """[B, H, N, d] ``v_scale="mx_seq32"``'s E8M0 scales, each key's: per block of 32 keys and channel, the least
    power of two ``>= amax / max_finite`` (the quotient in float64), its exponent clamped to [-127, 127], 1 where
    the amax is 0 (docs/interfaces.md, "V's scales over the whole tensor or along the sequence")."""
    B, H, n, d = t.shape
    nb = -(-n // MX_SEQ_BLOCK)
    padded = torch.nn.functional.pad(t.abs(), (0, 0, 0, nb * MX_SEQ_BLOCK - n))
    amax = padded.reshape(B, H, nb, MX_SEQ_BLOCK, d).amax(dim=3, keepdim=True).double()
    mant, e = torch.frexp(amax / fmt.max_finite)
    e = torch.where(mant == 0.5, e - 1, e).clamp(-127, 127)
    d_ = torch.where(amax == 0, torch.ones_like(amax), torch.ldexp(torch.ones_like(amax), e)).to(torch.float32)
    return d_.expand(B, H, nb, MX_SEQ_BLOCK, d).reshape(B, H, nb * MX_SEQ_BLOCK, d)[:, :, :n]


def operand_parts(t: torch.Tensor, fmt: FP8Format, how) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`operand_cast`'s two factors: ``quantize(t / s_t, fmt)`` (the FP8 values) and ``s_t`` [B, H, 1, 1]
    (``how="mx_seq32"``: [B, H, N, d], :func:`pcast.emulator.parts.mx_seq_scales`; ``"tensor_global"``: one amax
    over all of t)."""
    if how == "mx_seq32":
        st = mx_seq_scales(t, fmt)
        return quantize_fast(t / st, fmt, saturate=True), st
    amax = t.abs().amax(dim=(-2, -1), keepdim=True)
    if how == "tensor_global":
        amax = amax.amax(dim=(0, 1), keepdim=True).expand_as(amax)
    if how in ("tensor", "tensor_global"):
        # divide by a tensor, not a Python number: CUDA would multiply by a rounded reciprocal
        st = amax / torch.full_like(amax, fmt.max_finite)
        st = torch.where(amax == 0, torch.ones_like(st), st)
    else:
        st = torch.full_like(amax, how)
    return quantize_fast(t / st, fmt, saturate=True), st


def block_weights(c, m, m_final):
    """The product of the alphas from max ``m`` to the final max: ``exp(m - m_final)`` ("multiply") or
    ``exp2(m·LOG2E - m_final·LOG2E)`` ("exp2_offset"); 0 where m is -inf."""
    if c.exp2:
        return ieee.exp2(m * LOG2E - m_final * LOG2E)
    return ieee.exp(m - m_final)


def sink_term(c, sigma, m):
    """A sink logit's term of the row sum under max ``m``: ``exp(σ - m)`` ("multiply") or
    ``exp2(σ·LOG2E - (m·LOG2E - log2 S))`` ("exp2_offset")."""
    if c.exp2:
        return ieee.exp2(sigma * LOG2E - (m * LOG2E - c.log2_s))
    return ieee.exp(sigma - m)
