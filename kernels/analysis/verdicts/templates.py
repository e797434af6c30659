"""Words filled from a run's numbers: the expected-verdict texts and the README's verdict cells.

A template is text with slots ``{ID.key}`` or ``{ID.key:spec}``: ``ID`` a claim of claims.json
(``C5``, ``paper``), ``key`` one of its ``numbers``, or ``verdict``, or ``headline`` (the readings
under which it holds), and ``spec`` a format spec (``.3g``). No number is typed: every figure in
the filled text is this run's. A slot naming a claim or a key the run lacks (a grid override that
drops a sink-value norm, an experiment not run) renders as a stated gap, ``[not in this run:
{C5.peak_min[sink_v_scale=1]}]``, so the verdicts are written whatever the template asks for;
:func:`gaps` lists those slots.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pcast.analysis.text import short
from pcast.contract import TEMPLATE_SLOT

__all__ = ["fill", "gaps", "slots", "verdict_cell", "SLOT", "GAP"]

SLOT = re.compile(TEMPLATE_SLOT)
GAP = "not in this run"  # the words a slot the run lacks renders as


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


class _Missing(LookupError):
    """A slot names a claim or a number this run lacks."""


def _value(claims: Mapping, claim: str, key: str):
    if claim not in claims:
        raise _Missing(f"no claim {claim!r} in this run")
    r = claims[claim]
    if key == "verdict":
        return r["verdict"]
    if key == "headline":
        return _headline(r)
    nums = r.get("numbers", {})
    if key not in nums:
        raise _Missing(f"{claim} has no number {key!r} in this run")
    return nums[key]


def gaps(template: str, claims: Mapping) -> list[str]:
    """The slots of ``template`` this run lacks, each with what is missing
    (``"{C5.peak_min[sink_v_scale=1]}: C5 has no number 'peak_min[sink_v_scale=1]' in this run"``)."""
    out = []
    for m in SLOT.finditer(str(template)):
        try:
            _value(claims, m["claim"], m["key"])
        except _Missing as e:
            out.append(f"{m[0]}: {e}")
    return out


def fill(template: str, claims: Mapping) -> str:
    """``template`` with every slot replaced by the run's value (``claims``: claims.json's ``claims``).
    A number without a spec prints as :func:`pcast.analysis.text.short`; a missing number (None) as a dash; a
    slot the run lacks as ``[not in this run: {slot}]``; a value its spec cannot format as its plain text."""
    def sub(m: re.Match) -> str:
        try:
            v = _value(claims, m["claim"], m["key"])
        except _Missing:
            return f"[{GAP}: {m[0]}]"
        if v is None:
            return "—"
        if m["spec"]:
            try:
                return format(v, m["spec"])
            except (TypeError, ValueError):
                return str(v)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return str(v)
        return str(v) if isinstance(v, int) else short(v, 3)

    return SLOT.sub(sub, str(template))


def verdict_cell(claim: str, claims: Mapping, template: str | None) -> str:
    """The README claims table's verdict cell of ``claim``: its verdict, then its template filled."""
    v = claims[claim]["verdict"]
    text = fill(template, claims) if template else _headline(claims[claim])
    return (v if text == v else f"{v}: {text}").replace("|", "\\|")
