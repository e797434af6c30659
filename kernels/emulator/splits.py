"""Split-KV attention and partition-normalised P in the emulator (docs/interfaces.md, "Decode-time attention").

The KV blocks are dealt to ``num_splits`` splits (contiguous ranges, or block j to split j mod num_splits);
each split runs steps 1-5 over its own blocks with its own state (m_s, l_s, acc_s), the learned sink's
``"init"`` seeding split 0 only, and step 6 merges the splits by their log-sum-exp in float32
(FlashAttention-3's combine, :func:`merge`). With ``p_normalize="partition"`` a split takes its exact max
and sum first and casts ``x = (p / l_s)·S``. Step 1 is computed once for all splits (the same scores as a
single pass), and every key is counted in the split that holds it, with the emulator's own steps
(:mod:`pcast.emulator.core`). One split with online normalisation never comes here: it is today's
single pass, bit for bit.
"""

from __future__ import annotations

import torch

from pcast.emulator import core as _em
from pcast.emulator import exact as _ex
from pcast.emulator import ieee
from pcast.emulator.ieee import tree_sum
from pcast.emulator.parts import block_weights, max_in_force, running_max, sink_term

__all__ = ["split_blocks", "emulate_splits", "merge"]


def split_blocks(nblk: int, num_splits: int, layout: str) -> list[list[int]]:
    """The KV blocks of each split, ascending: ``"contiguous"``: ``[s·c, (s+1)·c)`` with
    ``c = ceil(nblk / num_splits)``; ``"interleaved"``: the blocks j with ``j mod num_splits = s``.
    Splits past the last block are empty."""
    if layout == "contiguous":
        c = -(-nblk // num_splits)
        return [list(range(s * c, min(nblk, (s + 1) * c))) for s in range(num_splits)]
    return [list(range(s, nblk, num_splits)) for s in range(num_splits)]


def merge(lses: list, outs: list, sigma: torch.Tensor | None = None) -> tuple:
    """Step 6's merge of per-split results (float32): ``lses[s]`` [rows] (-inf: the split saw no key),
    ``outs[s]`` [rows, d] (ignored where lse is -inf). ``w_s = exp(lse_s - M)``, M the max lse; summed in
    split order; a final sink logit ``sigma`` [rows] joins the denominator once. Returns ``(out, lse)``."""
    big = torch.stack(lses).amax(0)
    num = torch.zeros_like(outs[0])
    den = torch.zeros_like(big)
    for lse_s, o_s in zip(lses, outs):
        w = torch.exp(lse_s - big)
        den = den + w
        num = num + w[:, None] * torch.where(torch.isneginf(lse_s)[:, None], torch.zeros_like(o_s), o_s)
    if sigma is not None:
        den = den + torch.exp(sigma - big)
    return num / den[:, None], big + torch.log(den)


def emulate_splits(q, k, v, *, scale: float, num_splits: int, split_layout: str, p_normalize: str,
                   causal_offset: int = 0, **kwargs):
    """:func:`pcast.emulator.core.emulate_attention` with several splits or partition normalisation; the
    same arguments and returns (``diag`` holds ``lse`` too). ``v``: a tensor or a tuple of them."""
    several = isinstance(v, tuple)
    B, H, Nq, d = q.shape
    c = _em._layout(q, k, v if several else (v,), scales=(scale,), causal_offset=causal_offset,
                    num_splits=num_splits, split_layout=split_layout, p_normalize=p_normalize, **kwargs)
    G = B * H
    outs, diags = _em._buffers(c, G, Nq, d, q.device)
    parts = [(i, torch.tensor(J, device=q.device)) for i, J in enumerate(split_blocks(c.nblk, num_splits,
                                                                                      split_layout)) if J]
    rows = max(1, _em.CHUNK_ELEMS // (c.nblk * c.block_n))
    for g in range(G):
        for r0 in range(0, Nq, rows):
            _split_rows(c, parts, g, r0, min(Nq, r0 + rows), outs[0], diags[0])
    res = tuple(out.view(B, H, Nq, d) for out in outs[0])
    return res if several else res[0], {n: t.view(B, H, Nq) for n, t in diags[0].items()}


def _split_maxima(c, parts, bm: torch.Tensor, sig) -> torch.Tensor:
    """Step 2's max in force for each block [rows, nblk] under its own split: the split's running max
    (online; split 0 seeded by an init sink) or its exact max (partition)."""
    m = torch.empty_like(bm)
    for i, J in parts:
        seed = sig if c.sink_init and i == 0 else None
        if c.splits[2] == "partition":
            ms = bm[:, J].amax(-1)
            ms = ms if seed is None else torch.maximum(ms, seed)
            m[:, J] = ms[:, None]
        elif seed is None and c.tau == 0:
            m[:, J] = running_max(bm[:, J], c.reverse)
        else:
            m[:, J] = max_in_force(bm[:, J], c.reverse, c.tau, seed)
    return m


def _split_rows(c, parts, g: int, r0: int, r1: int, outs_i: tuple, diag: dict) -> None:
    """Steps 1-6 for query rows r0:r1 of head g, split by split, then the merge."""
    nr, bn, sc = r1 - r0, c.block_n, c.scales[0]
    partition = c.splits[2] == "partition"
    sig = c.sink[g].expand(nr) if c.sink is not None else None
    # step 1: scores
    sb = _em._scores(c, g, r0, r1).view(nr, c.nblk, bn)
    # step 2: running max
    bm = sb.amax(dim=-1)
    ch = None
    m = _split_maxima(c, parts, bm, sig)
    if c.ex is not None:  # exact decisions (pcast.emulator.exact): every block's exact maximum, each split's rule
        m, ch = _ex.walk_exact(c, g, r0, r1, sb, bm, m, lambda b, sd: _split_maxima(c, parts, b, sd), sig, every=True)
    m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    tk = ch.terms_keys(sb, m) if ch is not None else None
    u = _em._unrounded(c, sb, m_safe)  # p (multiply) or x (exp2_offset), [rows, nblk, bn]
    if tk is not None:
        ch.fix_terms(u, tk)
    l_part = _partition_sums(c, parts, u, m_safe, sig) if partition else None
    sgn = torch.sign(u).view(nr, -1)
    pos_s, pos_ns = sgn[:, :c.ks].sum(-1), sgn[:, c.ks:].sum(-1)
    # step 3: cast
    if partition:
        x = torch.div(u, torch.where(l_part > 0, l_part, torch.ones_like(l_part))[..., None]).mul_(sc.scale)
    else:
        x = u.clone() if c.exp2 else torch.mul(u, sc.scale)
    pq = _em._cast(c, sc, x.view(nr, -1), None, diag, g, r0, r1, ch).view(nr, c.nblk, bn)
    torch.sign(pq.view(nr, -1), out=sgn)
    _em._counts(diag, g, r0, r1, pos_s, pos_ns, sgn[:, :c.ks].sum(-1), sgn[:, c.ks:].sum(-1))
    # step 4: row sum
    if c.rowsum_rounded:
        lblk = tree_sum(pq) if c.exp2 else tree_sum(pq) / sc.scale
    else:
        lblk = tree_sum(u)
    # step 5: accumulate
    lses, per_v = [], [[] for _ in c.vf]  # each split's lse_s and O_s (steps 4-5 over its own blocks)
    for i, J in parts:
        seed = sig if c.sink_init and i == 0 else None
        lse_s, o_s = _split_state(c, g, sc, J, m, m_safe, lblk, pq, seed, None if l_part is None else l_part[:, J[0]])
        lses.append(lse_s)
        for acc_list, o in zip(per_v, o_s):
            acc_list.append(o)
    # step 6: normalise
    final = sig if sig is not None and not c.sink_init else None
    for out, o_list in zip(outs_i, per_v):
        out[g, r0:r1], lse = merge(lses, o_list, final)
    diag["lse"][g, r0:r1] = lse


def _partition_sums(c, parts, u: torch.Tensor, m_safe: torch.Tensor, sig) -> torch.Tensor:
    """Partition normalisation's exact row sum of each split, per block [rows, nblk]: Σ exp(s - m_s) over
    the split's keys (float32), plus ``exp(σ - m_0)`` for split 0's init sink."""
    l_blk = torch.empty_like(m_safe)
    for i, J in parts:
        ls = u[:, J].sum(dim=(1, 2))
        if c.sink_init and i == 0:
            ls = ls + ieee.exp(sig - m_safe[:, J[0]])
        l_blk[:, J] = ls[:, None]
    return l_blk


def _split_state(c, g: int, sc, J, m, m_safe, lblk, pq, seed, l_part) -> tuple:
    """Steps 4-5 of one split's blocks J and its O_s: ``(lse_s [rows], (O_s [rows, d] per value tensor))``."""
    nr, bn = pq.shape[0], c.block_n
    if l_part is not None:  # partition: p is already normalised; no rescaling
        l_s, m_f = l_part, m_safe[:, J[0]]
        p = pq[:, J].reshape(nr, -1)
    else:
        m_f = m_safe[:, J[0]] if c.reverse else m_safe[:, J[-1]]
        w = block_weights(c, m[:, J], m_f[:, None])  # 0 for blocks seen before any key
        l_s = tree_sum(lblk[:, J] * w)
        if seed is not None:  # the sink's own value, carried to the end by every block's alpha
            l_s = l_s + sink_term(c, seed, seed) * block_weights(c, seed, m_f)
        p = (pq[:, J] * w[..., None]).reshape(nr, -1)
    accs = [torch.matmul(p, vf[g].view(c.nblk, bn, -1)[J].reshape(len(J) * bn, -1)) for vf in c.vf]
    if l_part is not None:
        return m_f + torch.log(l_s), tuple(acc / sc.scale for acc in accs)
    div = l_s if c.exp2 else l_s * sc.scale
    return _em.row_lse(c, m_f, l_s), tuple(acc / div[:, None] for acc in accs)
