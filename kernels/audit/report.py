"""pcast-audit's report: verdicts per head, the summary block (per policy: its worst head by its own
error, and how many heads pass each threshold), the ``--fail-on`` gate and the ``--json`` document
(:data:`SCHEMA_PATH`, version :data:`SCHEMA_VERSION`).

Used by :mod:`pcast.audit.session`.
"""

from __future__ import annotations

import json
import math
import os

from pcast.audit.verdicts import VERDICT_COLUMNS, collapse_words  # noqa: F401 - re-exported for the CSV columns
from pcast.contract import COMBO_LABELS
from pcast.host.files import atomic_write_text

SCHEMA_VERSION = 2  # 2: delta_c and the distance in logits; not_judged; the kernel gate
SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "schema.json")
EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2


def _where(hr) -> str:
    return f"layer {'-' if hr['layer'] is None else hr['layer']}, batch {hr['batch']}, head {hr['head']}"


def summary(head_rows: list, policies: list) -> list[dict]:
    """Per policy (in run order): its head count, its worst head by its own relative MSE, and how many heads
    collapse, saturate, exceed the V-cast floor factor (None when it casts no V) and the rel-MSE bound."""
    out = []
    for name in policies:
        mine = [r for r in head_rows if r["policy"] == name]
        worst = max(mine, key=lambda r: -math.inf if math.isnan(r["rel_mse"]) else r["rel_mse"])
        floors = [r["exceeds_floor"] for r in mine if r["exceeds_floor"] is not None]
        bounds = [r["exceeds_rel_mse"] for r in mine if r["exceeds_rel_mse"] is not None]
        out.append({"policy": name, "heads": len(mine),
                    "worst_head": {c: worst[c] for c in ("layer", "batch", "head", "mse", "rel_mse",
                                                         "underflow_frac", "mass_underflow")},
                    "heads_collapsing": sum(r["collapses"] for r in mine),
                    "heads_saturating": sum(r["saturates"] for r in mine),
                    "heads_above_floor": sum(floors) if floors else None,
                    "heads_above_rel_mse": sum(bounds) if bounds else None})
    return out


#: --fail-on condition -> (the head row's verdict, the value reported) (:mod:`pcast.audit.verdicts`)
GATE_KEYS = {"collapse": ("collapses", "underflow_frac"), "saturation": ("saturates", "saturated_frac"),
             "rel-mse": ("exceeds_rel_mse", "rel_mse"), "floor": ("exceeds_floor", "floor_ratio"),
             "mass-underflow": ("exceeds_mass", "mass_underflow"), "ratio": ("exceeds_ratio", "ratio_to_best")}


#: With --kernel, conditions read from the predicted policy's run: they stand on a head only where the kernel agrees
PREDICTED_CONDITIONS = ("collapse", "saturation", "mass-underflow", "floor")
#: With --kernel, conditions read from the kernel's own measured output (its MSE against the float64 reference)
MEASURED_CONDITIONS = ("rel-mse", "ratio")


def _label(word, bound) -> str:
    return word if bound is None else f"{word}>{bound:g}"


def _met(r, word, bound) -> bool:
    flag, value = GATE_KEYS[word]
    return r[flag] if bound is None else (r[value] is not None and not r[value] <= bound)


def gate(head_rows: list, fail_on: list, *, gated, kernel=None) -> tuple[list, list]:
    """``(hits, unjudged)``. ``hits``: the heads of the ``gated`` policies that meet a ``--fail-on`` condition, one
    entry per (condition, policy, head) with the value that met it; a condition without a bound is the head's own
    verdict, one with a bound compares the value with it. With ``kernel`` (a
    :class:`~pcast.audit.kernel.KernelAudit`), the run that predicts the kernel is judged as the kernel
    (:func:`kernel_gate`) instead; ``unjudged``: the (condition, head) pairs of the kernel not judged, and why."""
    kname = None if kernel is None or kernel.policy is None else kernel.policy.name
    hits = []
    for word, bound in fail_on:
        if word == "mismatch":
            continue
        for r in head_rows:
            if r["policy"] in gated and r["policy"] != kname and _met(r, word, bound):
                hits.append({"condition": _label(word, bound), "policy": r["policy"], "layer": r["layer"],
                             "batch": r["batch"], "head": r["head"], "value": r[GATE_KEYS[word][1]]})
    if kernel is None:
        return hits, []
    more, unjudged = kernel_gate(head_rows, fail_on, kernel)
    return hits + more, unjudged


def _best_combo(head_rows) -> dict:
    best: dict = {}
    for r in head_rows:
        if r["policy"] in COMBO_LABELS:
            key = (r["layer"], r["batch"], r["head"])
            best[key] = min(best.get(key, math.inf), r["mse"])
    return best


def _measured(h, word, best):
    if word == "rel-mse":
        return h.measured_rel_mse
    b = best.get((h.layer, h.batch, h.head))
    return None if b is None else (h.measured_mse / b if b > 0 else (math.inf if h.measured_mse > 0 else 1.0))


def kernel_gate(head_rows: list, fail_on: list, kernel) -> tuple[list, list]:
    """The kernel judged on what it ran, head by head: ``mismatch`` (gated unless ``--report-mismatch``) where it
    disagrees with the predicted policy, with the measured and predicted MSE and the differing option;
    :data:`MEASURED_CONDITIONS` on its measured MSE; :data:`PREDICTED_CONDITIONS` on the predicted run's head row
    only where the kernel agrees (elsewhere, or with nothing predicting it, unjudged with the reason)."""
    kname = None if kernel.policy is None else kernel.policy.name
    pred = {(r["layer"], r["batch"], r["head"]): r for r in head_rows if kname and r["policy"] == kname}
    best = _best_combo(head_rows)
    hits, unjudged = [], []
    for h in kernel.heads:
        key = (h.layer, h.batch, h.head)
        base = {"policy": kname or "kernel", "kernel": True, "layer": h.layer, "batch": h.batch, "head": h.head}
        for word, bound in fail_on:
            if word == "mismatch":
                if h.agrees is False:
                    hits.append({**base, "condition": "mismatch", "value": h.measured_mse,
                                 "predicted": h.predicted_mse, "rows_outside": h.rows_outside, "rows": h.rows,
                                 "differs": kernel.differs_text() or None})
                continue
            if word in MEASURED_CONDITIONS:
                value = _measured(h, word, best)
                if value is not None and not value <= bound:
                    hits.append({**base, "condition": _label(word, bound), "value": value})
                continue
            if key not in pred or not h.agrees:
                why = kernel.outside or ("the kernel disagrees with the predicted policy on this head"
                                         if key in pred else "no run of the predicted policy")
                unjudged.append({**base, "condition": _label(word, bound), "reason": why})
            elif _met(pred[key], word, bound):
                hits.append({**base, "condition": _label(word, bound), "value": pred[key][GATE_KEYS[word][1]]})
    return hits, unjudged


def print_summary(blocks: list, settings, n_heads: int) -> None:
    """The summary block: one line per policy."""
    bound = f"; rel MSE > {settings.rel_mse_bound:g}" if settings.rel_mse_bound is not None else ""
    print(f"Summary over {n_heads} heads (worst head: by the policy's own relative MSE; then the heads past each "
          f"threshold: collapse: non-sink underflow > {settings.collapse_threshold:.0%}; saturate: any P above the "
          f"format's max; floor: MSE > {settings.floor_factor:g}x the V-cast floor{bound}):")
    for s in blocks:
        w = s["worst_head"]
        parts = [f"collapse {s['heads_collapsing']}/{s['heads']}", f"saturate {s['heads_saturating']}/{s['heads']}",
                 "floor -" if s["heads_above_floor"] is None else f"floor {s['heads_above_floor']}/{s['heads']}"]
        if s["heads_above_rel_mse"] is not None:
            parts.append(f"rel MSE {s['heads_above_rel_mse']}/{s['heads']}")
        print(f"  {s['policy']:<18} worst {_where(w)}: rel MSE {w['rel_mse']:.4g} (uf frac "
              f"{w['underflow_frac']:.4g}); " + ", ".join(parts))


def _hit_line(h) -> str:
    who = f"{h['policy']} (the kernel)" if h.get("kernel") else h["policy"]
    if h["condition"] != "mismatch":
        return f"  {h['condition']}: {who}: {_where(h)}: {h['value']:.4g}"
    return (f"  mismatch: {who}: {_where(h)}: the predicted policy does not describe the kernel: measured MSE "
            f"{h['value']:.4g}, predicted MSE {h['predicted']:.4g} ({h['rows_outside']} of {h['rows']} rows outside "
            "the tolerance)" + (f"; {h['differs']}" if h.get("differs") else ""))


def print_gate(hits: list, fail_on: list, gated: list, head_rows=(), settings=None, *, kernel=None,
               unjudged=()) -> None:
    """The gate's verdict: PASS, or FAIL with the first heads that failed (all of them in --json); a collapse
    hit is followed by the head's collapse verdict in words (the same verdict the gate read). With a kernel: what
    it was judged on, and the conditions left unjudged and why."""
    if not fail_on:
        return
    what = ", ".join(w if b is None else f"{w}:{b:g}" for w, b in fail_on)
    if kernel is not None:
        gated = [g for g in gated if kernel.policy is None or g != kernel.policy.name] + ["the kernel"]
    head = f"Gate (--fail-on {what}; policies {', '.join(gated)})"
    print(f"{head}: PASS" if not hits else f"{head}: FAIL: {len(hits)} (condition, policy, head)")
    if kernel is not None:
        print("  the kernel is judged on what it ran: rel-mse and ratio on its measured MSE; collapse, saturation, "
              "floor and mass-underflow on the predicted policy's run, on the heads where the kernel agrees with it; "
              "a head that disagrees " + ("fails the gate (mismatch)" if kernel.mismatch_gated else
                                          "is reported, not gated (--report-mismatch)"))
        for (cond, why), n in _count(unjudged).items():
            print(f"  not judged: {cond} on {n} head(s): {why}")
    if not hits:
        return
    rows = {(r["policy"], r["layer"], r["batch"], r["head"]): r for r in head_rows}
    for h in hits[:10]:
        print(_hit_line(h))
        r = rows.get((h["policy"], h["layer"], h["batch"], h["head"]))
        if h["condition"] == "collapse" and r is not None and settings is not None:
            print("    " + collapse_words(r, collapse_threshold=settings.collapse_threshold,
                                          collapse_mass=settings.collapse_mass))
    if len(hits) > 10:
        print(f"  ... and {len(hits) - 10} more (all in --json)")


def _count(unjudged) -> dict:
    out: dict = {}
    for u in unjudged:
        out[(u["condition"], u["reason"])] = out.get((u["condition"], u["reason"]), 0) + 1
    return out


def gated_policies(runs: list) -> list[str]:
    """The runs --fail-on judges: every run but the four reference combinations."""
    return [name for name, _ in runs if name not in COMBO_LABELS]


def _clean(x):
    """JSON has no NaN or infinity: those become null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def json_document(*, settings, header: str, rows, head_rows, blocks, hits, gated, fail_on, warnings, exit_code,
                  kernel=None, remedies=(), unjudged=()) -> dict:
    """The ``--json`` document (schema :data:`SCHEMA_PATH`)."""
    return _clean({
        "schema_version": SCHEMA_VERSION, "tool": "pcast-audit", "inputs": settings.inputs, "header": header,
        "layout": settings.layout or "bhnd",
        "thresholds": {"collapse": settings.collapse_threshold, "collapse_mass": settings.collapse_mass,
                       "floor_factor": settings.floor_factor, "rel_mse": settings.rel_mse_bound},
        "fail_on": [{"condition": w, "bound": b} for w, b in fail_on], "gated_policies": gated,
        "exit_code": exit_code, "failures": hits, "not_judged": list(unjudged), "warnings": warnings, "summary": blocks,
        "rows": rows, "heads": head_rows, "kernel": None if kernel is None else kernel.document(), "remedies": list(remedies)})


def write_json(path: str, doc: dict) -> None:
    atomic_write_text(path, json.dumps(doc, indent=1, sort_keys=False, allow_nan=False) + "\n")
