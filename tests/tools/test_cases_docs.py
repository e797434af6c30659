"""tools/cases_docs.py: docs/probes.md's case table and counts, the README's T9 row and its cell in
docs/data/default_run.json are the rendering of the cases' registry; a stale page is found."""

import pytest

import cases_docs
from pcast.cases import CASES, Case, Measurement

pytestmark = pytest.mark.usefixtures("one_thread")


def _row(case, measured, status, reason=""):
    return dict(case=case, source="o/r", number="PR 1", link="https://github.com/o/r/pull/1", policy="p",
                fixture="f", measured=measured, report="0.50", printed="2 decimals",
                instrument="" if status == "INCONCLUSIVE" else "0.5000", status=status, reason=reason)


def test_the_pages_are_the_registrys_rendering():
    new = cases_docs.pages()
    assert cases_docs.stale(new) == [], "stale: run `python tools/cases_docs.py`"
    table = new[cases_docs.PROBES_PAGE].split(cases_docs.TABLE[0])[1].split(cases_docs.TABLE[1])[0]
    assert len(table.strip().splitlines()) == len(CASES) + 2
    assert all(f"| {c.title or c.key} |" in table for c in CASES)
    assert cases_docs.readme_label(CASES) in new[cases_docs.README]


def test_a_case_added_to_the_registry_makes_the_pages_stale():
    extra = Case("x-case", "o/r", "PR 1", "https://github.com/o/r/pull/1", "p", "f", (Measurement("m", 0.5, 2),),
                 title="X case", group="X")
    rows = [_row("x-case", "m", "INCONCLUSIVE", "no data")]
    new = cases_docs.pages((extra,), rows)
    assert set(cases_docs.stale(new)) == {"docs/probes.md", "README.md", "docs/data/default_run.json"}
    assert "| X case | o/r PR 1 | f | 1 INCONCLUSIVE (m) |" in new[cases_docs.PROBES_PAGE]
    assert "rebuilt (X) |" in new[cases_docs.README] and "| INCONCLUSIVE: 0 reported numbers reproduce;" in new[cases_docs.README]
    assert "Today the section is INCONCLUSIVE (0 numbers PASS, 0 PARTIAL, 1 INCONCLUSIVE)" in new[cases_docs.PROBES_PAGE]


def test_a_case_status_counts_its_rows_and_names_those_that_do_not_pass():
    rows = [_row("c", "a", "PASS"), _row("c", "b", "PASS"), _row("c", "d", "PARTIAL", "known"),
            _row("c", "e", "INCONCLUSIVE", "no data")]
    assert cases_docs.case_status(rows) == "2 PASS; 1 PARTIAL (d); 1 INCONCLUSIVE (e)"
    assert cases_docs.case_status(rows[:2]) == "2 PASS"
