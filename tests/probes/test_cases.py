"""Table T9: every reported case is reproduced within the precision its report printed, or says why not;
the table is written as CSV and Markdown."""

import csv

import pytest

from pcast.probes.cases import CASES, T9_COLUMNS, Measurement, write_t9


@pytest.fixture(scope="module")
def t9(tmp_path_factory):
    d = tmp_path_factory.mktemp("t9")
    rows = write_t9(d / "T9.csv", d / "T9.md")
    return d, rows


def test_every_case_has_a_source_link_and_a_row(t9):
    _, rows = t9
    assert {r["case"] for r in rows} == {c.key for c in CASES}
    for c in CASES:
        assert c.link.startswith("https://github.com/") and c.source in c.link and c.policy and c.fixture


def test_every_row_passes_or_says_why_not(t9):
    _, rows = t9
    for r in rows:
        assert r["status"] in ("PASS", "PARTIAL", "INCONCLUSIVE"), r
        assert (r["status"] == "PASS") != bool(r["reason"]), r
        if r["status"] == "PASS":
            decimals = int(r["printed"].split()[0])
            assert abs(float(r["instrument"]) - float(r["report"])) <= 0.5 * 10.0 ** -decimals * (1 + 1e-9)


def test_the_numbers_that_must_reproduce_do(t9):
    _, rows = t9
    passed = {(r["case"], r["measured"]) for r in rows if r["status"] == "PASS"}
    assert ("aiter-mla-decode", "unscaled FP8 oracle, mean output") in passed
    assert ("aiter-mla-decode", "fix: P scaled by 448, mean output") in passed
    assert ("fa4-sm100-fp8", "dominant key's weight lost (PR 2713: 1 - 448/4096)") in passed
    assert ("fa4-sm100-fp8", "headroom before P clips (PR 2694, natural units)") in passed
    assert all(r["status"] in ("INCONCLUSIVE", "PARTIAL") and "not give" in r["reason"] for r in rows
               if r["case"] == "aiter-paged-attention-ragged")


def test_csv_and_markdown_hold_every_row(t9):
    d, rows = t9
    with open(d / "T9.csv", newline="") as f:
        back = list(csv.DictReader(f))
    assert tuple(back[0]) == T9_COLUMNS and back == rows
    md = (d / "T9.md").read_text().splitlines()
    assert len(md) == len(rows) + 2 and md[0].startswith("| case |")


def test_a_measurement_can_fail():
    assert Measurement("x", 0.5, 2, lambda: 0.52).evaluate() == (0.52, "FAIL")
    assert Measurement("x", 0.5, 2, lambda: 0.52, reason="known").evaluate()[1] == "PARTIAL"
    assert Measurement("x", 0.5, 2, lambda: 0.504).evaluate()[1] == "PASS"
    assert Measurement("x", 0.5, 2).evaluate() == (None, "INCONCLUSIVE")


def _t9_frame(rows):
    import pandas as pd

    return pd.DataFrame(rows).astype(str)


def test_the_cases_section_combines_cases_strictly_and_lists_inconclusive_numbers(t9):
    from pcast.analysis.verdicts import claim_cases

    d, rows = t9
    import pandas as pd

    r = claim_cases(pd.read_csv(d / "T9.csv", dtype=str, keep_default_na=False))
    n = {s: sum(x["status"] == s for x in rows) for s in ("PASS", "PARTIAL", "INCONCLUSIVE")}
    assert r["numbers"]["n_pass"] == n["PASS"] and r["numbers"]["n_inconclusive"] == n["INCONCLUSIVE"]
    assert r["verdict"] == ("PARTIAL" if n["PARTIAL"] else "PASS")
    assert any("no failure of the instrument" in line for line in r["details"])
    assert all(any(x["reason"] in line for line in r["details"]) for x in rows if x["status"] == "INCONCLUSIVE")
    assert len(r["scoped"]) == len(CASES)


def test_the_cases_section_can_fail():
    from pcast.analysis.verdicts import claim_cases

    row = dict(case="c", number="PR 1", measured="x", report="0.50", printed="2 decimals", instrument="0.5040",
               status="PASS", reason="")
    assert claim_cases(_t9_frame([row]))["verdict"] == "PASS"
    # a PASS whose value lies outside the printed precision, a PARTIAL without its reason: both FAIL
    assert claim_cases(_t9_frame([dict(row, instrument="0.5100")]))["verdict"] == "FAIL"
    assert claim_cases(_t9_frame([row, dict(row, status="PARTIAL")]))["verdict"] == "FAIL"
    assert claim_cases(_t9_frame([row, dict(row, status="PARTIAL", reason="known")]))["verdict"] == "PARTIAL"
    # INCONCLUSIVE numbers are left out: alone they are INCONCLUSIVE, beside a PASS the PASS stands
    lone = dict(row, status="INCONCLUSIVE", instrument="", reason="no data")
    assert claim_cases(_t9_frame([lone]))["verdict"] == "INCONCLUSIVE"
    assert claim_cases(_t9_frame([row, dict(lone, case="d")]))["verdict"] == "PASS"


def test_kernels_cases_is_the_public_name():
    import pcast.cases
    import pcast.probes.cases

    assert pcast.cases.CASES is pcast.probes.cases.CASES and pcast.cases.write_t9 is write_t9
