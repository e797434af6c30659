"""A reported case and its numbers: the types of table T9's registry (:mod:`pcast.probes.cases`).

A :class:`Case` holds a report's source, the policy and the fixture it describes, and one
:class:`Measurement` per number it printed. The modules that build cases (:mod:`pcast.probes.cases`,
:mod:`pcast.probes.cases_scale`, :mod:`pcast.probes.cases_accum`, :mod:`pcast.probes.cases_exp`,
:mod:`pcast.probes.cases_vleak`) import these types from here, and :mod:`pcast.probes.cases` gathers the cases.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Case", "Measurement"]


@dataclass(frozen=True)
class Measurement:
    """One number of a report: what it is, its value, the decimals printed, and how the instrument gets it."""

    measured: str
    report: float
    decimals: int
    compute: object = None  # a callable () -> float, or None when the fixture cannot be rebuilt
    reason: str = ""  # why INCONCLUSIVE (compute None) or PARTIAL (computed, outside the precision)
    assumed: bool = False  # the fixture is partly assumed: PARTIAL even within the precision

    def evaluate(self) -> tuple[float | None, str]:
        if self.compute is None:
            return None, "INCONCLUSIVE"
        value = float(self.compute())
        close = abs(value - self.report) <= 0.5 * 10.0 ** -self.decimals * (1 + 1e-9)
        if close:
            return value, "PARTIAL" if self.assumed else "PASS"
        return value, "PARTIAL" if self.reason else "FAIL"


@dataclass(frozen=True)
class Case:
    """One public report rebuilt: its source, the policy and fixture it describes, its numbers, and how the
    pages name it (``title``, ``group``, ``checks``; tools/cases_docs.py writes them from the registry)."""

    key: str
    source: str  # repository
    number: str  # "PR 5535", "issue 2577"
    link: str
    policy: str  # the policy as the report describes it (a preset name or explicit options)
    fixture: str
    measurements: tuple = field(default_factory=tuple)
    title: str = ""  # the case's name in docs/probes.md's table (default: the key)
    group: str = ""  # the report group's short name, as the README's claims table lists it (default: the repository)
    checks: str = ""  # what is checked, in a line of docs/probes.md's table (default: the fixture)
