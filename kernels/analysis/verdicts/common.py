"""The shape of a verdict, the one combination rule, and the tolerances every claim shares.

A claim's verdict combines its **sub-cases**: the settings its sentence covers that the data
measures (a combination, a sink-value norm, a reading of an open parameter), each judged over
its own domain (usually the Δ grid) by the claim's module:

* a sub-case PASSes when the claim holds at every point of its domain, at least one of them
  non-trivial; it FAILs when the claim holds at no non-trivial point (or, for a guarantee, at
  some point it is contradicted); it is PARTIAL otherwise, with the domain where it holds; it is
  INCONCLUSIVE when it holds only at trivial points (no support, no contradiction);
* a **trivially satisfied** point (e.g. a Δ where the sink changes nothing any fix could fix)
  is recognised by the claim's module, counted, and never taken as support.

:func:`combine` is the strict rule over the sub-cases: PASS only if every sub-case passes, FAIL
if any sub-case fails (the claim as stated is contradicted in a setting its sentence covers),
PARTIAL otherwise. INCONCLUSIVE sub-cases are left out; all of them INCONCLUSIVE is INCONCLUSIVE.

Tolerances come from the data (:mod:`pcast.analysis.tolerance`): :func:`family_z` widens a
confidence level over the points a claim tests at once (Bonferroni), :func:`ci_tolerance` turns
a bootstrap CI into the half-width a prediction must lie within.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pcast.analysis import registry
from pcast.analysis.text import json_number
from pcast.analysis.tolerance import ci_tolerance, family_z

__all__ = ["VERDICTS", "Subcase", "result", "combine", "subcase_verdict", "scoped_lines", "family_z",
           "ci_tolerance"]

VERDICTS = ("PASS", "PARTIAL", "FAIL", "INCONCLUSIVE")


@dataclass(frozen=True)
class Subcase:
    """One setting of a claim and its verdict: ``domain`` says in numbers where it holds."""
    name: str
    verdict: str
    domain: str = ""

    def __post_init__(self):
        assert self.verdict in VERDICTS, self.verdict


def subcase_verdict(holds: Sequence[bool], trivial: Sequence[bool] | None = None, *,
                    guarantee: bool = False) -> str:
    """A sub-case's verdict from the per-point outcomes over its domain.

    ``holds[i]``: the claim holds at point i; ``trivial[i]``: point i is trivially satisfied (not
    support). PASS: holds everywhere and at some non-trivial point; FAIL: holds at no non-trivial
    point, or (``guarantee``) fails anywhere; PARTIAL otherwise; INCONCLUSIVE without a point, or
    when every point holds but only trivially (nothing supports it, nothing contradicts it).
    """
    holds = [bool(h) for h in holds]
    trivial = [False] * len(holds) if trivial is None else [bool(t) for t in trivial]
    if not holds:
        return "INCONCLUSIVE"
    support = [h for h, t in zip(holds, trivial) if not t]
    if all(holds):
        return "PASS" if support else "INCONCLUSIVE"
    if not any(support) or (guarantee and not all(holds)):
        return "FAIL"
    return "PARTIAL"


def combine(subcases: Iterable[Subcase | str]) -> str:
    """The strict rule: PASS if every sub-case passes, FAIL if any fails, PARTIAL otherwise."""
    v = [s.verdict if isinstance(s, Subcase) else s for s in subcases]
    v = [x for x in v if x != "INCONCLUSIVE"]
    if not v:
        return "INCONCLUSIVE"
    if all(x == "PASS" for x in v):
        return "PASS"
    if any(x == "FAIL" for x in v):
        return "FAIL"
    return "PARTIAL"


def scoped_lines(subcases: Iterable[Subcase]) -> list[dict]:
    """The scoped verdicts listed beneath a claim: one per sub-case, with its domain."""
    return [{"scope": s.name, "verdict": s.verdict, "domain": s.domain} for s in subcases]


def result(claim_id: str, verdict: str, criterion: str, numbers: dict, details, *,
           scoped: Sequence[Subcase] = (), tolerances: Sequence[str] = ()) -> dict:
    """A verdict dict; the statement and the evidence come from :mod:`pcast.analysis.registry`.

    ``scoped``: the sub-cases (listed beneath the verdict on the claim as stated, never replacing
    it); ``tolerances``: each numeric tolerance used and where it comes from.
    """
    assert verdict in VERDICTS, verdict
    c = registry.claim(claim_id)
    return {"claim": claim_id, "statement": c.statement, "verdict": verdict,
            "criterion": criterion, "numbers": {k: json_number(v) for k, v in numbers.items()},
            "details": list(details), "evidence": list(c.outputs), "scoped": scoped_lines(scoped),
            "tolerances": list(tolerances)}
