"""Reverse order across a Δ stack: the blocks visited before the sink keys' block, computed once per chunk of rows.

Used by :func:`pcast.emulator.calls.emulate_calls` (docs/interfaces.md, ``pcast.attention_calls``). The items
of a Δ stack differ from their anchor only in the leading keys (the sink keys; ``pcast.emulator.calls._Shared``'s
``cols``). In reverse order the block holding them is visited last, so every block j >= j0 (the differing
columns and the ``ksink`` sink keys, rounded up to whole blocks) sees the anchor's scores and, the running max
being a cumulative max from the last block down to j, the anchor's max: the same p (or exp2_offset's x), the
same p_q at each scale, the same counts, saturations and block sums. :class:`_State` holds those for one chunk of
rows of one call; :func:`item_rows` runs an item (the anchor too) with them, computing only its leading blocks,
its block weights, the weighted P_q, P·V and step 6, each with the operations :func:`pcast.emulator.core._rows`
applies there, so the results have its bits (tests/emulator/test_attention_calls.py checks them against run-by-run calls).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pcast.emulator import core as _em
from pcast.emulator import exact as _ex
from pcast.emulator.ieee import tree_sum
from pcast.emulator.mx import first_level
from pcast.emulator.parts import block_weights
from pcast.formats.rounding import quantize_fast

__all__ = ["eligible", "lead_columns", "anchor_state", "item_rows"]


def eligible(c: _em._Call) -> bool:
    """Calls whose blocks past the leading ones do not depend on the leading keys: reverse order, a running max
    that is a cumulative max (no τ, no seeding sink), p·S or exp2_offset's x, an FP8 cast or none, float32 P·V."""
    return c.reverse and c.cummax and not c.mx and not c.per_row and c.pv is None


def lead_columns(block_n: int, nblk: int, ks: int, cols: list[int]) -> int | None:
    """The leading columns an item recomputes (of ``nblk`` blocks of ``block_n`` keys, the first ``ks`` of them
    sink keys), for twins that differ from their anchor in their first ``cols`` keys: whole blocks over the
    largest of them and the sink keys; None when no block is left to share."""
    c0 = max(block_n, -(-max([*cols, ks]) // block_n) * block_n)
    return c0 if c0 < nblk * block_n else None


def _scaled(c: _em._Call, sc, u: torch.Tensor, last: bool):
    """Step 3's x for scale ``sc`` (:func:`pcast.emulator.mx.first_level`: u itself for the last scale), and
    the count of x > max_finite per row where the scale may saturate (else None)."""
    x = first_level(c, u, sc.scale, None, None if last else torch.empty_like(u))
    return x, (_em.saturated_count(c, x) if sc.check_saturation else None)


def _cast(c: _em._Call, sc, x: torch.Tensor, ch, sat, j0: int) -> torch.Tensor:
    """Step 3's rounding of x (blocks j0 on), in place or, with exact decisions (``ch``), a new tensor whose
    saturations correct ``sat``. Clamping first when the scale may saturate gives the bits of an unclamped
    cast wherever nothing exceeds max_finite, so this is pcast.emulator.core._cast whatever its check found."""
    if c.fmt is None:
        return x
    if ch is not None:
        return ch.cast(x, sc.scale, sat, sc.check_saturation, j0=j0)
    return quantize_fast(x, c.fmt, saturate=sc.check_saturation, out=x)


@dataclass
class _State:
    """One chunk of rows of the anchor, blocks j0 on: what every item of its stack shares."""

    c0: int  # leading columns each item computes itself (j0 = c0 / block_n blocks)
    bm: torch.Tensor  # [rows, nblk] the anchor's block maxima (blocks < j0 are each item's own)
    pos: torch.Tensor  # [rows] keys with u > 0 in the shared blocks (none of them a sink key)
    lblk: torch.Tensor | None  # [rows, nblk - j0] the unrounded block sums (rowsum unrounded)
    per_scale: list  # per scale: (p_q [rows, nblk - j0, block_n], #p_q > 0, #saturated or None, rounded lblk or None)


def anchor_state(c: _em._Call, s: torch.Tensor, c0: int, a: int, r0: int, r1: int) -> _State:
    """Steps 2-4 of the shared blocks (j0 on) of rows r0:r1 of the anchor a from its scores ``s`` [rows, Np]
    (read only): running max, p (or x), each scale's cast, counts and block sums."""
    nr, j0 = s.shape[0], c0 // c.block_n
    sb = s.view(nr, c.nblk, c.block_n)
    bm = sb.amax(dim=-1)
    m, ch = _ex.in_force(c, a, r0, r1, sb, bm)
    m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    tk = ch.terms_keys(sb[:, j0:], m[:, j0:], j0) if ch is not None else None
    u = _em._unrounded(c, sb[:, j0:], m_safe[:, j0:])  # (s is the shared scores, read only)
    if tk is not None:
        ch.fix_terms(u, tk)
    lblk = None if c.rowsum_rounded else tree_sum(u)
    pos = torch.sign(u).flatten(1).sum(-1)
    per_scale = []
    for i, sc in enumerate(c.scales):
        x, sat = _scaled(c, sc, u, i == len(c.scales) - 1)
        pq = _cast(c, sc, x.view(nr, -1), ch, sat, j0).view(x.shape)
        lr = None
        if c.rowsum_rounded:
            lr = tree_sum(pq)
            lr = lr if c.exp2 else lr / sc.scale
        per_scale.append((pq, torch.sign(pq).flatten(1).sum(-1), sat, lr))
    return _State(c0=c0, bm=bm, pos=pos, lblk=lblk, per_scale=per_scale)


def item_rows(c: _em._Call, g: int, r0: int, r1: int, s: torch.Tensor, st: _State, outs: tuple, diags: tuple,
              keep: list | None) -> None:
    """Steps 2-6 of rows r0:r1 of item g under call ``c`` (as :func:`pcast.emulator.core._rows`), from the item's
    scores ``s`` [rows, Np] (only its first ``st.c0`` columns are read) and the anchor's shared blocks ``st``."""
    nr, bn, ks = r1 - r0, c.block_n, c.ks
    j0 = st.c0 // bn
    # step 2: running max (the item's own leading blocks, the anchor's maxima after them)
    lead = s.view(nr, c.nblk, bn)[:, :j0]
    bm = st.bm.clone()
    bm[:, :j0] = lead.amax(dim=-1)
    m, ch = _em.running_max(bm, True), None
    if c.ex is not None:  # exact decisions: the walk over the item's own blocks and the anchor's after them
        m, ch = _ex.walk_exact(c, g, r0, r1, s.view(nr, c.nblk, bn), bm, m, lambda b, sd: _ex.max_rule(c, b, sd))
    m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    tk = ch.terms_keys(lead, m[:, :j0]) if ch is not None else None
    u = _em._unrounded(c, lead, m_safe[:, :j0])
    if tk is not None:
        ch.fix_terms(u, tk)
    if not c.rowsum_rounded:
        lblk = torch.cat([tree_sum(u), st.lblk], dim=1)
    sgn = torch.sign(u).view(nr, st.c0)
    pos_s, pos_ns = sgn[:, :ks].sum(-1), sgn[:, ks:].sum(-1) + st.pos
    m_final = m_safe[:, 0]
    w = block_weights(c, m, m_final[:, None])  # [rows, nblk]
    for i, (sc, outs_i, diag) in enumerate(zip(c.scales, outs, diags)):
        pq_sh, ppos_sh, sat_sh, lr_sh = st.per_scale[i]
        # step 3: cast
        x, sat = _scaled(c, sc, u, i == len(c.scales) - 1)
        pq = _cast(c, sc, x.view(nr, -1), ch, sat, 0).view(x.shape)
        torch.sign(pq.view(nr, st.c0), out=sgn)
        _em._counts(diag, g, r0, r1, pos_s, pos_ns, sgn[:, :ks].sum(-1), sgn[:, ks:].sum(-1) + ppos_sh)
        if sat is not None:
            diag["saturated"][g, r0:r1] = (sat + sat_sh).to(torch.int64)
        # step 4: row sum
        if c.rowsum_rounded:
            lead_sum = tree_sum(pq)
            lblk = torch.cat([lead_sum if c.exp2 else lead_sum / sc.scale, lr_sh], dim=1)
        l = tree_sum(lblk * w)
        # step 5: accumulate
        p = torch.empty(nr, c.nblk, bn, dtype=pq.dtype, device=pq.device)
        torch.mul(pq, w[:, :j0, None], out=p[:, :j0])
        torch.mul(pq_sh, w[:, j0:, None], out=p[:, j0:])
        p = p.view(nr, c.nblk * bn)
        accs = [torch.matmul(p, vf[g]) for vf in c.vf]
        _em._normalise(c, sc, g, r0, r1, outs_i, accs, l, m_final, keep, diag["lse"])

