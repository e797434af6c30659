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

**Settings and readings.** A claim's sub-cases are of two kinds. A **setting** is one its sentence
covers (both forward combinations of C1's law, every fix of C5): settings combine by
:func:`combine`, strictly. A **reading** is one interpretation of a word or parameter the paper
leaves open (the sinks' value norm, what "moderate" or "precision loss" means): each reading gets
the strict verdict over its own settings, and :func:`across_readings` combines the readings: PASS
when the claim holds under every reading, FAIL when it holds under none, PARTIAL when it holds
under some (:func:`headline` names them). A reading the data cannot judge (INCONCLUSIVE) is shown and
keeps the claim from PASS: PASS needs every reading tested and holding. Adding a reading can turn PASS
into PARTIAL, never PARTIAL into FAIL: a grid value is never a hidden requirement. A claim that leaves nothing open has
one reading, the claim as stated. Settings are judged over the claim's **domain**; what lies
outside it (where the paper's own theory says the claim cannot hold) is shown separately as
``beyond_domain`` and never enters the verdict.

**Robustness.** Every choice of the artifact that can decide a verdict (a margin, a factor, a
window, a rule) is a :class:`Choice`: its value, its source, and the verdict at alternative values,
computed from the same data. A choice read from the config names its ``key``
(``statistics.tost_margin``, ``claims.C6.trivial_margin``); when the run overrides it, the row shows
the default beside the value and the default is among the alternatives (:func:`alternative_values`).

Tolerances come from the data (:mod:`pcast.analysis.tolerance`): :func:`family_z` widens a
confidence level over the points a claim tests at once (Bonferroni), :func:`ci_tolerance` turns
a bootstrap CI into the half-width a prediction must lie within.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from pcast.analysis import registry
from pcast.analysis.text import json_number
from pcast.analysis.tolerance import ci_tolerance, family_z

__all__ = ["VERDICTS", "Subcase", "Choice", "result", "combine", "across_readings", "headline", "holds_under",
           "subcase_verdict", "scoped_lines", "reading_lines", "robustness_lines", "family_z", "ci_tolerance",
           "exact_fraction", "AS_STATED", "ARTIFACTS_CHOICE", "alternative_values", "choice", "default_of"]

#: The one reading of a claim that leaves nothing open.
AS_STATED = "the claim as stated"

VERDICTS = ("PASS", "PARTIAL", "FAIL", "INCONCLUSIVE")


@dataclass(frozen=True)
class Subcase:
    """One setting of a claim and its verdict: ``domain`` says in numbers where it holds. ``name`` and ``domain``
    are for the reader; code that groups or labels sub-cases reads ``params``, the setting's values (for example
    ``{"sink_v_scale": 0.03}``), never the text."""
    name: str
    verdict: str
    domain: str = ""
    params: Mapping = field(default_factory=dict, compare=False, hash=False)

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


def _judged(items: Iterable[Subcase | str]) -> list[str]:
    """The verdicts of ``items`` (sub-cases or verdict strings), INCONCLUSIVE ones left out."""
    return [x for x in (s.verdict if isinstance(s, Subcase) else s for s in items) if x != "INCONCLUSIVE"]


def combine(subcases: Iterable[Subcase | str]) -> str:
    """The strict rule: PASS if every sub-case passes, FAIL if any fails, PARTIAL otherwise."""
    v = _judged(subcases)
    if not v:
        return "INCONCLUSIVE"
    if all(x == "PASS" for x in v):
        return "PASS"
    if any(x == "FAIL" for x in v):
        return "FAIL"
    return "PARTIAL"


def holds_under(verdict: str) -> bool:
    """Whether a reading's verdict says the claim holds under it (wholly or in part)."""
    return verdict in ("PASS", "PARTIAL")


def across_readings(readings: Iterable[Subcase | str]) -> str:
    """The rule across readings: PASS only if every reading was tested and the claim holds under each, FAIL if it
    holds under none that was tested, PARTIAL otherwise. An INCONCLUSIVE reading (the data cannot judge it) is
    never dropped: beside readings that hold it makes PARTIAL, never PASS. All INCONCLUSIVE is INCONCLUSIVE."""
    v = [x.verdict if isinstance(x, Subcase) else x for x in readings]
    judged = [x for x in v if x != "INCONCLUSIVE"]
    if not judged:
        return "INCONCLUSIVE"
    if all(x == "PASS" for x in v):
        return "PASS"
    if not any(holds_under(x) for x in judged):
        return "FAIL"
    return "PARTIAL"


def headline(readings: Sequence[Subcase]) -> str:
    """One line naming the readings under which the claim holds (and those where it does not)."""
    if len(readings) == 1:
        r = readings[0]
        return f"{r.verdict} {r.name}" + (f" ({r.domain})" if r.domain else "")
    by = {v: [r.name for r in readings if r.verdict == v] for v in VERDICTS}
    parts = [f"{v} under {len(by[v])} of {len(readings)} readings: {'; '.join(by[v])}" for v in VERDICTS if by[v]]
    return ". ".join(parts)


def exact_fraction(count, total) -> Fraction:
    """An exact fraction of two integer counts (a bound check compares these, never printed floats)."""
    c, t = int(count), int(total)
    assert c == count and t == total and t > 0, (count, total)
    return Fraction(c, t)


@dataclass(frozen=True)
class Choice:
    """A choice that can decide a verdict: its ``value``, its ``source`` (the data's noise, the paper's
    words, a physical reason, the theory, or the artifact's choice) and ``verdicts``: alternative value -> the
    claim's verdict. ``key``: the config key it is read from (``claims.C1.allowance``), when it is one;
    ``default``: that key's value in config.yaml when this run overrides it."""
    choice: str
    value: str
    source: str
    verdicts: Mapping[str, str]
    key: str = ""
    default: str = ""


#: The words of a source that is the artifact's own choice (no paper's words, theory or measurement behind it).
ARTIFACTS_CHOICE = "the artifact's choice"


def default_of(cfg: Mapping, key: str):
    """config.yaml's value of ``key`` when this run overrides it (``cfg['_defaults']``, set by
    :func:`pcast.analysis.verdicts.evaluate`), else None."""
    return (cfg.get("_defaults") or {}).get(key)


def choice(name: str, key: str, current, source: str, verdict_at, cfg: Mapping, alternatives: Iterable = (), *,
           label=None) -> Choice:
    """A robustness row of a config key: ``verdict_at(value)`` at each of :func:`alternative_values` (the
    configured ``alternatives`` and the default when the run overrides ``key``); ``label`` prints a value."""
    label = label or (lambda v: f"{v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v))
    d = default_of(cfg, key)
    return Choice(name, label(current), source, {label(a): verdict_at(a) for a in
                                                 alternative_values(current, alternatives, d)},
                  key=key, default="" if d is None else label(d))


def alternative_values(current, alternatives: Iterable, default=None) -> list:
    """The values a robustness row tries: the configured ``alternatives`` and, when the run overrides the key,
    its ``default``; never the current value itself (its verdict is the claim's)."""
    out = []
    for a in [*alternatives, *([] if default is None else [default])]:
        if a != current and a not in out:
            out.append(a)
    return out


def reading_lines(readings: Iterable[Subcase]) -> list[dict]:
    """claims.json's ``readings``: one entry per reading, with its verdict and domain."""
    return [{"reading": r.name, "verdict": r.verdict, "domain": r.domain} for r in readings]


def robustness_lines(choices: Iterable[Choice]) -> list[dict]:
    """claims.json's ``robustness``: one entry per choice."""
    return [{"choice": c.choice, "value": c.value, "source": c.source, "verdicts": dict(c.verdicts), "key": c.key,
             "default": c.default} for c in choices]


def scoped_lines(subcases: Iterable[Subcase]) -> list[dict]:
    """The scoped verdicts listed beneath a claim: one per sub-case, with its domain."""
    return [{"scope": s.name, "verdict": s.verdict, "domain": s.domain} for s in subcases]


def result(claim_id: str, verdict: str, criterion: str, numbers: dict, details, *,
           scoped: Sequence[Subcase] = (), tolerances: Sequence[str] = (),
           readings: Sequence[Subcase] | None = None, robustness: Sequence[Choice] = (),
           beyond_domain: Sequence[Subcase] | None = None, kinds: Sequence[str] = ()) -> dict:
    """A verdict dict; the statement and the evidence come from :mod:`pcast.analysis.registry`.

    ``scoped``: the sub-cases (listed beneath the verdict on the claim as stated, never replacing
    it); ``tolerances``: each numeric tolerance used and where it comes from; ``readings``: each
    reading and its verdict (given: the verdict must be :func:`across_readings` of them);
    ``robustness``: the choices that can decide it; ``beyond_domain``: what lies outside the
    claim's domain (never in the verdict); ``kinds``: lines saying which sub-cases are settings and
    which readings, and why.
    """
    assert verdict in VERDICTS, verdict
    c = registry.claim(claim_id)
    out = {"claim": claim_id, "statement": c.statement, "verdict": verdict,
           "criterion": criterion, "numbers": {k: json_number(v) for k, v in numbers.items()},
           "details": list(details), "evidence": list(c.outputs), "scoped": scoped_lines(scoped),
           "tolerances": list(tolerances)}
    if readings is not None:
        assert verdict == across_readings(readings), (claim_id, verdict, [r.verdict for r in readings])
        out.update(readings=reading_lines(readings), headline=headline(readings),
                   robustness=robustness_lines(robustness), kinds=list(kinds))
    if beyond_domain is not None:
        out["beyond_domain"] = scoped_lines(beyond_domain)
    return out
