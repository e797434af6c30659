"""T9's pages written from the cases' registry (:data:`pcast.cases.CASES`): docs/probes.md's case table and its
counts, and the README claims table's ``cases`` row, its label and its verdict cell, with that cell in
docs/data/default_run.json.

The table has one line per case: its title, source and numbers, what it checks, and its status, counted from
its T9 rows (:func:`pcast.cases.t9_rows`) with the numbers that do not PASS named (their reasons are T9's).
The verdict cell is the one a run writes (:func:`pcast.analysis.verdicts.templates.verdict_cell` on the
``cases`` section, :func:`pcast.analysis.verdicts.claim_cases`, with the default preset's ``why`` in config.yaml):
T9 depends on no preset, so the rows computed here are the run's. The README row's label lists the
registry's groups. ``tests/tools/test_cases_docs.py`` checks that the pages are the rendering of the registry.

Usage:
    python tools/cases_docs.py          # write the three pages
    python tools/cases_docs.py --check  # exit 1, naming each stale page
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd
import yaml

from pcast.analysis.verdicts import claim_cases
from pcast.analysis.verdicts.templates import verdict_cell
from pcast.cases import CASES, t9_rows

ROOT = Path(__file__).resolve().parents[1]
PROBES_PAGE = ROOT / "docs" / "probes.md"
README = ROOT / "README.md"
DEFAULT_RUN = ROOT / "docs" / "data" / "default_run.json"
TABLE = ("<!-- cases-table -->", "<!-- /cases-table -->")
COUNTS = ("<!-- cases-counts -->", "<!-- /cases-counts -->")
STATUSES = ("PASS", "PARTIAL", "INCONCLUSIVE", "FAIL")


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def case_status(rows: list[dict]) -> str:
    """``3 PASS; 1 PARTIAL (FP32 reference, mean output)``: a case's rows counted, those that do not PASS named."""
    parts = []
    for s in STATUSES:
        named = [r["measured"] for r in rows if r["status"] == s]
        if named:
            parts.append(f"{len(named)} {s}" + ("" if s == "PASS" else f" ({'; '.join(named)})"))
    return "; ".join(parts)


def render_table(cases, rows: list[dict]) -> str:
    """docs/probes.md's case table: one line per case of the registry."""
    lines = ["| case | source | what is checked | status |", "|---|---|---|---|"]
    for c in cases:
        mine = [r for r in rows if r["case"] == c.key]
        lines.append(f"| {_cell(c.title or c.key)} | {_cell(c.source)} {_cell(c.number)} | "
                     f"{_cell(c.checks or c.fixture)} | {_cell(case_status(mine))} |")
    return "\n".join(lines)


def section(rows: list[dict]) -> dict:
    """The ``cases`` section of the verdict on these T9 rows (as claims.json holds it)."""
    return claim_cases(pd.DataFrame(rows).astype(str))


def render_counts(rows: list[dict]) -> str:
    r = section(rows)
    n = r["numbers"]
    return (f"Today the section is {r['verdict']} ({n['n_pass']} numbers PASS, {n['n_partial']} PARTIAL, "
            f"{n['n_inconclusive']} INCONCLUSIVE), on every preset.")


def readme_label(cases) -> str:
    groups = list(dict.fromkeys(c.group or c.source.split("/")[-1] for c in cases))
    return f"cases: 2026's reported FP8-P failures rebuilt ({', '.join(groups)})"


def readme_cell(rows: list[dict]) -> str:
    why = yaml.safe_load((ROOT / "config.yaml").read_text())["presets"]["default"]["expected_verdicts"]["cases"]["why"]
    return verdict_cell("cases", {"cases": section(rows)}, why)


def _between(text: str, marks: tuple[str, str], body: str) -> str:
    head, rest = text.split(marks[0], 1)
    return f"{head}{marks[0]}{body}{marks[1]}{rest.split(marks[1], 1)[1]}"


def _readme_row(text: str, label: str, cell: str) -> str:
    out = []
    for line in text.splitlines(keepends=True):
        if line.startswith("| cases: "):
            cells = line.rstrip("\n").split(" | ")
            cells[0], cells[-1] = f"| {label}", f"{cell} |"
            line = " | ".join(cells) + "\n"
        out.append(line)
    return "".join(out)


def pages(cases=CASES, rows: list[dict] | None = None) -> dict[Path, str]:
    """Each page as the registry writes it: path -> its new text."""
    rows = t9_rows(cases) if rows is None else rows
    probes = PROBES_PAGE.read_text(encoding="utf-8")
    probes = _between(probes, TABLE, "\n" + render_table(cases, rows) + "\n")
    probes = _between(probes, COUNTS, render_counts(rows))
    cell = readme_cell(rows)
    run = json.loads(DEFAULT_RUN.read_text(encoding="utf-8"))
    run["claims"]["cases"]["cell"] = cell
    readme = _readme_row(README.read_text(encoding="utf-8"), readme_label(cases), cell)
    run_text = json.dumps(run, indent=1, sort_keys=True, ensure_ascii=False) + "\n"  # as claims_table.py --json
    return {PROBES_PAGE: probes, README: readme, DEFAULT_RUN: run_text}


def stale(new: dict[Path, str]) -> list[str]:
    """The pages whose text differs from ``new``."""
    return [str(p.relative_to(ROOT)) for p, text in new.items() if p.read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each stale page")
    args = ap.parse_args(argv)
    new = pages()
    old = stale(new)
    if args.check:
        print("stale: " + ", ".join(old) if old else "current")
        return 1 if old else 0
    for p, text in new.items():
        p.write_text(text, encoding="utf-8")
    print(f"written: {', '.join(old) or 'nothing changed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
