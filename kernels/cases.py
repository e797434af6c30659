"""The public 2026 reports of FP8-P failures, each rebuilt as a case and checked (table T9).

The public name of :mod:`pcast.probes.cases`, where the cases are built (docs/probes.md, "Reported cases"):
``from pcast.cases import CASES, t9_rows, write_t9``.
"""

from __future__ import annotations

from pcast.probes.cases import CASES, T9_COLUMNS, Case, Measurement, t9_rows, write_t9

__all__ = ["Case", "Measurement", "CASES", "T9_COLUMNS", "t9_rows", "write_t9"]
