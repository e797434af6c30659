"""The audit's verdicts, one meaning each, shared by the per-head lines, the pooled lines and the gate.

A head of a run:

- ``collapses`` when more than ``collapse_threshold`` of its non-sink P round to zero **and** those keys carry
  more than ``collapse_mass`` of its non-sink attention mass (``mass_lost_share``). Many tiny P rounding to zero
  behind a strong sink cost nothing; a collapse is the count and the loss together. Where the mass is not
  measured (Q/K casts, microscaled P) the count alone decides, and the words say so.
- ``saturates`` when any P entry is above the format's largest finite value.
- ``exceeds_floor`` when its MSE is above ``floor_factor`` times its V-cast floor (runs that cast V).
- ``exceeds_rel_mse`` when its relative MSE is above the ``rel-mse`` bound, ``exceeds_mass`` when the exact
  attention mass of its rounded-away keys (``mass_underflow``) is above the ``mass-underflow`` bound, and
  ``exceeds_ratio`` when its MSE over the best of the four reference combinations on the same head
  (``ratio_to_best``) is above the ``ratio`` bound.

A pooled line (one per run over all heads) states how many heads meet each verdict, so it can never say
"does not collapse" while a head of that run does.
"""

from __future__ import annotations

import math

from pcast.contract import COMBO_LABELS

VERDICT_COLUMNS = ("collapses", "saturates", "floor_ratio", "exceeds_floor", "exceeds_rel_mse", "ratio_to_best",
                   "exceeds_ratio", "exceeds_mass")


def ratio_to_best(head_rows: list) -> None:
    """Set ``ratio_to_best`` on every head row: its MSE over the smallest MSE of the four reference combinations
    on the same (layer, batch, head); None when the combinations did not run."""
    best: dict = {}
    for r in head_rows:
        if r["policy"] in COMBO_LABELS:
            key = (r["layer"], r["batch"], r["head"])
            best[key] = min(best.get(key, math.inf), r["mse"])
    for r in head_rows:
        b = best.get((r["layer"], r["batch"], r["head"]))
        r["ratio_to_best"] = None if b is None else (r["mse"] / b if b > 0 else (math.inf if r["mse"] > 0 else 1.0))


def head_verdicts(hr: dict, *, collapse_threshold: float, floor_factor: float, collapse_mass: float = 0.01,
                  bounds: dict | None = None) -> dict:
    """One head row's verdicts (module docstring). ``bounds``: ``{"rel-mse": X, "mass-underflow": X,
    "ratio": X}``, a missing one None (its verdict is then None)."""
    bounds = bounds or {}
    ratio = None
    if hr["floor_mse"] is not None:
        ratio = hr["mse"] / hr["floor_mse"] if hr["floor_mse"] > 0 else (math.inf if hr["mse"] > 0 else 1.0)
    share = hr.get("mass_lost_share")
    collapses = hr["underflow_frac"] > collapse_threshold and (share is None or share > collapse_mass)

    def over(bound, value):
        return None if bound is None else (value is not None and not value <= bound)

    return {"collapses": collapses, "saturates": hr["saturated"] > 0,
            "floor_ratio": ratio, "exceeds_floor": None if ratio is None else ratio > floor_factor,
            "exceeds_rel_mse": over(bounds.get("rel-mse"), hr["rel_mse"]),
            "exceeds_mass": over(bounds.get("mass-underflow"), hr.get("mass_underflow")),
            "exceeds_ratio": over(bounds.get("ratio"), hr.get("ratio_to_best"))}


def judge_heads(head_rows: list, settings) -> None:
    """Every head row's verdicts in place: its ratio to the best combination, then :func:`head_verdicts` at the
    thresholds of ``settings`` (an :class:`~pcast.audit.settings.AuditSettings`: ``collapse_threshold``,
    ``floor_factor``, ``collapse_mass``, ``bounds``)."""
    ratio_to_best(head_rows)
    bounds = settings.bounds
    for hr in head_rows:
        hr.update(head_verdicts(hr, collapse_threshold=settings.collapse_threshold, floor_factor=settings.floor_factor,
                                collapse_mass=settings.collapse_mass, bounds=bounds))


def collapse_words(hr: dict, *, collapse_threshold: float, collapse_mass: float = 0.01) -> str:
    """``COLLAPSES: ...`` or ``does not collapse: ...`` for one head, with the count and the mass behind it."""
    uf, share = hr["underflow_frac"], hr.get("mass_lost_share")
    count = f"{uf:.2%} of non-sink P round to zero (threshold {collapse_threshold:.0%})"
    if share is None:
        mass = "; mass not measured for this run, the count decides"
    else:
        mass = f", carrying {share:.3g} of the non-sink attention mass (threshold {collapse_mass:.3g})"
    return ("COLLAPSES: " if hr["collapses"] else "does not collapse: ") + count + mass


def pooled_lines(row: dict, heads: list, *, collapse_threshold: float, floor_factor: float,
                 collapse_mass: float = 0.01) -> list[str]:
    """The pooled verdict lines of one run (``row``, over ``heads``, its head rows with their verdicts)."""
    name, n = row["policy"], len(heads)

    def worst(flag, key):
        hit = [h for h in heads if h[flag]]
        if not hit:
            return ""
        w = max(hit, key=lambda h: -math.inf if h[key] is None else h[key])
        return f" (worst: batch {w['batch']}, head {w['head']}: {w[key]:.4g})"

    k = sum(h["collapses"] for h in heads)
    lines = [f"{name}: {'COLLAPSES' if k else 'does not collapse'}: {k} of {n} heads collapse"
             f"{worst('collapses', 'underflow_frac')} (threshold {collapse_threshold:.0%} of non-sink P and "
             f"{collapse_mass:.3g} of the non-sink mass); pooled over heads {row['underflow_frac']:.2%} of non-sink "
             "P round to zero"]
    if row["terms_sink"]:
        lines.append(f"{name}: sink keys: {row['underflow_sink']} of {row['terms_sink']} sink P round to zero")
    k = sum(h["saturates"] for h in heads)
    lines.append(f"{name}: {'SATURATES' if k else 'does not saturate'}: {k} of {n} heads"
                 + (f": {row['saturated']} of {row['terms'] + row['terms_sink']} P entries "
                    f"({row['saturated_frac']:.3%}) exceed the format's max finite value and are clipped" if k else ""))
    if row["floor_mse"] is not None:
        k = sum(bool(h["exceeds_floor"]) for h in heads)
        lines.append(f"{name}: P-cast error {'EXCEEDS' if k else 'is within'} {floor_factor:g}x the V-cast floor: "
                     f"{k} of {n} heads above it{worst('exceeds_floor', 'floor_ratio')}; pooled MSE "
                     f"{row['mse']:.4g} vs {row['floor_mse']:.4g} with fmt=None")
    return lines
