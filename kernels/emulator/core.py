"""Vectorized torch emulator of the FP8 P-cast attention contract.

This is the fast path large CPU sweeps run on. It follows the per-row contract of :func:`pcast.attention`
step for step (each step is marked ``# step N: name`` in :func:`_rows`, as in the Triton kernel and the test
oracle), but instead of walking KV blocks one at a time it computes every block's running maximum at once (a
cumulative max over the per-block row maxima, in the visiting order): a handful of large tensor operations.

Exactness: every decision (the walk of step 2, each rounding, underflow, saturation) is made on the exact
value (:mod:`pcast.emulator.exact`), so the counts are the same on every CPU. The float32 arithmetic is the
kernel's except the accumulation order: the kernel rescales ``acc`` and ``l`` by ``alpha`` once per block,
the emulator weights each block by ``exp(m_block - m_final)`` directly (a few fp32 ulps in the outputs).
:mod:`pcast.conformance` explains every difference from the kernel's float32 decisions.

The P-policy options (docs/interfaces.md, "P policies") enter at their steps: operand casts
(``qk_fmt``, ``v_fmt``) in :func:`_layout`; lazy rescaling and a sink logit that seeds the
max replace the cumulative max by :func:`max_in_force`, a short loop over the blocks;
``scale_mode="exp2_offset"`` computes x with exp2 and weights blocks by ``exp2(m_j·LOG2E - m_final·LOG2E)``.
With every option at its default the code below runs exactly the paper's operations, bit for bit.

Several value tensors (:func:`pcast.attention_values`) share steps 1-4; several scales S
(:func:`emulate_attention_scales`, ``scale_mode="multiply"`` only) share steps 1-2, each scale casting
its own copy of the unrounded p (the last one casts p in place), with the operations of a call of its own.
Several calls (:func:`pcast.emulator.calls.emulate_calls`, :func:`pcast.attention_calls`) share step 1
where their scores have the same bits, and the items of a Δ stack the scores of their non-sink keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from pcast.contract import DIAGNOSTICS, DYNAMIC_SCALE_MODES, LOG2E, log2_scale
from pcast.formats import FP8Format
from pcast.emulator.mx import cast_mx as _cast_mx, first_level as _first_level, group_positives as _group_positives
from pcast.emulator.dynamic import chunk_rows, dynamic_layout, dynamic_scale as _dynamic_scale
from pcast.formats.microscaling import MXFormat
from pcast.formats.rounding import quantize_fast
from pcast.emulator.parts import (block_weights, max_in_force, operand_cast, previous_max, running_max,
                                  sink_term)
from pcast.emulator import exact as _ex
from pcast.emulator import fused as _fused
from pcast.emulator import ieee as _ieee
from pcast.emulator import tensorcore as _tc
from pcast.reference import causal_mask, expand_kv

__all__ = ["emulate_attention", "emulate_attention_scales", "running_max", "max_in_force", "operand_cast"]

# Work on about this many score elements at a time: large enough that torch's
# per-op overhead is small, small enough to stay in cache and bound memory.
CHUNK_ELEMS = 1 << 18


@dataclass(frozen=True)
class _Scale:
    """What steps 3-6 need of one scale S."""

    scale: float  # S
    check_saturation: bool  # x may exceed the format's max finite value, so it may saturate


@dataclass
class _Call:
    """One call's inputs laid out in KV blocks, and the settings every chunk of rows shares."""

    qs: torch.Tensor  # [G, Nq, d] queries, already times sm_scale when that is exact (sm_pow2)
    kT: torch.Tensor  # [G, d, Np] keys, zero-padded to whole blocks, transposed
    vf: tuple  # ([G, Np, d], ...) one per value tensor, each zero-padded to whole blocks
    visible: torch.Tensor | None  # [Nq, Np] visible keys (causal mask, padding), None: all visible
    nblk: int  # KV blocks
    block_n: int  # keys per KV block
    ks: int  # sink keys: positions < ks
    sm_scale: float
    sm_pow2: bool  # sm_scale is a power of two, so it was folded into qs exactly
    reverse: bool
    scales: tuple  # (_Scale, ...): one per scale S; steps 3-6 run once for each (one only for exp2)
    fmt: FP8Format | MXFormat | None
    mx: bool  # fmt is microscaled (pcast.formats.microscaling): groups inside each block, a scale per group
    per_row: bool  # a dynamic scale (pcast.emulator.dynamic): x = p·S_r, S_r = target / (the block's row or tile max)
    rowsum_rounded: bool
    exp2: bool  # scale_mode="exp2_offset"
    fma: bool  # exp_arg="fma": x = exp2(fma(s, LOG2E, -(m·LOG2E - log2 S))), on the eager path
    log2_s: float  # log2_scale(S), the exp2 offset (exp2_offset: step 2 depends on S, so one S a call)
    tau: float  # rescale_threshold
    sink: torch.Tensor | None  # [G] float32 learned sink logits
    sink_init: bool  # the sink seeds (m, l) (sink_mode="init"), else it joins l at step 6
    cummax: bool  # eager max without a seed: the running max is a cumulative max
    splits: tuple = (1, "contiguous", "online")  # num_splits, split_layout, p_normalize (pcast.emulator.splits)
    pv: _tc.PVOperands | None = None  # step 5 on an FP8 tensor core (pv_arith), else None: float32
    ex: _ex.Bounds | None = None  # the norms behind exact decisions (pcast.emulator.exact), None: not covered
    tile: int = 0  # tile_max modes: block_m, the rows sharing one S per KV block; 0: none
    pad_hit: torch.Tensor | None = None  # tile_max_padded: [nblk] blocks where the padded rows pin the max at 1
    nq: int = 0  # query rows
    target: float = 0.0  # a dynamic scale's target (pcast.api_dynamic.dynamic_target)


def _operand(t, heads: int, n: int, pad: int, fmt, how):
    """K or one V laid out: grouped-query heads expanded (H_kv -> H), cast by ``fmt`` (None: not cast; each
    tensor on its own, as a call of its own would), flattened to [G, n, d] and zero-padded by ``pad`` keys."""
    t = expand_kv(t, heads)
    t = t if fmt is None else operand_cast(t, fmt, how)
    t = t.reshape(-1, n, t.shape[-1])
    return torch.nn.functional.pad(t, (0, 0, 0, pad)) if pad else t


def _visible(nq: int, nk: int, np_: int, causal: bool, device, offset: int = 0) -> torch.Tensor:
    """[nq, np_] visible keys: the causal mask (or all) over the nk real keys, none of the padding."""
    vis = torch.zeros(nq, np_, dtype=torch.bool, device=device)
    vis[:, :nk] = causal_mask(nq, nk, device=device, offset=offset) if causal else True
    return vis


def _layout(q, k, v, *, reverse, scales, fmt, causal, ksink, block_n, sm_scale, rowsum_rounded, scale_mode,
            rescale_threshold, sink_logit, sink_mode, qk_fmt, qk_scale, v_fmt, v_scale, memo: dict | None = None,
            causal_offset: int = 0, num_splits: int = 1, split_layout: str = "contiguous",
            p_normalize: str = "online", pv_arith: str = "fp32", block_m: int = 64, pv_promote: int = 0,
            exp_arg: str = "rounded") -> _Call:
    """Cast the operands, flatten batch and heads, pad the keys to whole blocks and build the visibility mask.

    ``scales``: the scales S (a tuple; several only with ``scale_mode="multiply"``, where steps 1-2 do
    not depend on S). ``memo``: tensors already laid out by other calls on the same q, k, v
    (``pcast.emulator.calls.emulate_calls``), keyed by what they depend on, so that calls share them."""
    memo = {} if memo is None else memo

    def once(key, make):
        if key not in memo:
            memo[key] = make()
        return memo[key]

    B, H, Nq, d = q.shape
    Nk = k.shape[-2]
    G = B * H
    nblk = -(-Nk // block_n)
    pad = nblk * block_n - Nk
    # Multiplying q by a power-of-two sm_scale is exact, so (q*sm)·k has the same bits
    # as (q·k)*sm and saves a pass over the scores.
    sm_pow2 = math.frexp(sm_scale)[0] == 0.5
    qk = (None, None) if qk_fmt is None else (qk_fmt.name, qk_scale)
    vk = (None, None) if v_fmt is None else (v_fmt.name, v_scale)

    def queries():
        qf = (q if qk_fmt is None else operand_cast(q, qk_fmt, qk_scale)).reshape(G, Nq, d)
        return qf * sm_scale if sm_pow2 else qf

    qs = once(("q", qk, sm_scale), queries)
    kf = once(("k", qk, pad), lambda: _operand(k, H, Nk, pad, qk_fmt, qk_scale))
    vf = once(("v", vk, pad), lambda: tuple(_operand(vi, H, Nk, pad, v_fmt, v_scale) for vi in v))
    visible = None
    if causal or pad:
        visible = once(("visible", bool(causal), pad, block_n, causal_offset),
                       lambda: _visible(Nq, Nk, nblk * block_n, causal, q.device, causal_offset))
    exp2 = scale_mode == "exp2_offset"
    if exp2 and len(scales) != 1:  # x = exp2(s·L - (m·L - log2 S)): step 2 depends on S
        raise ValueError(f"scale_mode='exp2_offset' takes one scale a call, got {len(scales)}")
    sink_init = sink_logit is not None and sink_mode == "init"
    pv = None if pv_arith == "fp32" else once(("pv", vk, pad, pv_arith, fmt.name, pv_promote), lambda: _tc.pv_operands(
        v, H, Nk, pad, v_fmt, v_scale, pv_arith, fmt, pv_promote))
    ex = once(("bounds", qk, sm_scale, pad, block_n), lambda: _ex.bounds(qs, kf.transpose(-1, -2), block_n, 1.0 if sm_pow2
              else sm_scale)) if _ex.eligible(fmt, scale_mode, p_normalize) else None
    dyn = scale_mode in DYNAMIC_SCALE_MODES
    return _Call(qs=qs, kT=kf.transpose(-1, -2), vf=vf, visible=visible, ex=ex,
                 **dynamic_layout(scale_mode, fmt, Nq, Nk, block_n, block_m, causal, causal_offset, q.device),
                 nblk=nblk, block_n=block_n, ks=min(ksink, Nk), sm_scale=sm_scale, sm_pow2=sm_pow2,
                 reverse=reverse, fmt=fmt, mx=isinstance(fmt, MXFormat), per_row=dyn, rowsum_rounded=rowsum_rounded,
                 # Eager multiply: p <= 1 (each block's max is folded into m before its p is taken),
                 # so p*S <= S. A stale max (tau > 0) or exp2's rounded offset can exceed S.
                 scales=tuple(_Scale(scale=s, check_saturation=fmt is not None and not isinstance(fmt, MXFormat) and (
                     s > fmt.max_finite or exp2 or rescale_threshold > 0 or dyn)) for s in scales),
                 exp2=exp2, fma=exp_arg == "fma", log2_s=log2_scale(scales[0]), tau=rescale_threshold,
                 sink=None if sink_logit is None else sink_logit.reshape(G).to(torch.float32), sink_init=sink_init,
                 cummax=rescale_threshold == 0 and not sink_init, splits=(num_splits, split_layout, p_normalize),
                 pv=pv)


def _rows(c: _Call, g: int, r0: int, r1: int, outs: tuple, diags: tuple, s: torch.Tensor | None = None,
          keep: list | None = None) -> None:
    """Steps 1-6 for query rows r0:r1 of head g into ``outs[i][j]`` (scale i, value tensor j) and ``diags[i]``:
    steps 1-2 once, 3-4 once per scale, 5-6 once per scale and value tensor, each as a call of its own.
    ``s``: step 1's scores of these rows when another call computed them (:func:`_scores`' bits; read only).
    ``keep``: a list that receives, per scale, what step 6 starts from (``pcast.emulator.calls._clone_rows``)."""
    nr = r1 - r0
    Np = c.nblk * c.block_n
    # step 1: scores
    s = _scores(c, g, r0, r1) if s is None else s  # (given: shared with other calls, pcast.emulator.calls)
    if not c.fma and _fused.covers(c, s):  # steps 2-4 in one compiled pass, the operations below
        return _fused_rows(c, g, r0, r1, s, outs, diags, keep)
    # step 2: running max
    sb = s.view(nr, c.nblk, c.block_n)
    bm = sb.amax(dim=-1)  # the max in force when each block is processed: a cumulative max, or step 2's rule
    m, ch = _ex.in_force(c, g, r0, r1, sb, bm)
    m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    tk = ch.terms_keys(sb, m) if ch is not None else None
    u = _unrounded(c, sb, m_safe).view(nr, Np)  # p (multiply) or x (exp2_offset), the unrounded value
    if tk is not None:
        ch.fix_terms(u, tk)
    # The cast overwrites u in place: its block sums (unrounded row sum) and positive counts are taken now.
    if not c.rowsum_rounded:
        lblk = _ieee.tree_sum(u.view(nr, c.nblk, c.block_n))
    # diagnostics: u >= 0, so sign(u) is 1 exactly where u > 0: a fast exact count.
    sgn = torch.sign(u)
    pos_s = sgn[:, :c.ks].sum(-1)
    pos_ns = sgn[:, c.ks:].sum(-1)
    pos_g = _group_positives(c, sgn) if c.mx else None  # non-sink keys with u > 0 per group (underflow_scale)
    last = len(c.scales) - 1
    spare = torch.empty_like(u) if last else None  # every scale but the last casts a copy of u
    s_r = _dynamic_scale(u, nr, r0, c) if c.per_row else None  # a dynamic S_r of each row and block
    for i, (sc, outs_i, diag) in enumerate(zip(c.scales, outs, diags)):
        # step 3: cast
        # x = p·S, p·S_r (per_row) or step 2's x (exp2_offset, one scale only): in place over u for the last
        # scale, else into the spare buffer, so that u stays unrounded for the next scale
        x = _first_level(c, u, sc.scale, s_r, spare if i < last else None)
        pq = _cast(c, sc, x, pos_g, diag, g, r0, r1, ch)
        # diagnostics: p_q > 0 implies u > 0, so underflows are #(u > 0) - #(p_q > 0).
        torch.sign(pq, out=sgn)
        _counts(diag, g, r0, r1, pos_s, pos_ns, sgn[:, :c.ks].sum(-1), sgn[:, c.ks:].sum(-1))
        # step 4: row sum
        # Instead of rescaling by alpha once per block, weight block j by exp(m_j - m_final), the alphas' product.
        if c.rowsum_rounded:  # (else lblk holds the unrounded u's block sums, the same for every scale)
            lblk = _ieee.tree_sum(pq.view(nr, c.nblk, c.block_n))
            lblk = lblk if c.exp2 else lblk / (s_r if c.per_row else sc.scale)
        m_final = m_safe[:, 0] if c.reverse else m_safe[:, -1]
        w = block_weights(c, m, m_final[:, None])  # [rows, nblk]; 0 for blocks seen before any key
        l = _ieee.tree_sum(lblk * w)
        if c.sink_init:  # the sink's own value l0, carried to the end by every block's alpha
            l = l + sink_term(c, c.sink[g], c.sink[g]) * block_weights(c, c.sink[g], m_final)
        # step 5: accumulate
        if c.pv is not None:  # the tensor core: acc = acc·alpha per block, then its fused sums; V's scale after
            alpha = block_weights(c, previous_max(m, c.reverse), m_safe)
            accs = [_tc.accumulate(pq, vq[g], alpha, c.pv, c.block_n, c.reverse) * s_v[g]
                    for vq, s_v in zip(c.pv.vq, c.pv.s_v)]
        else:  # the same weights (per_row: over S_r, the kernel's division of p_q·V), then one matmul for all of P_q V
            pq.view(nr, c.nblk, c.block_n).mul_((w / s_r if c.per_row else w)[..., None])
            accs = [torch.matmul(pq, vf[g]) for vf in c.vf]
        _normalise(c, sc, g, r0, r1, outs_i, accs, l, m_final, keep, diag["lse"])


def _fused_rows(c: _Call, g: int, r0: int, r1: int, s: torch.Tensor, outs: tuple, diags: tuple, keep) -> None:
    """Steps 2-6 of :func:`_rows` with steps 2-4 compiled (:func:`pcast.emulator.fused.p_rows`): the same
    results."""
    pws, ls, m_final, counts = _fused.p_rows(c, g, r0, r1, s)
    for sc, outs_i, diag, pw, l, cnt in zip(c.scales, outs, diags, pws, ls, counts):
        for i, name in enumerate(("terms", "terms_sink", "underflow", "underflow_sink", "saturated")):
            diag[name][g, r0:r1] = cnt[:, i]
        if c.sink_init:
            l = l + sink_term(c, c.sink[g], c.sink[g]) * block_weights(c, c.sink[g], m_final)
        accs = [torch.matmul(pw, vf[g]) for vf in c.vf]  # step 5
        _normalise(c, sc, g, r0, r1, outs_i, accs, l, m_final, keep, diag["lse"])


def _normalise(c: _Call, sc: _Scale, g: int, r0: int, r1: int, outs_i, accs: list, l, m_final, keep, lse) -> None:
    """Step 6 for rows r0:r1 of head g at one scale: a sink logit joins the row sum ``l`` (``sink_mode="final"``),
    then each accumulator of ``accs`` (one per value tensor) is divided into ``outs_i``. ``keep``: a list that
    receives what step 6 starts from, before the sink logit joins (``pcast.emulator.calls._clone_rows``); ``lse``
    [G, Nq] float32 receives each row's log-sum-exp (:func:`row_lse`)."""
    if keep is not None:  # (no sink_init there: l is the keys' row sum, before a sink logit joins it)
        keep.append((accs, l, m_final))
    # step 6: normalise
    if c.sink is not None and not c.sink_init:
        l = l + sink_term(c, c.sink[g], m_final)  # the sink joins l under the final (possibly stale) max
    for out, acc in zip(outs_i, accs):
        out[g, r0:r1] = acc / l[:, None] if c.exp2 else acc / (l * sc.scale)[:, None]
    lse[g, r0:r1] = row_lse(c, m_final, l)


def row_lse(c: _Call, m, l) -> torch.Tensor:
    """A row's natural-log normaliser from its max ``m`` and row sum ``l`` (float32): ``m + ln l``, less
    ``log2_scale(S)·ln 2`` under exp2_offset (its l sums x, not p)."""
    return m + torch.log(l) - c.log2_s * _LN2 if c.exp2 else m + torch.log(l)


_LN2 = math.log(2.0)
_DECODE_NAMES = ("causal_offset", "pv_arith", "pv_promote", "block_m", "exp_arg")  # emulate_attention's passed on


def _scores(c: _Call, g: int, r0: int, r1: int, cols: int | None = None) -> torch.Tensor:
    """Step 1 for query rows r0:r1 of head g: ``q·kᵀ·sm_scale`` with invisible keys at -inf,
    [rows, Np] float32; ``cols``: only the first ``cols`` keys (``pcast.emulator.calls._Shared``)."""
    kT = c.kT[g] if cols is None else c.kT[g][:, :cols]
    s = torch.matmul(c.qs[g, r0:r1], kT)
    if not c.sm_pow2:
        s.mul_(c.sm_scale)
    if c.visible is not None:
        s.masked_fill_(~c.visible[r0:r1, :s.shape[1]], float("-inf"))
    return s


def _cast(c: _Call, sc: _Scale, x: torch.Tensor, pos_g, diag: dict, g: int, r0: int, r1: int,
          ch: _ex.Chunk | None = None) -> torch.Tensor:
    """Step 3's rounding of x (no rounding when fmt is None): FP8, or a microscaled format's groups of keys
    inside each block with a scale per group (:mod:`pcast.emulator.mx`); saturation counted. In place, except
    with exact decisions (``ch``: :meth:`pcast.emulator.exact.Chunk.cast`, a new tensor)."""
    if c.mx:
        return _cast_mx(c, x, pos_g, diag, g, r0, r1)
    saturate = _saturation(c, sc, x, diag["saturated"][g, r0:r1])
    if c.fmt is None:
        return x
    if ch is not None:
        return ch.cast(x, sc.scale, diag["saturated"][g, r0:r1], sc.check_saturation)
    return quantize_fast(x, c.fmt, saturate=saturate, out=x)


def _saturation(c: _Call, sc: _Scale, x: torch.Tensor, saturated: torch.Tensor) -> bool:
    """Whether x (this scale's p·S) must saturate; if so, its count per row into ``saturated``."""
    saturate = sc.check_saturation and bool(x.amax() > c.fmt.max_finite)  # one cheap reduction
    if saturate:
        saturated.copy_(saturated_count(c, x).to(torch.int64))
    return saturate


def saturated_count(c: _Call, x: torch.Tensor) -> torch.Tensor:
    """Per row of x [rows, ...], how many elements exceed the format's max finite value, as a float32 count:
    a float sign sum, which torch does far faster than a bool sum."""
    return torch.sign(x - c.fmt.max_finite).clamp_min_(0).flatten(1).sum(-1)


def _counts(diag: dict, g: int, r0: int, r1: int, pos_s, pos_ns, ppos_s, ppos_ns) -> None:
    """The term and underflow counts of rows r0:r1 of head g from per-row float counts of u > 0 (``pos_*``)
    and of p_q > 0 (``ppos_*``) among the sink and the non-sink keys."""
    diag["terms"][g, r0:r1] = pos_ns.to(torch.int64)
    diag["terms_sink"][g, r0:r1] = pos_s.to(torch.int64)
    diag["underflow"][g, r0:r1] = (pos_ns - ppos_ns).to(torch.int64)
    diag["underflow_sink"][g, r0:r1] = (pos_s - ppos_s).to(torch.int64)


def _unrounded(c: _Call, sb: torch.Tensor, m_safe: torch.Tensor) -> torch.Tensor:
    """Step 2's unrounded value of every key of the scores ``sb`` [rows, j, block_n] under their blocks' maxima
    ``m_safe`` [rows, j], a new tensor: ``p = exp(s - m)`` ("multiply"), or ``x = exp2(s·LOG2E - (m·LOG2E -
    log2 S))`` in float32 in that order ("exp2_offset"; p·S is never formed; ``exp_arg="fma"``: the argument
    rounded once, :func:`pcast.emulator.ieee.fma32`); exp and exp2 are :mod:`pcast.emulator.ieee`'s."""
    if c.exp2:
        off = (m_safe * LOG2E - c.log2_s)[..., None]
        return _ieee.exp2(_ieee.fma32(sb, LOG2E, -off) if c.fma else torch.mul(sb, LOG2E).sub_(off))
    return _ieee.exp(torch.sub(sb, m_safe[..., None]))


def emulate_attention(q, k, v, *, reverse: bool, scale: float, fmt: FP8Format | None, causal: bool,
                      ksink: int, block_n: int, sm_scale: float, rowsum_rounded: bool, scale_mode: str = "multiply",
                      rescale_threshold: float = 0.0, sink_logit: torch.Tensor | None = None,
                      sink_mode: str = "final", qk_fmt: FP8Format | None = None, qk_scale="tensor",
                      v_fmt: FP8Format | None = None, v_scale="tensor", **decode):
    """Emulate the kernel contract. Arguments are already validated by :func:`pcast.attention`.

    Shapes: q [B, H, Nq, d], k and v [B, H_kv, Nk, d] (H_kv dividing H), all float32 on one device; ``sink_logit`` float32
    [B, H] or None. Returns ``(out [B,H,Nq,d] float32, diag dict of int64 [B,H,Nq])``. ``v`` may also
    be a tuple of such tensors (value sets sharing q and k): ``out`` is then a tuple, one per value
    tensor, each bit-identical to a call with that tensor alone (:func:`pcast.attention_values`).
    ``decode``: ``causal_offset`` (docs/interfaces.md, "Decode-time attention"), ``pv_arith`` and ``pv_promote``
    (step 5 on a tensor core, :mod:`pcast.emulator.tensorcore`); one split with online
    normalisation (several splits or partition normalisation: :func:`pcast.emulator.splits.emulate_splits`).
    The diag dict also holds ``lse``, float32 [B,H,Nq].
    """
    several = isinstance(v, tuple)
    if decode.get("num_splits", 1) > 1 or decode.get("p_normalize", "online") != "online":
        raise ValueError("emulate_attention runs one split with online normalisation; several splits or "
                         "partition normalisation: pcast.emulator.splits.emulate_splits")
    ((outs, diag),) = _emulate(q, k, v if several else (v,), (scale,), reverse=reverse, fmt=fmt, causal=causal,
                               ksink=ksink, block_n=block_n, sm_scale=sm_scale, rowsum_rounded=rowsum_rounded,
                               scale_mode=scale_mode, rescale_threshold=rescale_threshold, sink_logit=sink_logit,
                               sink_mode=sink_mode, qk_fmt=qk_fmt, qk_scale=qk_scale, v_fmt=v_fmt, v_scale=v_scale,
                               **{n: decode[n] for n in _DECODE_NAMES if n in decode})
    return outs if several else outs[0], diag


def emulate_attention_scales(q, k, v: tuple, *, scales, **kwargs) -> list:
    """:func:`emulate_attention` of the value tensors ``v`` (a tuple) at each scale of ``scales``, steps 1-2
    once for all of them: ``scale_mode="multiply"`` only (exp2_offset folds log2 S into step 2).

    Returns one ``(outs, diag)`` per scale, as :func:`emulate_attention` with a tuple ``v`` and
    ``scale=scales[i]`` returns, bit for bit (:func:`pcast.attention_scales`)."""
    if kwargs.get("scale_mode", "multiply") != "multiply":
        raise ValueError(f"scale_mode={kwargs['scale_mode']!r}: several scales share steps 1-2 only with 'multiply'")
    return _emulate(q, k, tuple(v), tuple(scales), **kwargs)


def _buffers(c: _Call, G: int, Nq: int, d: int, device) -> tuple:
    """A call's results before its rows are run: ``outs[i][j]`` float32 [G, Nq, d] (scale i, value tensor
    j) and ``diags[i]`` (every diagnostic, int64 [G, Nq], zeros)."""
    outs = tuple(tuple(torch.empty(G, Nq, d, dtype=torch.float32, device=device) for _ in c.vf) for _ in c.scales)
    diags = tuple({**{n: torch.zeros(G, Nq, dtype=torch.int64, device=device) for n in DIAGNOSTICS},
                   "lse": torch.empty(G, Nq, dtype=torch.float32, device=device)} for _ in c.scales)
    return outs, diags


def _emulate(q, k, v: tuple, scales: tuple, **kwargs) -> list:
    """Lay the call out once and run every chunk of rows (:func:`_rows`); one ``(outs, diag)`` per scale."""
    B, H, Nq, d = q.shape
    c = _layout(q, k, v, scales=scales, **kwargs)
    G = B * H
    outs, diags = _buffers(c, G, Nq, d, q.device)
    rows = chunk_rows(_fused.chunk_elems(c, CHUNK_ELEMS) // (c.nblk * c.block_n), c.tile)
    for g in range(G):
        for r0 in range(0, Nq, rows):
            _rows(c, g, r0, min(Nq, r0 + rows), outs, diags)
    return [(tuple(out.view(B, H, Nq, d) for out in outs_i), {n: t.view(B, H, Nq) for n, t in diag.items()})
            for outs_i, diag in zip(outs, diags)]

