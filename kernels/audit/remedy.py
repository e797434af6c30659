"""The why and the remedy of each failing head: its cause in words from the theory (:mod:`pcast.theory`), and
the nearest option change that removes the failure, checked by rerunning the emulator on that head.

A head fails a condition when the gate (``--fail-on``) says so; without ``--fail-on``, when it collapses or
saturates (the per-head verdicts of :mod:`pcast.audit.verdicts`). The causes:

- saturation: lazy rescaling keeps a max up to ``τ·ln 2`` below a block's, so ``x = S·exp(s − m)`` reaches
  ``S·2^τ`` (:func:`pcast.theory.policy.max_safe_tau`): it saturates when ``log2 S + τ > log2 max_finite``;
  with τ = 0, when S itself is above max_finite. In a microscaled format (nvfp4, mxfp4) it is the rounding of
  the group scale that puts a group's largest P above E2M1's 6, whatever S and τ.
- collapse (and the error gates): forward order meets the sink first, so a non-sink key gets
  ``S·exp(s − mean − Δ)`` (Δ: the sinks' largest score above the non-sink mean) and half of them round to zero at
  Δc = ln(1/u_f) + ln S in logits (:func:`pcast.audit.measure.delta_c`); the head's Δ against its Δc, in logits
  and in σ, says how far past it is.

The candidate fixes are single option changes, nearest first (for saturation: the largest safe τ, then the
largest safe S (:func:`pcast.theory.policy.best_lazy_scale`), then τ = 0; a microscaled format: E4M3; for the others: reverse order, then
S = 256, then τ = 0). Each is rerun on the head through the emulator with the same thresholds and bounds; the
first that clears every failed condition is the fix. When none does, the report says so.
"""

from __future__ import annotations

import math

from pcast.audit.heads import audit_heads
from pcast.audit.report import gate
from pcast.audit.verdicts import judge_heads
from pcast.contract import COMBO_LABELS
from pcast.formats import get_format
from pcast.formats.microscaling import get_mx_format, is_mx
from pcast.policies import Policy
from pcast.theory.policy import best_lazy_scale, max_safe_tau

__all__ = ["failing_heads", "cause", "candidates", "remedies", "print_remedies", "MAX_HEADS"]

MAX_HEADS = 8  # heads explained and rerun per audit (the rest are counted)
_CHECKABLE = ("collapse", "saturation", "rel-mse", "floor", "mass-underflow", "ratio")


def failing_heads(head_rows: list, hits: list, gated: list, fail_on: list) -> list:
    """``[(head row, [conditions]), ...]``: the gate's failures, or without ``--fail-on`` the heads of the
    ``gated`` policies that collapse or saturate."""
    rows = {(r["policy"], r["layer"], r["batch"], r["head"]): r for r in head_rows}
    out: dict = {}
    if fail_on:
        for h in hits:
            key = (h["policy"], h["layer"], h["batch"], h["head"])
            if key in rows:
                out.setdefault(key, (rows[key], []))[1].append(h["condition"])
    else:
        for key, r in rows.items():
            conds = [c for c, flag in (("collapse", "collapses"), ("saturation", "saturates")) if r[flag]]
            if r["policy"] in gated and conds:
                out[key] = (r, conds)
    return list(out.values())


def _log2_scale(full) -> float:
    return math.log2(float(full["scale"]))


def _mx_saturation_cause(full) -> str:
    f = get_mx_format(full["fmt"])
    if f.scale == "e4m3fn":
        return (f"{f.name}: a group's scale is amax/{f.max_finite:g} rounded to E4M3; when it rounds down, the "
                f"group's largest P lands above E2M1's {f.max_finite:g} and clips to it: saturates (a rounding of "
                "the group scale, not a bound on S or τ)")
    return (f"{f.name}: a group's E8M0 scale 2^(floor(log2 amax) − 2) puts its largest P at amax/2^X in [4, 8), "
            f"above E2M1's {f.max_finite:g} once amax's mantissa passes 1.5: saturates (a rounding of the group "
            "scale, not a bound on S or τ)")


def _saturation_cause(full) -> str:
    if is_mx(full["fmt"]):
        return _mx_saturation_cause(full)
    fmt = get_format(full["fmt"])
    tau, ls = float(full["rescale_threshold"]), _log2_scale(full)
    top = math.log2(fmt.max_finite)
    what = f"offset {ls:g}" if full["scale_mode"] == "exp2_offset" else f"S = {float(full['scale']):g}"
    if tau > 0:
        lhs = "offset + τ" if full["scale_mode"] == "exp2_offset" else "log2 S + τ"
        return (f"{what} with τ = {tau:g} lets P reach 2^{ls + tau:g} > {fmt.max_finite:g}: saturates. Keep "
                f"{lhs} ≤ log2 {fmt.max_finite:g} = {top:.3g} (τ ≤ {max_safe_tau(float(full['scale']), fmt):.3g} "
                f"at this S), or S ≤ {best_lazy_scale(tau, fmt):g} at this τ")
    return (f"{what} is above {fmt.max_finite:g}: the key at the max saturates even with an eager max. Keep "
            f"S ≤ {fmt.max_finite:g}")


def _phi(z: float) -> float:
    from scipy.stats import norm  # lazy: scipy.stats takes about a second to import, for a failing head's words

    return float(norm.cdf(z))


def _collapse_cause(hr, full) -> str:
    uf, share = hr["underflow_frac"], hr.get("mass_lost_share")
    lost = f"{uf:.1%} of non-sink P round to zero" + ("" if share is None else f", carrying {share:.3g} of the "
                                                                                  "non-sink mass")
    dc, delta, sigma = hr.get("delta_c"), hr.get("delta"), hr.get("sigma")
    if full["order"] == "forward" and dc is not None and delta is not None:
        where = "past" if delta > dc else "below"
        steep = f" = {(delta - dc) / sigma:+.3g}σ (σ = {sigma:.3g})" if sigma else ""
        return (f"forward order meets the sink first: the head's Δ = {delta:.3g} is {where} Δc = {dc:.3g} "
                f"(ln(1/u_f) + ln S at S = {float(full['scale']):g}; logits): Δ − Δc = {delta - dc:+.3g}{steep}, "
                f"expected fraction Φ((Δ − Δc)/σ) = {_phi((delta - dc) / sigma) if sigma else float(delta > dc):.3g}: "
                f"{lost}")
    if full["order"] == "reverse":
        return (f"{lost}; in reverse order the sink's block comes last, so the loss comes from the spread of the "
                "non-sink scores, not from the sink")
    return lost


def cause(hr: dict, full: dict, condition: str) -> str:
    """The cause of one failed ``condition`` of head row ``hr`` (its run's keywords ``full``), in words."""
    word = condition.split(">")[0]
    if word == "saturation":
        return _saturation_cause(full)
    if word == "collapse":
        return _collapse_cause(hr, full)
    parts = [f"relative MSE {hr['rel_mse']:.3g}"]
    if hr.get("ratio_to_best") is not None:
        parts.append(f"{hr['ratio_to_best']:.3g}x the best of the four combinations")
    if hr["saturated"]:
        parts.append(_saturation_cause(full))
    if hr["underflow_frac"] > 0:
        parts.append(_collapse_cause(hr, full))
    return "; ".join(parts)


def candidates(full: dict, conditions) -> list:
    """Single option changes, nearest first: ``[(option, new value), ...]`` (module docstring)."""
    tau, scale = float(full["rescale_threshold"]), float(full["scale"])
    out = []
    if any(c.startswith("saturation") for c in conditions):
        fmt = get_format(full["fmt"]) if full.get("fmt") and not is_mx(full["fmt"]) else None
        if fmt is not None and tau > 0:
            safe = math.floor(max_safe_tau(scale, fmt) + 1e-12)
            if 0 <= safe < tau:
                out.append(("rescale_threshold", float(safe)))
            out.append(("scale", best_lazy_scale(tau, fmt)))
        elif fmt is not None:
            out.append(("scale", 256.0))
        elif is_mx(full["fmt"]) and full.get("scale_mode") != "per_row":
            out.append(("fmt", "e4m3fn"))  # E4M3 at S ≤ 256 with τ = 0 keeps every P ≤ 256 < 448
    if full["order"] == "forward":
        out.append(("order", "reverse"))
    if scale != 256.0:
        out.append(("scale", 256.0))
    if tau > 0:
        out.append(("rescale_threshold", 0.0))
    seen, uniq = set(), []
    for c in out:
        if c not in seen and full.get(c[0]) != c[1]:
            seen.add(c)
            uniq.append(c)
    return uniq


def _rerun(settings, layer, hr, full, change, combo_runs) -> dict:
    """Head ``hr`` rerun through the emulator with one option changed, judged at the thresholds of ``settings``
    (an :class:`~pcast.audit.settings.AuditSettings`)."""
    _, q, k, v = layer
    b, h = hr["batch"], hr["head"]
    g = q.shape[1] // k.shape[1]
    runs = [(hr["policy"], {**full, change[0]: change[1]})] + combo_runs
    _, rows = audit_heads(q[b:b + 1, h:h + 1], k[b:b + 1, h // g:h // g + 1], v[b:b + 1, h // g:h // g + 1],
                          runs=runs, causal=settings.causal, causal_align=settings.causal_align, ksink=hr["ksink"],
                          backend="emulator", sink_logit=settings.sink_logit, sm_scale=settings.sm_scale,
                          per_head=True, layer=hr["layer"])
    judge_heads(rows, settings)
    return rows[0]


def remedies(settings, layers, failing, runs) -> list:
    """One entry per failing head of ``failing`` (:func:`failing_heads`; at most :data:`MAX_HEADS`): its
    conditions, their causes, and the fix found by rerunning (``fix``: option, from, to; None when no single
    change removes every failure). ``settings``: the audit's :class:`~pcast.audit.settings.AuditSettings`."""
    defaults = Policy(name="defaults").attention_kwargs()
    fulls = {name: {**defaults, **kw} for name, kw in runs}
    combo_runs = [(n, kw) for n, kw in runs if n in COMBO_LABELS]
    by_layer = {L: (L, q, k, v) for L, q, k, v in layers}
    # a gate hit names its condition as gate() writes it; the parsed condition keeps the exact bound
    parsed = {(w if b is None else f"{w}>{b:g}"): (w, b) for w, b in settings.fail_on}
    out = []
    for hr, conds in failing[:MAX_HEADS]:
        full = fulls[hr["policy"]]
        conds = [c for c in conds if c.split(">")[0] in _CHECKABLE]
        if not conds:
            continue
        fail_on = [parsed.get(c, (c, None)) for c in conds]  # without --fail-on: the head's own verdicts
        entry = {"policy": hr["policy"], "layer": hr["layer"], "batch": hr["batch"], "head": hr["head"],
                 "conditions": conds, "causes": [cause(hr, full, c) for c in conds], "fix": None, "tried": []}
        for change in candidates(full, conds):
            try:
                new = _rerun(settings, by_layer[hr["layer"]], hr, full, change,
                             combo_runs if any(w == "ratio" for w, _ in fail_on) else [])
            except ValueError:  # the change is not a valid policy with the others (e.g. per_row without nvfp4)
                entry["tried"].append({"option": change[0], "to": change[1], "clears": False})
                continue
            left = gate([new], fail_on, gated=[hr["policy"]])[0]
            entry["tried"].append({"option": change[0], "to": change[1], "clears": not left})
            if not left:
                entry["fix"] = {"option": change[0], "from": full[change[0]], "to": change[1],
                                "rel_mse": new["rel_mse"]}
                break
        out.append(entry)
    return out


def print_remedies(entries: list, n_failing: int) -> None:
    """The why and the remedy, one block per failing head."""
    if not entries:
        return
    print("Why, and the remedy (each fix rerun through the emulator on that head, same thresholds):")
    for e in entries:
        where = f"layer {'-' if e['layer'] is None else e['layer']}, batch {e['batch']}, head {e['head']}"
        for c, why in zip(e["conditions"], e["causes"]):
            print(f"  why ({e['policy']}, {where}), {c}: {why}")
        f = e["fix"]
        if f is None:
            tried = ", ".join(f"{t['option']} = {t['to']}" for t in e["tried"]) or "none"
            print(f"    fix: no single option change removes it (checked: {tried})")
        else:
            print(f"    fix: {f['option']} {f['from']} -> {f['to']} (checked: rerun on this head, it passes; "
                  f"rel MSE {f['rel_mse']:.3g})")
    if n_failing > len(entries):
        print(f"  ... {n_failing - len(entries)} more failing heads (not rerun)")
