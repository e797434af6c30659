"""pcast-audit's per-head measures: the head's sink strength Δ and spread σ, the theory's critical Δc of
each run and the head's distance to it (all three in logits, :func:`delta_c`), and ``mass_underflow``, the exact softmax mass of the keys that
round to zero under the run's rule (:func:`pcast.models.heads.underflow_mask`: multiply or exp2_offset,
any lazy threshold τ, a sink logit that seeds the max), checked against the kernel's own count.

Used by :mod:`pcast.audit.heads`.
"""

from __future__ import annotations

import math

from pcast.contract import float32

from pcast.formats import FORMATS

from pcast.models.heads import exact_probs, head_scores_stats, rule_applies, rule_mass

from pcast.reference import causal_mask

from pcast.theory.policy import critical_delta_policy

MEASURE_COLUMNS = ("mass_underflow", "mass_lost_share", "delta", "sigma", "delta_c", "distance_to_delta_c")


def _product(q, k, b: int, h: int):
    """float64 ``q·kᵀ`` [Nq, Nk] of (batch b, head h); head h reads key head ``h // (H / H_kv)``."""
    return q[b, h].double() @ k[b, h // (q.shape[1] // k.shape[1])].double().transpose(0, 1)


def _scaled(qk, sm: float, *, causal: bool, offset: int):
    """``qk·sm`` with masked keys at -inf (causal: key j visible to row i when ``j <= i + offset``)."""
    s = qk * sm
    if causal:
        s = s.masked_fill(~causal_mask(s.shape[0], s.shape[1], device=s.device, offset=offset), float("-inf"))
    return s


def head_scores64(q, k, b: int, h: int, *, sm_scale: float | None, causal: bool, offset: int = 0):
    """Scaled float64 scores ``q·kᵀ·sm_scale`` [Nq, Nk] of (batch b, head h); masked keys -inf (causal: key j
    visible to row i when ``j <= i + offset``).
    Grouped-query attention: head h reads key head ``h // (H / H_kv)``."""
    sm = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
    return _scaled(_product(q, k, b, h), sm, causal=causal, offset=offset)


def head_measures(q, k, b: int, h: int, *, sm_scale, causal: bool, sinks, offset: int = 0) -> dict:
    """What the runs of head (b, h) share: the exact step-1 scores (``scores``: the product times
    ``float32(sm_scale)``, :func:`pcast.models.heads.exact_scores`, what the decisions are made on), the float64
    reference probabilities (``p_exact``), and Δ, σ (medians over rows,
    :func:`pcast.models.heads.head_scores_stats`, with ``sinks`` the head's sink keys) and their count."""
    sm = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
    qk = _product(q, k, b, h)
    s64 = _scaled(qk, sm, causal=causal, offset=offset)
    st = head_scores_stats(s64, list(sinks))
    return {"scores": _scaled(qk, float32(sm), causal=causal, offset=offset), "p_exact": exact_probs(s64),
            "delta": st["delta"], "sigma": st["sigma"], "n_sinks": len(sinks), "masses": {}}


def delta_c(full: dict, n_sinks: int):
    """The half-underflow crossing Δc of a run for the Δ the audit measures, in logits; None where the run does
    not collapse from sink keys.

    The audit's Δ is a row's largest sink score minus the mean of its non-sink scores, and σ their standard
    deviation (:func:`pcast.models.heads.head_scores_stats`, medians over rows). Forward order meets the sink
    block first, so the max in force for every non-sink key is that largest sink score, ``mean + Δ`` (eager, or
    lazy: a later block moves it only to a larger score). A non-sink key of score s gets ``x = S·exp(s − mean − Δ)``
    and rounds to zero iff ``s − mean ≤ Δ − c`` with ``c = ln(1/u_f) + ln S`` (e4m3fn: 10 ln 2 = 6.93; the S
    an exp2 offset really applies). With the non-sink scores spread N(mean, σ²) the fraction that rounds to zero
    is ``Φ((Δ − c)/σ)``: one half at ``Δc = c = 6.93 + ln S`` whatever σ is; σ sets only how steeply it rises.
    The paper's Δ is the sink block's shift, whose max is Δ + σ·δk; the measured max already holds δk, so δk is
    not subtracted here (:func:`pcast.theory.critical_delta` with k = 1, where δ1 = 0). The distance to Δc is
    ``Δc − Δ`` in logits: negative past it (more than half round to zero), ``(Δc − Δ)/σ`` standard deviations.
    The law holds while the sink is the max in force; where the non-sink keys' own max (about σ·sqrt(2 ln n))
    passes ``c``, more than half of them round to zero from their spread whatever the sink, in either order.

    None for reverse order (the sink's block comes last), no sink key, a per-row scale or a microscaled format.
    """
    fmt = full["fmt"]
    if (full["order"] != "forward" or n_sinks < 1 or not isinstance(fmt, str) or fmt not in FORMATS
            or full["scale_mode"] not in ("multiply", "exp2_offset")):
        return None
    return critical_delta_policy(float(full["scale"]), k=1, fmt=fmt, order="forward",
                                 scale_mode=full["scale_mode"], rescale_threshold=float(full["rescale_threshold"]))


def run_measures(hm: dict, hr: dict, full: dict, *, ksink: int, sink_logit, where: str) -> dict:
    """The measures of one head row ``hr`` (its run's keywords ``full``): mass_underflow (0 for fmt=None,
    nothing rounds; None where the rule does not describe the run: Q/K casts, microscaled P), mass_lost_share
    (mass_underflow over the non-sink attention mass, both means over rows: the share of what the non-sink keys
    carry that is lost), Δ, σ, Δc and the
    distance Δc − Δ (logits, :func:`delta_c`). On the emulator (the same step-1 matmul; Triton's scores may differ by an ulp,
    :mod:`pcast.conformance`) the rule's non-sink count must be the kernel's underflow count."""
    mass = None
    if full["fmt"] is None and full["qk_fmt"] is None:
        mass = 0.0
    elif rule_applies(full):
        want = (hr["underflow"],) if hr["backend"] == "emulator" else None
        key = (repr(sorted(full.items())), want)  # runs with the same rule (yours and a combination) share it
        if key not in hm["masses"]:
            hm["masses"][key] = rule_mass(hm["scores"], hm["p_exact"], full, ksink=ksink, want=want, where=where,
                                          sink_logit=sink_logit)
        mass = hm["masses"][key]
    dc = delta_c(full, hm["n_sinks"])
    nonsink = float(hm["p_exact"][:, ksink:].sum(-1).mean())  # the non-sink attention mass, mean over rows
    share = None if mass is None else (mass / nonsink if nonsink > 0 else 0.0)
    return {"mass_underflow": mass, "mass_lost_share": share, "delta": hm["delta"], "sigma": hm["sigma"], "delta_c": dc,
            "distance_to_delta_c": None if dc is None or not math.isfinite(hm["delta"]) else dc - hm["delta"]}
