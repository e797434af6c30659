"""Two reported cases about P's scale S: FlashAttention-4's offset-plus-threshold bound and cuDNN's ignored
``scale_s`` (rows of table T9, gathered in :data:`pcast.probes.cases.CASES`).

* FlashAttention-4 (SM100, FP8 P): P = exp2(s·log2 e − m + offset) against a running max that stays stale
  while a tile raises it by at most the lazy-rescale threshold τ (log2 units). With offset 8 (S = 256) and
  τ = 4, P reaches 2^12 = 4096 > 448 and saturates, while the float32 row sum keeps the unsaturated value.
  The fixes keep offset + τ ≤ log2 448 ≈ 8.807: the offset floor(log2 448 − τ) = 4, τ = 0 (always rescale)
  or τ = 0.75 (< log2 448 − 8 ≈ 0.807). The case rebuilds the mechanism on a probe (the max found one block
  late) and on the reports' paged-decode fixture.
* cuDNN's FP8 SDPA engines dropped ``scale_s`` and ``descale_s`` and cast P unscaled (an implicit S = 1).
  The convention (PR 509): the max and the tile sum on the unscaled softmax, P multiplied by ``scale_s`` just
  before the cast, ``descale_s`` folded into the output's scale. That is the contract's ``scale_mode=
  "multiply"`` with ``rowsum="unrounded"`` (docs/interfaces.md, steps 2–6), so a kernel that applies a
  declared S is the policy with that S and one that ignores it the same policy with S = 1. With a reciprocal
  power-of-two pair and no P below E4M3's normals the two give identical O (the blind spot of the engines'
  tests); with a pair that is no power of two they differ.
"""

from __future__ import annotations

import functools
import math

import torch

from pcast.formats.quantize import quantize
from pcast.policies import POLICIES, Policy
from pcast.probes.case_model import Case, Measurement
from pcast.probes.expect import ATOL, RTOL, exact, expected
from pcast.probes.inputs import Probe

__all__ = ["FA4", "CUDNN_SCALE_S", "DECODE_LENGTHS", "saturating_lengths", "scale_s_differences"]

# ----------------------------------------------------------------------------- FlashAttention-4 SM100 FP8
_FA4_OFFSET8 = POLICIES["fa4"].replace(name="fa4-offset8-tau4", scale=256.0, rescale_threshold=4.0)
_FA4_FIXED = _FA4_OFFSET8.replace(name="fa4-offset4-tau4", scale=2.0 ** math.floor(math.log2(448) - 4.0))
_FA4_TAU0 = _FA4_OFFSET8.replace(name="fa4-offset8-tau0", rescale_threshold=0.0)
_FA4_TAU075 = _FA4_OFFSET8.replace(name="fa4-offset8-tau0.75", rescale_threshold=0.75)
DECODE_LENGTHS = range(1, 1024)  # the reports' kv_seqlen 1–1023, every length
_DECODE = dict(heads=6, d=128, seed=0)  # GQA 6:1 at head_dim 128; the seed is this project's (none given)


def _stale(lift: float, n: int = 256) -> Probe:
    """Key 0 at ``lift`` (natural units) above n − 1 keys at 0: reverse order sees it last, one block late."""
    row = torch.zeros(n)
    row[0] = lift
    return Probe(f"stale-max-{lift:g}", "the max arrives one block late", "out[...,1]", row[None].to(torch.float32))


def _dominant_loss(policy: Policy) -> float:
    """Fraction of the dominant key's weight lost at a lift just under 4 log2 units (τ of the pre-fix kernel)."""
    probe = _stale((4.0 - 2.0 ** -10) / math.log2(math.e))
    return 1.0 - float(expected(probe, policy).out[0, 0, 0, 1]) / float(exact(probe)[0, 1])


def _saturation_onset(policy: Policy) -> float:
    """The smallest lift (natural units) at which a P saturates, to 1e-5 by bisection."""
    lo, hi = 0.0, 2.0
    while hi - lo > 1e-5:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if int(expected(_stale(mid), policy).saturated.sum()) else (mid, hi)
    return hi


def _largest_safe_threshold(policy: Policy) -> float:
    """The largest τ (log2 units, to 1e-5) at which a max found one block late by just under τ saturates no P."""
    lo, hi = 0.0, 4.0
    while hi - lo > 1e-5:
        mid = (lo + hi) / 2
        probe = _stale(mid * (1 - 2.0 ** -16) / math.log2(math.e))
        saturates = int(expected(probe, policy.replace(rescale_threshold=mid)).saturated.sum())
        lo, hi = (lo, mid) if saturates else (mid, hi)
    return lo


@functools.lru_cache(maxsize=1)
def _decode_scores() -> torch.Tensor:
    """The six query heads' scores [6, 1023] against one KV head: q, k ~ N(0, 1) rounded to E4M3 (FP8 inputs,
    unit descales), s = q·kᵀ/√128 in float32."""
    g = torch.Generator().manual_seed(_DECODE["seed"])
    q = quantize(torch.randn(_DECODE["heads"], _DECODE["d"], generator=g), "e4m3fn")
    k = quantize(torch.randn(max(DECODE_LENGTHS), _DECODE["d"], generator=g), "e4m3fn")
    return (q @ k.T) / math.sqrt(_DECODE["d"])


@functools.lru_cache(maxsize=None)
def saturating_lengths(threshold: float) -> int:
    """How many kv lengths of :data:`DECODE_LENGTHS` saturate some P of the paged-decode fixture at offset 8
    and lazy-rescale threshold ``threshold`` (a 128-key page is the kernel's 128-key tile, so paging moves
    no number)."""
    scores, policy = _decode_scores(), _FA4_OFFSET8.replace(rescale_threshold=threshold)
    probes = (Probe(f"decode-{n}", "paged decode", "saturated", scores[:, :n].contiguous()) for n in DECODE_LENGTHS)
    return sum(int(expected(p, policy).saturated.sum()) > 0 for p in probes)


FA4 = Case(
    "fa4-sm100-fp8", "Dao-AILab/flash-attention",
    "issues 2577, 2716; PRs 2578, 2694, 2713, 2717, 2731; vllm-project/flash-attention PR 166",
    "https://github.com/Dao-AILab/flash-attention/pull/2717",
    "reverse, exp2 offset 8 (S = 256), lazy rescale tau = 4, E4M3, 128-key blocks; fixes: offset "
    "floor(log2 448 - tau) = 4 (S = 16; PR 2717), tau = 0 (always rescale; PR 2578), tau = 0.75 "
    "(< log2 448 - 8; PR 2731, vllm-project/flash-attention PR 166)",
    "256 keys at 0 but key 0, lifted by just under tau (the max found one block late); the reports' paged "
    "decode: GQA 6:1 (six query heads, one KV head), head_dim 128, page 128 (the 128-key tile), every "
    "kv_seqlen 1-1023, q and k N(0, 1) rounded to E4M3 (seed 0: the reports draw random inputs and give no "
    "seed); random-data tables of the reports are not rebuildable",
    (Measurement("headroom before P clips (PR 2694, natural units)", 0.56, 2, lambda: _saturation_onset(_FA4_OFFSET8)),
     Measurement("dominant key's weight lost (PR 2713: 1 - 448/4096)", 0.89, 2, lambda: _dominant_loss(_FA4_OFFSET8)),
     Measurement("fix (PR 2717): dominant key's weight lost (the PR: no saturation)", 0.0, 2, lambda: _dominant_loss(_FA4_FIXED)),
     Measurement("largest tau with no saturation at offset 8 (PR 166: log2 448 - 8)", 0.807, 3,
                 lambda: _largest_safe_threshold(_FA4_OFFSET8)),
     Measurement("fix tau = 0 (PR 2578): dominant key's weight lost", 0.0, 2, lambda: _dominant_loss(_FA4_TAU0)),
     Measurement("fix tau = 0.75 (PR 2731, PR 166): dominant key's weight lost", 0.0, 2, lambda: _dominant_loss(_FA4_TAU075)),
     Measurement("paged decode, tau = 4: some kv_seqlen saturates a P (1 yes, 0 no; issue 2577: 2^12 > 448)", 1, 0,
                 lambda: float(saturating_lengths(4.0) > 0)),
     Measurement("paged decode, fix tau = 0 (PR 2578): kv_seqlens with a saturated P", 0, 0, lambda: saturating_lengths(0.0)),
     Measurement("paged decode, fix tau = 0.75 (PR 2731, PR 166): kv_seqlens with a saturated P", 0, 0,
                 lambda: saturating_lengths(0.75)),
     Measurement("cosine similarity at 128 keys (issue 2577)", 0.86, 2, None,
                 "random FP8 inputs and a bf16 reference on a B300; the data are not given (on the paged-decode "
                 "draw here, no P saturates up to kv_seqlen 128, one 128-key tile holding no stale max, and some "
                 "P saturates at every length above it)"),
     Measurement("rel_l2 error, logit std 2.0, offset 8 (PR 2694)", 0.361, 3, None,
                 "random FP8 inputs against the bf16 kernel on a B300; the data are not given")),
    title="FlashAttention-4 SM100 FP8", group="FlashAttention-4",
    checks="headroom ln(448/256) ≈ 0.56 before P clips; the dominant key loses 1 − 448/4096 ≈ 0.89 of its weight; "
           "the dtype-aware offset (S = 16 with τ = 4) and τ = 0 and τ = 0.75 lose none; the largest safe τ at "
           "offset 8 is log2 448 − 8 ≈ 0.807; on the paged-decode fixture (kv_seqlen 1–1023) P saturates at "
           "τ = 4 and at no length under τ = 0 or 0.75",
)


# ----------------------------------------------------------------------------- cuDNN FP8 SDPA: scale_s dropped
_FORT = Policy("cudnn-fp8-fort", order="forward", scale=1.0, scale_mode="multiply", rowsum="unrounded", block_n=128)
_NORMAL_ROW = Probe("normal-row", "every P in E4M3's normal range at S = 1, none above 448 at S = 448", "every column",
                    torch.linspace(-4.0, 0.0, 256)[None])  # P >= e^-4 > 2^-6 (E4M3's smallest normal)


def scale_s_differences(scale_s: float) -> int:
    """Output elements (of 16) where the kernel that applies the pair (``scale_s``, 1/``scale_s``) and the one
    that ignores it (S = 1) differ, bit for bit, on one row of 256 logits evenly spaced over [−4, 0]."""
    applies = expected(_NORMAL_ROW, _FORT.replace(scale=scale_s)).out
    ignores = expected(_NORMAL_ROW, _FORT).out
    return int((applies != ignores).sum())


def _fort_loop(probe: Probe, scale_s: float, descale_s: float, tile: int = 128) -> torch.Tensor:
    """The convention's kernel in plain torch, float32: per 128-key tile the running max and P = exp(s − m) of the
    unscaled softmax, the tile sum of that P, P·scale_s cast to E4M3 (round to nearest even, saturating) for
    P·V, the accumulator rescaled by exp(m_old − m); O = acc·descale_s / l."""
    q, k, v, _ = probe.tensors()
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    m = torch.full(s.shape[:-1] + (1,), -math.inf)
    row_sum, acc = torch.zeros_like(m), torch.zeros(q.shape[:-1] + (v.shape[-1],))
    for j in range(0, s.shape[-1], tile):
        m_new = torch.maximum(m, s[..., j:j + tile].amax(-1, keepdim=True))
        alpha, p = torch.exp(m - m_new), torch.exp(s[..., j:j + tile] - m_new)
        p_q = (p * scale_s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).to(torch.float32)
        row_sum, acc, m = row_sum * alpha + p.sum(-1, keepdim=True), acc * alpha + p_q @ v[..., j:j + tile, :], m_new
    return acc * descale_s / row_sum


def _fix_outside(scale_s: float) -> int:
    """Output elements where the convention's kernel lies outside the probes' tolerance of the contract's S."""
    want = expected(_NORMAL_ROW, _FORT.replace(scale=scale_s)).out
    got = _fort_loop(_NORMAL_ROW, scale_s, 1.0 / scale_s)
    return int(((got - want).abs() > ATOL + RTOL * want.abs()).sum())


CUDNN_SCALE_S = Case(
    "cudnn-fp8-scale-s", "NVIDIA/cudnn-frontend", "issue 520; PRs 509, 619",
    "https://github.com/NVIDIA/cudnn-frontend/issues/520",
    "declared: forward, 128-key tiles, P = exp(s - m) with the max and the tile sum of the unscaled P, "
    "P·scale_s cast to E4M3, descale_s on the output (multiply, row sum unrounded); the engines: the same "
    "with scale_s and descale_s dropped (S = 1); fix (PR 509): apply both as declared",
    "one query row of 256 logits evenly spaced over [-4, 0] (every P in E4M3's normal range at S = 1, none "
    "above 448 at S = 448), the probes' V (16 columns); pairs (2, 1/2), a power of two, and (448, 1/448), "
    "scale_s = 448/amax with amax 1, no power of two (the reports give no data)",
    (Measurement("pair (2, 1/2): outputs where applying and ignoring the pair differ (PR 509: identical O)",
                 0, 0, lambda: scale_s_differences(2.0)),
     Measurement("pair (448, 1/448): applying and ignoring the pair differ (1 yes, 0 no; PR 619: not equivalent "
                 "after FP8 quantization)", 1, 0, lambda: float(scale_s_differences(448.0) > 0)),
     Measurement("fix (PR 509): outputs of the convention's kernel outside the tolerance of the contract's "
                 "S = 448", 0, 0, lambda: _fix_outside(448.0))),
    title="cuDNN FP8 SDPA, scale_s dropped", group="cuDNN",
    checks="the blind spot: the pair (2, 1/2) applied and ignored give identical O on P in E4M3's normal range, "
           "the pair (448, 1/448) does not; the fix (the convention's kernel in plain torch) is the contract's "
           "S = 448 within the probes' tolerance",
)
