"""pcast-audit's report: verdicts per head, the summary block (per policy: its worst head by its own
error, and how many heads pass each threshold), the ``--fail-on`` gate and the ``--json`` document
(:data:`SCHEMA_PATH`, version :data:`SCHEMA_VERSION`).

Used by :mod:`pcast.audit.session`.
"""

from __future__ import annotations

import json
import math
import os

from pcast.contract import COMBO_LABELS

SCHEMA_VERSION = 1
SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "schema.json")
EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2
from pcast.audit.verdicts import VERDICT_COLUMNS, collapse_words  # noqa: F401 - re-exported for the CSV columns


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


def gate(head_rows: list, fail_on: list, *, gated, kernel=None) -> list[dict]:
    """The heads of the ``gated`` policies that meet a ``--fail-on`` condition: one entry per (condition,
    policy, head) with the value that met it; ``mismatch``: each head of ``kernel`` (a
    :class:`~pcast.audit.kernel.KernelAudit`) that does not implement its policy, with its measured MSE. A
    condition without a bound is the head's own verdict; one with a bound compares the value with it."""
    hits = []
    for word, bound in fail_on:
        if word == "mismatch":
            hits += [{"condition": word, "policy": kernel.policy.name, "layer": h.layer, "batch": h.batch,
                      "head": h.head, "value": h.measured_mse} for h in (kernel.mismatches if kernel else [])]
            continue
        flag, value = GATE_KEYS[word]
        for r in head_rows:
            met = r[flag] if bound is None else (r[value] is not None and not r[value] <= bound)
            if r["policy"] in gated and met:
                hits.append({"condition": word if bound is None else f"{word}>{bound:g}", "policy": r["policy"],
                             "layer": r["layer"], "batch": r["batch"], "head": r["head"], "value": r[value]})
    return hits


def print_summary(blocks: list, args, n_heads: int) -> None:
    """The summary block: one line per policy."""
    bound = f"; rel MSE > {args.rel_mse_bound:g}" if args.rel_mse_bound is not None else ""
    print(f"Summary over {n_heads} heads (worst head: by the policy's own relative MSE; then the heads past each "
          f"threshold: collapse: non-sink underflow > {args.collapse_threshold:.0%}; saturate: any P above the "
          f"format's max; floor: MSE > {args.floor_factor:g}x the V-cast floor{bound}):")
    for s in blocks:
        w = s["worst_head"]
        parts = [f"collapse {s['heads_collapsing']}/{s['heads']}", f"saturate {s['heads_saturating']}/{s['heads']}",
                 "floor -" if s["heads_above_floor"] is None else f"floor {s['heads_above_floor']}/{s['heads']}"]
        if s["heads_above_rel_mse"] is not None:
            parts.append(f"rel MSE {s['heads_above_rel_mse']}/{s['heads']}")
        print(f"  {s['policy']:<18} worst {_where(w)}: rel MSE {w['rel_mse']:.4g} (uf frac "
              f"{w['underflow_frac']:.4g}); " + ", ".join(parts))


def print_gate(hits: list, fail_on: list, gated: list, head_rows=(), args=None) -> None:
    """The gate's verdict: PASS, or FAIL with the first heads that failed (all of them in --json); a collapse
    hit is followed by the head's collapse verdict in words (the same verdict the gate read)."""
    if not fail_on:
        return
    what = ", ".join(w if b is None else f"{w}:{b:g}" for w, b in fail_on)
    if not hits:
        print(f"Gate (--fail-on {what}; policies {', '.join(gated)}): PASS")
        return
    print(f"Gate (--fail-on {what}; policies {', '.join(gated)}): FAIL: {len(hits)} (condition, policy, head)")
    rows = {(r["policy"], r["layer"], r["batch"], r["head"]): r for r in head_rows}
    for h in hits[:10]:
        print(f"  {h['condition']}: {h['policy']}: {_where(h)}: {h['value']:.4g}")
        r = rows.get((h["policy"], h["layer"], h["batch"], h["head"]))
        if h["condition"] == "collapse" and r is not None and args is not None:
            print("    " + collapse_words(r, collapse_threshold=args.collapse_threshold,
                                          collapse_mass=args.collapse_mass))
    if len(hits) > 10:
        print(f"  ... and {len(hits) - 10} more (all in --json)")


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


def json_document(*, args, header: str, rows, head_rows, blocks, hits, gated, fail_on, warnings, exit_code,
                  kernel=None, remedies=()) -> dict:
    """The ``--json`` document (schema :data:`SCHEMA_PATH`)."""
    return _clean({
        "schema_version": SCHEMA_VERSION, "tool": "pcast-audit", "inputs": args.inputs, "header": header,
        "layout": args.layout or "bhnd",
        "thresholds": {"collapse": args.collapse_threshold, "collapse_mass": args.collapse_mass,
                       "floor_factor": args.floor_factor, "rel_mse": args.rel_mse_bound},
        "fail_on": [{"condition": w, "bound": b} for w, b in fail_on], "gated_policies": gated,
        "exit_code": exit_code, "failures": hits, "warnings": warnings, "summary": blocks,
        "rows": rows, "heads": head_rows, "kernel": None if kernel is None else kernel.document(), "remedies": list(remedies)})


def write_json(path: str, doc: dict) -> None:
    from pcast.pipeline.files import atomic_write_text

    atomic_write_text(path, json.dumps(doc, indent=1, sort_keys=False, allow_nan=False) + "\n")
