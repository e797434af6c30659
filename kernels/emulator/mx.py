"""The emulator's step 3 for P in microscaled FP4 (docs/interfaces.md, "P in FP4 with microscaling").

Called from :func:`pcast.emulator.core._rows` at its ``# step 3: cast`` marker; ``c`` is that module's
``_Call`` (the call laid out). Kept apart only for the module size limit.
"""

from __future__ import annotations

import torch

from pcast.formats.microscaling import PER_ROW_TARGET, quantize_mx_fast

__all__ = ["per_row_scale", "first_level", "group_positives", "cast_mx"]


def per_row_scale(u: torch.Tensor, nr: int, c) -> torch.Tensor:
    """``scale_mode="per_row"``: ``S_r = float32(PER_ROW_TARGET / r)`` per row and block, r the block's row
    max of p (``S_r = 1`` where r = 0), [rows, nblk]."""
    r = u.view(nr, c.nblk, c.block_n).amax(-1)
    return torch.where(r > 0, torch.full_like(r, PER_ROW_TARGET) / r, torch.ones_like(r))


def first_level(c, u: torch.Tensor, scale: float, s_r, spare) -> torch.Tensor:
    """Step 3's x: u itself (exp2_offset), else p·S or p·S_r, in place over u, or into ``spare`` when
    another scale still needs the unrounded u."""
    if c.exp2:
        return u
    if s_r is not None:
        ub = u.view(s_r.shape[0], c.nblk, c.block_n)
        out = ub if spare is None else spare.view(ub.shape)
        return torch.mul(ub, s_r[..., None], out=out).view(u.shape)
    return u.mul_(scale) if spare is None else torch.mul(u, scale, out=spare)


def group_positives(c, sgn: torch.Tensor) -> torch.Tensor:
    """Per group of a microscaled format, how many non-sink keys have u > 0 (``sgn`` = sign(u)), [rows, groups]."""
    pos = sgn.view(sgn.shape[0], -1, c.fmt.group)
    if c.ks:
        pos = pos.clone().view(sgn.shape)
        pos[:, :c.ks] = 0
        pos = pos.view(sgn.shape[0], -1, c.fmt.group)
    return pos.sum(-1)


def cast_mx(c, x: torch.Tensor, pos_g: torch.Tensor, diag: dict, g: int, r0: int, r1: int) -> torch.Tensor:
    """Step 3 for a microscaled format, in place over x [rows, Np]. Adds to ``diag`` the saturated keys, the
    groups whose scale flushed and the non-sink keys with u > 0 in them (``pos_g``, per group)."""
    pq, flushed = quantize_mx_fast(x, c.fmt, sat=diag["saturated"][g, r0:r1])
    if bool(flushed.any()):
        diag["groups_flushed"][g, r0:r1] = flushed.sum(-1)
        diag["underflow_scale"][g, r0:r1] = (pos_g * flushed).sum(-1).to(torch.int64)
    return pq
