"""Per-head analysis of real attention: sink keys detected, the running-max rule, predictions.

The synthetic generator (:mod:`pcast.models.sinks`) puts ``ksink`` sinks at keys ``0..ksink-1`` with
a known Δ; a real head's sinks and Δ have to be measured. Everything here takes one head's scaled
scores ``s = q·kᵀ·sm_scale`` (``[Nq, Nk]``, masked keys ``-inf``) and is documented in
docs/interfaces.md ("Real attention"):

* :func:`detect_sinks` and :func:`sink_type`: which keys act as sinks, by a fixed robust rule;
* :func:`head_scores_stats`: the measured Δ and σ per row, and the [CLS] (key 0) mass;
* :func:`underflow_mask`: the kernel's running-max rule written directly (an independent
  statement of contract steps 1-3; its count equals the emulator's, tests);
* :func:`mass_underflow`: the exact probability mass of the keys that round to zero;
  :func:`exact_scores`, :func:`rule_applies` and :func:`rule_mass` put the two together for a run
  (the realmodel pipeline and ``pcast-audit --per-head`` both call them);
* :func:`predict_underflow`: the Gaussian theory's prediction from the measured Δ, σ and sinks.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from pcast import theory
from pcast.contract import LOG2E, ORDERS, float32, log2_scale
from pcast.formats import FORMATS, get_format

__all__ = ["SINK_Z", "SINK_ROW_FRACTION", "SINK_TYPES", "detect_sinks", "sink_type", "head_scores_stats",
           "underflow_mask", "mass_underflow", "predict_underflow", "exact_probs", "exact_scores", "rule_applies",
           "rule_mass"]

SINK_Z = 3.0  # a key is outlying in a row when s - median > SINK_Z * 1.4826 * MAD
SINK_ROW_FRACTION = 0.5  # ... and a sink of the head when outlying in at least this fraction of rows
SINK_TYPES = ("clean", "multi", "other", "none")
_MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution times this is its standard deviation


def _scores(scores) -> torch.Tensor:
    s = torch.as_tensor(scores)
    if s.dim() != 2:
        raise ValueError(f"scores must be one head's [Nq, Nk] matrix, got shape {tuple(s.shape)}")
    return s.to(torch.float64)


def detect_sinks(scores, *, z: float = SINK_Z, row_fraction: float = SINK_ROW_FRACTION) -> list[int]:
    """The head's sink keys: outlying (``s - median > z·1.4826·MAD`` in a row) in >= ``row_fraction`` of rows.

    Args:
        scores: [Nq, Nk] scaled scores of one head; -inf marks a masked key (ignored).
        z: the outlier threshold in robust standard deviations, > 0.
        row_fraction: the fraction of rows in (0, 1] in which a key must be outlying.

    Returns:
        the sink key indices, ascending (possibly empty).
    """
    if not (isinstance(z, (int, float)) and math.isfinite(z) and z > 0):
        raise ValueError(f"z={z!r} must be a finite number > 0")
    if not (isinstance(row_fraction, (int, float)) and 0 < row_fraction <= 1):
        raise ValueError(f"row_fraction={row_fraction!r} must be in (0, 1]")
    s = _scores(scores)
    vis = torch.isfinite(s)
    sn = torch.where(vis, s, torch.tensor(float("nan"), dtype=s.dtype))
    med = torch.nanmedian(sn, dim=-1, keepdim=True).values
    mad = torch.nanmedian((sn - med).abs(), dim=-1, keepdim=True).values * _MAD_TO_SIGMA
    outlying = vis & ((s - med) > z * mad)
    seen = vis.sum(0).clamp_min(1)  # rows in which each key is visible
    frac = outlying.sum(0).double() / seen.double()
    return [int(j) for j in torch.nonzero(frac >= row_fraction).flatten()]


def sink_type(sinks) -> str:
    """``clean`` (one sink, key 0), ``multi`` (several), ``other`` (one sink elsewhere), ``none``."""
    sinks = list(sinks)
    if not sinks:
        return "none"
    if len(sinks) > 1:
        return "multi"
    return "clean" if sinks[0] == 0 else "other"


def exact_probs(scores) -> torch.Tensor:
    """float64 softmax of the scores (masked keys 0)."""
    return torch.softmax(_scores(scores), dim=-1)


def _non_sink(s: torch.Tensor, sinks) -> torch.Tensor:
    keep = torch.ones(s.shape[-1], dtype=torch.bool)
    keep[list(sinks)] = False
    return keep


def head_scores_stats(scores, sinks) -> dict:
    """Measured Δ and σ of one head from its scores and sink keys.

    Per row: ``delta`` = the row's largest sink score minus the mean of its visible non-sink
    scores, ``sigma`` = their standard deviation. With no sink, ``delta`` is the row max minus
    that mean (the Δ a kernel would see). Returns float64 arrays ``delta_rows``, ``sigma_rows``
    ([Nq]), their medians ``delta`` and ``sigma``, and ``cls_mass`` (the mean exact softmax
    probability of key 0).
    """
    s = _scores(scores)
    vis = torch.isfinite(s)
    keep = _non_sink(s, sinks)
    ns = torch.where(vis & keep, s, torch.tensor(float("nan"), dtype=s.dtype))
    mean = torch.nanmean(ns, dim=-1)
    cnt = (vis & keep).sum(-1).clamp_min(2).double()
    var = torch.nansum((ns - mean[:, None]) ** 2, dim=-1) / (cnt - 1)
    top = s[:, list(sinks)].amax(-1) if len(sinks) else s.amax(-1)
    delta = (top - mean).numpy()
    sigma = var.sqrt().numpy()
    return {"delta_rows": delta, "sigma_rows": sigma, "delta": float(np.nanmedian(delta)),
            "sigma": float(np.nanmedian(sigma)), "cls_mass": float(exact_probs(s)[:, 0].mean())}


def _check_rule_args(order, scale, block_n, fmt):
    if order not in ORDERS:
        raise ValueError(f"order={order!r} must be one of {', '.join(ORDERS)}")
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale={scale!r} must be a finite number > 0")
    if not (isinstance(block_n, int) and block_n >= 1):
        raise ValueError(f"block_n={block_n!r} must be an integer >= 1")
    return get_format(fmt)


def _max_in_force(bmax: torch.Tensor, order: str, tau: float, m0) -> torch.Tensor:
    """The max each block is processed under: the running max (τ = 0, no ``m0``), or step 2's lazy rule: in
    visiting order the max moves to a block's max bm when it is -inf or when ``(bm - m)·log2 e > τ``
    (in bmax's dtype); ``m0`` (a learned sink logit, ``sink_mode="init"``) is the max each row starts with."""
    if tau == 0.0 and m0 is None:
        if order == "reverse":
            return torch.flip(torch.cummax(torch.flip(bmax, [-1]), dim=-1).values, [-1])
        return torch.cummax(bmax, dim=-1).values
    t = torch.tensor(float32(tau), dtype=torch.float32)
    m = torch.full(bmax.shape[:-1], float("-inf")) if m0 is None else torch.full(bmax.shape[:-1], float32(m0))
    out = torch.empty_like(bmax)
    nblk = bmax.shape[-1]
    for j in (range(nblk - 1, -1, -1) if order == "reverse" else range(nblk)):
        moves = torch.isneginf(m) | ((bmax[..., j] - m) * LOG2E > t)
        m = torch.where(moves, bmax[..., j], m)
        out[..., j] = m
    return out


def underflow_mask(scores: torch.Tensor, *, order: str, scale: float, block_n: int, fmt="e4m3fn",
                   scale_mode: str = "multiply", rescale_threshold: float = 0.0, m0: float | None = None
                   ) -> torch.Tensor:
    """Which keys round to zero under the kernel's running-max rule, decided on exact values.

    Blocks of ``block_n`` keys are visited forward (block 0 first) or in reverse; block j is processed
    under the max in force m_j: ``m_j = max(m_{j-1}, rowmax(block j))``, or with a lazy threshold τ
    (``rescale_threshold``) the block's max only when it exceeds m_{j-1} by more than τ in log2 units, and
    with ``m0`` (a learned sink logit that seeds the max) starting from m0. The unrounded value is
    ``x = exp(s - m_j)·S`` ("multiply") or ``x = 2^((s - m_j)·LOG2E)·S`` ("exp2_offset"), in float64; a key
    underflows iff its unrounded value (p, or exp2_offset's x) is positive in float32 (above 2^-150) and
    ``x <= fmt.underflow_threshold`` (docs/interfaces.md, "Exact decisions"). Keys past Nk (the kernel's
    padding) do not exist here; masked (-inf) keys never count.

    Args:
        scores: [..., Nq, Nk] the exact scores (:func:`exact_scores`: float64 of the float32 operands), or
            scores that float64 holds exactly.
    Returns:
        bool [..., Nq, Nk].
    """
    f = _check_rule_args(order, scale, block_n, fmt)
    if scale_mode not in ("multiply", "exp2_offset"):
        raise ValueError(f"scale_mode={scale_mode!r} must be multiply or exp2_offset")
    if not scores.is_floating_point() or scores.dim() < 2:
        raise ValueError("scores must be a float [..., Nq, Nk] tensor (the exact step-1 scores)")
    scores = scores.double()
    *lead, nq, nk = scores.shape
    nblk = -(-nk // block_n)
    pad = nblk * block_n - nk
    s = torch.nn.functional.pad(scores, (0, pad), value=float("-inf")) if pad else scores
    sb = s.reshape(*lead, nq, nblk, block_n)
    m = _max_in_force(sb.amax(-1), order, float(rescale_threshold), m0)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)[..., None]
    if scale_mode == "exp2_offset":
        x = torch.exp2((sb - m) * LOG2E) * float(scale)
        u = x
    else:
        u = torch.exp(sb - m)
        x = u * float(scale)
    under = (u > 2.0 ** -150) & (x <= f.underflow_threshold)
    return under.reshape(*lead, nq, nblk * block_n)[..., :nk]


def mass_underflow(p_exact: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over rows of the exact probability mass of the keys that round to zero."""
    p = p_exact.to(torch.float64).reshape(-1)
    return float(torch.dot(p, mask.reshape(-1).to(torch.float64))) / max(mask.shape[0], 1)


def exact_scores(q_h: torch.Tensor, k_h: torch.Tensor, sm_scale: float) -> torch.Tensor:
    """One head's exact step-1 scores [Nq, Nk] in float64: ``q·kᵀ`` of the float32 operands times
    ``float32(sm_scale)`` (what the emulator's decisions are made on). No mask."""
    return torch.matmul(q_h.double(), k_h.double().transpose(-1, -2)) * float32(sm_scale)


def rule_applies(kwargs, *, sink_logit=None) -> bool:
    """Whether :func:`underflow_mask` states the rule of a run with these :func:`pcast.attention` keywords:
    multiply or exp2_offset, any lazy threshold, float32 Q and K, an FP8 P format; a learned sink logit seeds
    the max (``sink_mode="init"``, the mask's ``m0``) or stays out of it ("final")."""
    fmt = kwargs.get("fmt", "e4m3fn")
    return (kwargs.get("scale_mode", "multiply") in ("multiply", "exp2_offset") and kwargs.get("qk_fmt") is None
            and fmt is not None and (not isinstance(fmt, str) or fmt in FORMATS))


def rule_mass(scores: torch.Tensor, p_exact: torch.Tensor, kwargs, *, ksink: int, want=None, where: str = "",
              sink_logit: float | None = None) -> float:
    """:func:`mass_underflow` of one head under the running-max rule of a run (``kwargs``: its order, scale,
    block_n, fmt, scale_mode, rescale_threshold, sink_mode). ``want``: the kernel's ``(non-sink,)`` or
    ``(non-sink, sink)`` underflow counts, which the rule's own counts must equal (an independent statement of
    steps 1-3); a RuntimeError naming ``where`` if not. ``sink_logit``: a learned sink logit of the head.
    """
    m0 = sink_logit if sink_logit is not None and kwargs.get("sink_mode", "final") == "init" else None
    mask = underflow_mask(scores, order=kwargs["order"], scale=float(kwargs["scale"]), block_n=int(kwargs["block_n"]),
                          fmt=kwargs.get("fmt", "e4m3fn"), scale_mode=kwargs.get("scale_mode", "multiply"),
                          rescale_threshold=float(kwargs.get("rescale_threshold", 0.0)), m0=m0)
    if want is not None:
        got = (int(torch.count_nonzero(mask[:, ksink:])), int(torch.count_nonzero(mask[:, :ksink])))[:len(want)]
        if got != tuple(want):
            raise RuntimeError(f"{where}: the running-max rule (pcast.models.heads.underflow_mask) counts {got} (non-sink"
                               f"{', sink' if len(want) > 1 else ''}) keys rounding to zero, the kernel {tuple(want)}: "
                               "the kernel's rule and its documented statement disagree")
    return mass_underflow(p_exact, mask)


def predict_underflow(stats: dict, n_sinks: int, *, order: str, scale: float, n: int, block_n: int,
                      fmt="e4m3fn") -> float:
    """The head's non-sink underflow fraction predicted by the Gaussian theory from its measurements.

    :func:`pcast.theory.underflow_fraction` (method "exact": the kernel's block rule, no
    approximation beyond quadrature) with the head's median measured Δ and σ
    (:func:`head_scores_stats`) and ``k = min(n_sinks, block_n)`` sinks, which the theory places
    at keys ``0..k-1``; a head with no sink gets ``k = 0`` (Δ then plays no part). The model takes
    the non-sink scores as iid Gaussian and their positions as exchangeable: the key-shuffled
    control measures the second assumption, the gap to it the first (docs/interfaces.md).
    """
    f = _check_rule_args(order, scale, block_n, fmt)
    k = min(int(n_sinks), block_n, n - 1)
    delta = float(stats["delta"]) if k else 0.0
    sigma = max(float(stats["sigma"]), 1e-12)
    return float(theory.underflow_fraction(delta, float(scale), k=k, fmt=f, sigma=sigma, order=order, n=n,
                                           block_n=block_n, method="exact"))
