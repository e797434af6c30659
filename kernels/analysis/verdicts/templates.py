"""Words filled from a run's numbers: the expected-verdict texts and the README's verdict cells.

A template is text with slots ``{ID.key}`` or ``{ID.key:spec}``: ``ID`` a claim of claims.json
(``C5``, ``paper``), ``key`` one of its ``numbers``, or ``verdict``, or ``headline`` (the readings
under which it holds), and ``spec`` a format spec (``.3g``). No number is typed: every figure in
the filled text is this run's. A slot naming a claim or a key the run lacks is an error that names
the slot and what the claim has.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pcast.analysis.text import short
from pcast.contract import TEMPLATE_SLOT

__all__ = ["fill", "slots", "verdict_cell", "SLOT"]

SLOT = re.compile(TEMPLATE_SLOT)


def slots(template: str) -> list[tuple[str, str]]:
    """The (claim, key) of every slot in ``template``."""
    return [(m["claim"], m["key"]) for m in SLOT.finditer(template)]


def _headline(r: Mapping) -> str:
    if r.get("headline"):
        return str(r["headline"])
    subs = r.get("scoped") or []
    if not subs:
        return r["verdict"]
    n = sum(s["verdict"] == "PASS" for s in subs)
    return f"{n} of {len(subs)} sub-cases PASS"


def _value(claims: Mapping, claim: str, key: str):
    if claim not in claims:
        raise KeyError(f"template slot {{{claim}.{key}}}: no claim {claim!r} in this run (it has "
                       f"{', '.join(sorted(claims))})")
    r = claims[claim]
    if key == "verdict":
        return r["verdict"]
    if key == "headline":
        return _headline(r)
    nums = r.get("numbers", {})
    if key not in nums:
        raise KeyError(f"template slot {{{claim}.{key}}}: {claim} has no number {key!r} in this run (it has "
                       f"verdict, headline, {', '.join(sorted(nums))})")
    return nums[key]


def fill(template: str, claims: Mapping) -> str:
    """``template`` with every slot replaced by the run's value (``claims``: claims.json's ``claims``).
    A number without a spec prints as :func:`pcast.analysis.text.short`; a missing number (None) as a dash."""
    def sub(m: re.Match) -> str:
        v = _value(claims, m["claim"], m["key"])
        if v is None:
            return "—"
        if m["spec"]:
            return format(v, m["spec"])
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return str(v)
        return str(v) if isinstance(v, int) else short(v, 3)

    return SLOT.sub(sub, str(template))


def verdict_cell(claim: str, claims: Mapping, template: str | None) -> str:
    """The README claims table's verdict cell of ``claim``: its verdict, then its template filled."""
    v = claims[claim]["verdict"]
    text = fill(template, claims) if template else _headline(claims[claim])
    return (v if text == v else f"{v}: {text}").replace("|", "\\|")
