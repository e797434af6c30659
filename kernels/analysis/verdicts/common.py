"""The shape of a verdict: one dict per claim, its statement and evidence from the registry."""

from __future__ import annotations

from collections.abc import Sequence

from kernels.analysis import registry
from kernels.analysis.text import json_number

__all__ = ["VERDICTS", "result", "combine"]

VERDICTS = ("PASS", "PARTIAL", "FAIL", "INCONCLUSIVE")


def result(claim_id: str, verdict: str, criterion: str, numbers: dict, details) -> dict:
    """A verdict dict; the statement and the evidence come from :mod:`kernels.analysis.registry`."""
    assert verdict in VERDICTS, verdict
    c = registry.claim(claim_id)
    return {"claim": claim_id, "statement": c.statement, "verdict": verdict,
            "criterion": criterion, "numbers": {k: json_number(v) for k, v in numbers.items()},
            "details": list(details), "evidence": list(c.outputs)}


def combine(verdicts: Sequence[str]) -> str:
    """PASS if all pass, FAIL if none passes even partly, PARTIAL otherwise."""
    v = [x for x in verdicts if x != "INCONCLUSIVE"]
    if not v:
        return "INCONCLUSIVE"
    if all(x == "PASS" for x in v):
        return "PASS"
    if all(x == "FAIL" for x in v):
        return "FAIL"
    return "PARTIAL"
