"""Exact decisions on the emulator's P path (docs/interfaces.md, "Exact decisions").

The scores stay a float32 BLAS product and ``exp`` torch's float32 one; what is decided (the walk of step 2,
each rounding of step 3, each underflow to zero, each saturation, whether an unrounded value is > 0 in
float32) is decided on the exact value: the one of real arithmetic on the float32 operands, computed in
float64 for the few keys whose float32 value lies within its error bound of a decision's boundary. So the
counts (and every P_q) are the same on every CPU, whatever its sgemm and exp.

The bounds, per query row r and KV block b (``B = ‖q'_r‖·max_{k in b}‖k'_k‖·sm``, Cauchy–Schwarz's bound on
``|s|``):

* a float32 score lies within ``E = (d + 2)·2⁻²³·B`` of the exact one (Higham's ``γ_d``, any summation order,
  with a factor of two to spare);
* a block's exact maximum is among its keys whose float32 score is within ``2E`` of the block's float32
  maximum (the candidates); only rows with a decision of the walk near its threshold have every block
  recomputed (:func:`walk_exact`), elsewhere the float32 walk is the exact one;
* the float32 x (``p·S`` or the exp2 form) lies within a relative ``δ`` of the exact one (:meth:`Chunk.make`:
  the key's score error, the max's actual error, the roundings of ``s − m``, ``m`` and ``log2 S``, eight ulps
  for exp); a key whose x lies within ``δ·x`` of a rounding midpoint, of ``max_finite``, or whose ``s − m``
  lies within 0.5 of where float32 exp underflows, is decided on its float64 value.

Widening any bound only recomputes more keys: each decision is then made on the float64 value, which is exact
for it unless the value lies within about 1e-15 (relative) of the boundary.

Not covered (decided on float32 values): ``scale_mode="per_row"``, partition normalisation and microscaled FP4,
whose x depends on a float32 sum or maximum of other keys' values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from pcast.contract import LOG2E, float32
from pcast.emulator.parts import max_in_force, previous_max, running_max
from pcast.emulator import compiled as _compiled
from pcast.formats import FORMATS, FP8Format
from pcast.formats.rounding import quantize_fast

__all__ = ["in_force", "max_rule", "Bounds", "bounds", "eligible", "block_maxima", "walk_exact", "walked_max", "Chunk",
           "round_exact"]

_U = 2.0 ** -23
#: float32 exp(a) is 0 below about this a (2⁻¹⁵⁰ = e^a rounds to 0, half of the smallest subnormal)
_EXP_ZERO = -150.0 * math.log(2.0)


def exp_edge(c) -> float:
    """Where float32 exp's argument ``s − m`` underflows to 0 for the call ``c``: ``−150·ln 2``, or under
    exp2_offset ``(−150 − log2 S)/LOG2E`` (its x = 2^((s − m)·LOG2E)·S)."""
    return _EXP_ZERO if not c.exp2 else (-150.0 - math.log2(c.scales[0].scale)) / LOG2E


def eligible(fmt, scale_mode: str, p_normalize: str = "online") -> bool:
    """Whether a call's decisions are made exactly: an FP8 or 16-bit P format (or none), ``multiply`` or
    ``exp2_offset``, online normalisation."""
    return (fmt is None or isinstance(fmt, FP8Format)) and scale_mode in ("multiply", "exp2_offset") \
        and p_normalize == "online"


def in_force(c, g: int, r0: int, r1: int, sb: torch.Tensor, bm: torch.Tensor):
    """Step 2's max in force at each block, [rows, nblk] float32, from the scores ``sb`` [rows, nblk, block_n]
    and their block maxima ``bm``; and the chunk's exact decisions (:class:`Chunk`, None where the call is not
    covered): the walk decided on exact values (:func:`walk_exact`)."""
    seed = c.sink[g].expand(bm.shape[0]) if c.sink_init else None
    m = max_rule(c, bm, seed)
    if c.ex is None:
        return m, None
    return walk_exact(c, g, r0, r1, sb, bm, m, lambda b, sd: max_rule(c, b, sd), seed)


def max_rule(c, bm: torch.Tensor, seed) -> torch.Tensor:
    """Step 2's rule over block maxima ``bm`` [rows, nblk] (any float dtype): the cumulative max, or the max
    that moves only past τ (``seed`` [rows]: the max a row starts with, None: -inf)."""
    return running_max(bm, c.reverse) if c.cummax else max_in_force(bm, c.reverse, c.tau, seed)


@dataclass(frozen=True)
class Bounds:
    """A call's operand norms, for the error bounds (float64), and its keys laid out row by row."""

    keys: torch.Tensor  # [G, Np, d] float32, the laid-out keys (zero-padded), contiguous
    qn: torch.Tensor  # [G, Nq] ‖q'_r‖ (times sm when sm was folded into q)
    kn: torch.Tensor  # [G, nblk] the largest ‖k'_k‖ of each KV block (0 for padding)
    kf: torch.Tensor  # [G, Np] float32: kn at each key (rounded up)
    sm: float  # the factor still applied to q'·k' (1 when folded)
    d: int


def bounds(qs: torch.Tensor, kT: torch.Tensor, block_n: int, sm: float) -> Bounds:
    """:class:`Bounds` of the laid-out queries ``qs`` [G, Nq, d] and keys ``kT`` [G, d, Np]."""
    G, d, np_ = kT.shape
    keys = kT.transpose(-1, -2).contiguous()
    kn = torch.linalg.vector_norm(keys, dim=-1, dtype=torch.float64).view(G, np_ // block_n, block_n).amax(-1)
    kf = (kn * (1 + 2.0 ** -20)).to(torch.float32).repeat_interleave(block_n, dim=1)
    qn = torch.linalg.vector_norm(qs, dim=-1, dtype=torch.float64)
    return Bounds(keys=keys, qn=qn, kn=kn, kf=kf, sm=sm, d=d)


def _norm_product(c, g: int, rows) -> torch.Tensor:
    """[rows, nblk] B = ‖q'_r‖·max‖k'‖·sm, float64; ``rows`` a slice or an index tensor of absolute rows."""
    b = c.ex
    return b.qn[g][rows][:, None] * b.kn[g][None, :] * b.sm


def exact_scores(c, g: int, rows: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """float64 scores of (row, key) pairs of head g (rows absolute, keys padded positions): ``q'·k'`` of the
    float32 operands, times sm where it was not folded into q'."""
    s = (c.qs[g].index_select(0, rows).double() * c.ex.keys[g].index_select(0, keys).double()).sum(-1)
    return s if c.sm_pow2 else s * float32(c.sm_scale)


def _score_error(c, g: int, rows, nb: int) -> torch.Tensor:
    """[rows, nb] the bound E on a float32 score's error, per row and block."""
    return ((c.ex.d + 2) * _U) * _norm_product(c, g, rows)[:, :nb]


def block_maxima(c, g: int, rows, sb: torch.Tensor, bm: torch.Tensor, which: torch.Tensor | None = None
                 ) -> torch.Tensor:
    """The exact maximum of each block of the float32 scores ``sb`` [rows, nb, block_n] (the first nb blocks of
    the rows ``rows``: a slice or an index tensor of absolute rows), [rows, nb] float64, from ``bm`` their
    float32 block maxima: the candidates (keys within 2E of their block's float32 maximum) recomputed in
    float64. ``which`` [rows, nb] bool: only those blocks (NaN elsewhere); None: every block."""
    nr, nblk, bn = sb.shape
    out = torch.full((nr * nblk,), float("nan"), dtype=torch.float64, device=sb.device)
    rb = torch.arange(nr * nblk, device=sb.device) if which is None else which.flatten().nonzero().flatten()
    if not rb.numel():
        return out.view(nr, nblk)
    lo = bm.double().flatten()[rb] - 2.0 * _score_error(c, g, rows, nblk).flatten()[rb]
    lo = torch.nextafter(lo.to(torch.float32), torch.tensor(float("-inf"), device=sb.device))  # (still a bound)
    blocks = sb.reshape(nr * nblk, bn).index_select(0, rb)
    i, kk = ((blocks >= lo[:, None]) & (blocks > float("-inf"))).nonzero(as_tuple=True)
    out[rb] = float("-inf")
    pos = rb[i]
    ri = pos // nblk
    absolute = ri + rows.start if isinstance(rows, slice) else rows[ri]
    out.scatter_reduce_(0, pos, exact_scores(c, g, absolute, (pos % nblk) * bn + kk), reduce="amax")
    return out.view(nr, nblk)


def walk_exact(c, g: int, r0: int, r1: int, sb: torch.Tensor, bm: torch.Tensor, m: torch.Tensor, rule, seed=None,
               every: bool = False):
    """Step 2's walk decided on exact values: ``(m, chunk)``, m [rows, nblk] the float32 max in force at each
    block along the exact walk, from the float32 walk ``m = rule(bm, seed)`` of the block maxima ``bm``.

    A decision of the walk (does block j move the max: ``bm_j`` against the max before it plus τ/LOG2E) whose
    float32 values lie within a margin (3E and a few ulps) of each other may go the other way exactly; a row
    with one has every block's exact maximum recomputed (:func:`block_maxima`) and the rule run on them in
    float64. Elsewhere the exact walk is the float32 one: the same blocks set the max. ``every``: every row
    recomputed (a rule that restarts within the row, as splits do)."""
    nr, nblk = bm.shape
    if every:
        near = torch.ones(nr, dtype=torch.bool, device=bm.device)
    else:
        prev = previous_max(m, c.reverse, seed).double()
        gap = (bm.double() - prev - (c.tau / LOG2E if c.tau else 0.0)).abs()
        margin = 3.0 * _score_error(c, g, slice(r0, r1), nblk) + 2.0 ** -20 * (bm.double().abs() + 1.0)
        near = ((gap <= margin) & ~torch.isneginf(prev)).any(-1)
    full = None
    if bool(near.any()):
        idx = near.nonzero().flatten()
        bm64 = block_maxima(c, g, idx + r0, sb[idx], bm[idx])
        m64 = rule(bm64, None if seed is None else seed[idx])
        m = m.clone()
        m[idx] = walked_max(bm[idx], bm64, m64, None if seed is None else seed[idx])
        full = (idx, m64)
    return m, Chunk.make(c, g, r0, r1, bm, m, seed, full, _setter_maxima(c, g, r0, sb, bm, m))


def _setter_maxima(c, g: int, r0: int, sb: torch.Tensor, bm: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """[rows, nblk] float64: the exact maximum of each block whose float32 maximum is the max in force there
    (the blocks that set the max), NaN elsewhere (:func:`block_maxima`)."""
    return block_maxima(c, g, slice(r0, r0 + sb.shape[0]), sb, bm, (m == bm) & ~torch.isneginf(bm))


def walked_max(bm: torch.Tensor, bm64: torch.Tensor, m64: torch.Tensor, seed=None) -> torch.Tensor:
    """The float32 max in force at each block, [rows, nblk], along the exact walk ``m64`` (from the exact block
    maxima ``bm64``): the float32 maximum ``bm`` of the block whose exact maximum is in force there (the seed
    where the seed is, -inf before any key). So the float32 steps compute as the contract's float32 walk does,
    and only a decision that its float32 values would take otherwise differs."""
    hit = m64[:, :, None] == bm64[:, None, :]  # [rows, j, k]: block k's exact maximum is in force at block j
    k = hit.to(torch.uint8).argmax(-1)
    out = bm.gather(1, k)
    rest = ~hit.any(-1)  # the seed, or -inf
    if bool(rest.any()):
        fill = torch.full_like(out, float("-inf")) if seed is None else seed.to(out.dtype)[:, None].expand_as(out)
        out = torch.where(rest, fill, out)
    return out


def round_exact(x: torch.Tensor, fmt: FP8Format) -> torch.Tensor:
    """float64 ``x >= 0`` rounded onto ``fmt``'s grid, half to even, saturating at max_finite (float64)."""
    _, e = torch.frexp(x)  # x = f·2^e, f in [0.5, 1): the binade is 2^(e-1)
    step = torch.exp2((torch.clamp(e - 1, min=fmt.emin) - fmt.man_bits).to(torch.float64))
    return torch.clamp(torch.round(x / step) * step, max=fmt.max_finite)


def _cast_and_mark(x: torch.Tensor, delta: torch.Tensor, bn: int, fmt: FP8Format, check_saturation: bool):
    """Step 3's rounding of x [rows, nb·bn] (a new tensor) and the keys to decide on their float64 value: where
    ``h/2 - |x - p_q| <= δ·x`` (h the grid step at x: 2^(e - m), e x's float32 binade, at least emin) and x > 0
    (x = 0: a masked key, or exp's underflow, :meth:`Chunk.terms_keys`), or (``check_saturation``) x within
    ``2δ`` of max_finite. :mod:`pcast.emulator.compiled` is the same in one pass."""
    nr, nb = x.shape[0], x.shape[1] // bn
    pq = quantize_fast(x, fmt, saturate=check_saturation)
    h = (x.view(torch.int32) & 0x7F800000).view(torch.float32).clamp_min_(fmt.min_normal).mul_(
        2.0 ** -(fmt.man_bits + 1))
    r = torch.sub(x, pq).abs_()
    r.view(nr, nb, bn).addcmul_(x.view(nr, nb, bn), delta.to(torch.float32)[..., None])
    near = (r >= h) & (x > 0)
    if check_saturation:
        dist = (x - fmt.max_finite).abs_().view(nr, nb, bn)
        near |= (dist <= (2.0 * fmt.max_finite * delta).to(torch.float32)[..., None]).view(nr, -1)
    return pq, near


@dataclass
class Chunk:
    """One chunk of rows of one head under one call, once its walk is known: what step 3's exact decisions
    need. The exact max in force at a block is the exact maximum of the block that set it (the first block in
    visiting order whose float32 maximum ``bm`` is the walked max ``m`` there), or the seed; rows whose walk
    was recomputed keep their exact maxima in ``full``."""

    c: object  # the call laid out (pcast.emulator.core._Call)
    g: int
    r0: int
    r1: int
    bm: torch.Tensor  # [rows, nblk] float32 block maxima
    m: torch.Tensor  # [rows, nblk] float32 max in force along the exact walk
    seed: torch.Tensor | None  # [rows] the max a row starts with, or None
    full: tuple | None  # (row indices, [n, nblk] float64 exact max in force) of the rows recomputed
    setters: torch.Tensor  # [rows, nblk] float64 exact maxima of the blocks that set the max (NaN elsewhere)
    a: torch.Tensor  # [rows] float64: the relative bound on x's float32 error is a·max‖k'‖ (its block) + cc
    cc: torch.Tensor  # [rows] float64

    @classmethod
    def make(cls, c, g: int, r0: int, r1: int, bm, m, seed, full, setters) -> "Chunk":
        # δ = a·max‖k'‖ + cc per row and block: the key's score error and s - m's rounding (a); the max's
        # actual error, |float32 m - exact m| at the row's worst block, its rounding, log2 S's and exp's (cc)
        # (every max in force is a setter block's maximum, or the seed, exact as it is)
        err = torch.where(torch.isnan(setters), torch.zeros_like(setters), (bm.double() - setters).abs()).amax(-1)
        if full is not None:
            idx, m64 = full
            fin = ~torch.isneginf(m64)
            err[idx] = torch.where(fin, (m[idx].double() - m64).abs(), torch.zeros_like(m64)).amax(-1)
        mabs = torch.where(~torch.isneginf(m), m, torch.zeros_like(m)).abs().amax(-1).double()
        log2s = abs(c.log2_s) if c.exp2 else 0.0
        a = (1.01 * (c.ex.d + 1) * _U / 2 + 2 * _U) * c.ex.qn[g, r0:r1] * c.ex.sm
        cc = 1.01 * err + 4 * _U * mabs + _U * log2s + 8 * _U
        return cls(c=c, g=g, r0=r0, r1=r1, bm=bm, m=m, seed=seed, full=full, setters=setters, a=a, cc=cc)

    @property
    def delta(self) -> torch.Tensor:
        """[rows, nblk] float64: the relative bound on x's float32 error, per row and block."""
        return self.a[:, None] * self.c.ex.kn[self.g][None, :] + self.cc[:, None]

    def exact_max(self, ri: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """float64 exact max in force at blocks ``b`` of rows ``ri`` (relative to r0)."""
        c, bn = self.c, self.c.block_n
        nblk = self.bm.shape[1]
        out = torch.empty(ri.shape, dtype=torch.float64, device=ri.device)
        done = torch.zeros(ri.shape, dtype=torch.bool, device=ri.device)
        if self.full is not None:
            pos = torch.full((self.bm.shape[0],), -1, dtype=torch.long, device=ri.device)
            pos[self.full[0]] = torch.arange(self.full[0].numel(), device=ri.device)
            done = pos[ri] >= 0
            out[done] = self.full[1][pos[ri[done]], b[done]]
        rest = (~done).nonzero().flatten()
        if rest.numel():
            r, j = ri[rest], b[rest]
            ks = torch.arange(nblk, device=ri.device)
            seen = (ks[None, :] >= j[:, None]) if c.reverse else (ks[None, :] <= j[:, None])
            hit = (self.bm[r] == self.m[r, j][:, None]) & seen
            k = (nblk - 1 - hit.flip(-1).to(torch.uint8).argmax(-1)) if c.reverse else hit.to(torch.uint8).argmax(-1)
            val = self.setters[r, k]
            has = hit.any(-1)
            if self.seed is not None:
                val = torch.where(has, val, self.seed[r].double())
            out[rest] = val
        return out

    def exact_x(self, ri: torch.Tensor, key: torch.Tensor, scale: float) -> torch.Tensor:
        """float64 exact x (``exp(s - m)·S``, or ``exp2((s - m)·LOG2E + log2 S)``) of the (row, key) pairs
        (rows relative to r0, keys padded positions)."""
        c = self.c
        s = exact_scores(c, self.g, ri + self.r0, key)
        m = self.exact_max(ri, key // c.block_n)
        m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        if c.exp2:  # log2 S enters exactly: the float32 rounding of log2_scale(S) is not a decision
            return torch.exp2((s - m) * LOG2E) * scale
        return torch.exp(s - m) * scale

    def terms_keys(self, sb: torch.Tensor, m: torch.Tensor, j0: int = 0):
        """Before step 2's exp: the (row, key) pairs of ``sb`` [rows, nb, block_n] (blocks j0 on, float32
        scores) whose ``s - m`` lies within 0.5 of where float32 exp underflows to 0, or None (the usual case:
        no row's bound reaches there). ``m`` [rows, nb]: the float32 max in force."""
        c = self.c
        edge = exp_edge(c)
        nr, nb, bn = sb.shape
        reach = 2.0 * _norm_product(c, self.g, slice(self.r0, self.r1))[:, j0:j0 + nb] + \
            self.m[:, j0:j0 + nb].abs().double() + 1.0
        rb = (reach >= abs(edge) - 1.0).flatten().nonzero().flatten()  # blocks whose bound reaches the edge
        if not rb.numel():
            return None
        m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m).flatten()[rb]
        arg = sb.reshape(nr * nb, bn).index_select(0, rb) - m_safe[:, None]
        i, kk = ((arg - edge).abs() <= 0.5).nonzero(as_tuple=True)
        if not i.numel():
            return None
        ri, j = rb[i] // nb, rb[i] % nb
        return ri, (j + j0) * bn + kk, j * bn + kk

    def fix_terms(self, u: torch.Tensor, keys) -> None:
        """After step 2: the unrounded value u [rows, cols] of the pairs ``keys`` (from :meth:`terms_keys`)
        set to float32 of its exact value, so that ``u > 0`` is decided exactly."""
        if keys is None:
            return
        ri, key, col = keys
        x = self.exact_x(ri, key, self.c.scales[0].scale if self.c.exp2 else 1.0)  # (u: p, or exp2_offset's x)
        u.view(u.shape[0], -1)[ri, col] = x.to(torch.float32)

    def cast(self, x: torch.Tensor, scale: float, saturated: torch.Tensor | None, check_saturation: bool,
             j0: int = 0) -> torch.Tensor:
        """Step 3's rounding of x [rows, nb·block_n] (blocks j0 on), decided on exact values: a new tensor
        p_q. ``saturated`` [rows] int64 (or None): the float32 count of x > max_finite, corrected in place."""
        c, fmt = self.c, self.c.fmt
        if fmt is None:
            return x
        bn = c.block_n
        if _compiled.AVAILABLE and x.device.type == "cpu" and fmt.name in FORMATS:
            kf = c.ex.kf[self.g, j0 * bn:j0 * bn + x.shape[1]]
            pq, near = _compiled.cast_and_mark(x, self.a, self.cc, kf, fmt, check_saturation)
        else:
            pq, near = _cast_and_mark(x, self.delta[:, j0:j0 + x.shape[1] // bn], bn, fmt, check_saturation)
        ri, col = near.nonzero(as_tuple=True)
        if ri.numel():
            x64 = self.exact_x(ri, col + j0 * bn, scale)
            if saturated is not None and check_saturation:
                was = (x[ri, col] > fmt.max_finite).to(torch.int64)
                now = (x64 > fmt.max_finite).to(torch.int64)
                saturated.index_add_(0, ri, (now - was).to(saturated.dtype))
            pq[ri, col] = round_exact(x64, fmt).to(torch.float32)
        return pq

