"""The README's and docs' measured figures are the rendering of docs/data/measured.json.

Disk, memory, times and job counts outside the claims table sit between ``<!-- measured:KEY -->`` and
``<!-- /measured -->``; ``python tools/measure.py`` measures them and writes the spans. Here the text must
equal its rendering, every measurement must say its machine and load, and no page may type such a figure
outside a span.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import measure  # noqa: E402

DATA = measure.load()
ALL_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_data_file_holds_every_measurement_the_text_names():
    keys = {k for page in measure.PAGES for k, _ in measure.SPAN.findall((ROOT / page).read_text())}
    assert keys == set(measure.TEMPLATES), keys ^ set(measure.TEMPLATES)
    for key in keys:
        measure.TEMPLATES[key](DATA)  # raises KeyError for a figure the file does not hold


@pytest.mark.parametrize("page", measure.PAGES)
def test_each_page_is_the_rendering_of_the_data_file(page):
    text = (ROOT / page).read_text()
    assert measure.SPAN.search(text), f"{page}: no measured span"
    assert measure.render(text, DATA) == text, f"{page} is stale: run `python tools/measure.py write`"


def test_spans_appear_only_on_the_pages_the_tool_writes():
    for page in ALL_PAGES:
        rel = str(page.relative_to(ROOT))
        if "<!-- measured:" in page.read_text():
            assert rel in measure.PAGES, f"{rel} has a measured span that tools/measure.py never writes"


def _measurements(data):
    yield from data["runs"].values()
    yield from data["install"].values()
    yield data["tests"]


def test_every_measurement_says_its_machine_and_load():
    for m in _measurements(DATA):
        assert {"cores", "memory_gib", "cpu"} <= set(m["machine"]), m
        assert m["load_before"] >= 0 and m["load_after"] >= 0
        assert m["wall_s"] > 0
        assert "load" in measure.where(m) and str(m["machine"]["cores"]) in measure.where(m)


def test_a_changed_measurement_changes_the_text():
    data = copy.deepcopy(DATA)
    data["runs"]["smoke"]["jobs"] += 1
    text = (ROOT / "README.md").read_text()
    assert measure.render(text, data) != text
    assert f"{data['runs']['smoke']['jobs']} jobs" in measure.render(text, data)


# figures typed outside a span: a size, or a wall time said to be measured
TYPED = re.compile(r"\d+(\.\d+)? ?(MB|GB) of disk|\b\d+ s measured|writes about \d+ ?MB|minutes? of wall time on")


def test_no_page_types_a_headline_figure_outside_a_span():
    for page in (ROOT / p for p in measure.PAGES):
        outside = measure.SPAN.sub("", page.read_text())
        hit = TYPED.search(outside)
        assert hit is None, f"{page.name}: typed figure {hit.group(0)!r}; put it in docs/data/measured.json"


def test_the_recorded_test_run_passed():
    """A measurement of a failing suite is not the suite's figure: tools/measure.py refuses to record one."""
    assert measure.failed_tests(DATA["tests"]["summary"]) == [], DATA["tests"]["summary"]


def test_a_failing_test_run_is_named_and_refused(monkeypatch):
    out = ("..F.\n=========================== short test summary info ============================\n"
           "FAILED tests/emulator/test_fused.py::test_thread_count_does_not_matter - AssertionError\n"
           "ERROR tests/x/test_y.py::test_z - RuntimeError\n= 1 failed, 2502 passed, 1 error in 139.08s =\n")
    assert measure.failed_tests(out) == ["tests/emulator/test_fused.py::test_thread_count_does_not_matter",
                                         "tests/x/test_y.py::test_z"]
    assert measure.failed_tests("1 failed, 2502 passed, 5 skipped in 139.08s") == [
        "1 failed, 2502 passed, 5 skipped in 139.08s"]
    assert measure.failed_tests("= 2504 passed, 5 skipped in 139.08s =") == []
    assert measure.failed_tests("") != []  # no summary: not a passing run
    monkeypatch.setattr(measure, "_timed", lambda *a, **k: {"stdout": out, "wall_s": 1.0, "load_before": 0.0,
                                                           "load_after": 0.0})
    with pytest.raises(SystemExit, match="test_thread_count_does_not_matter"):
        measure.measure_tests("0")


def test_time_and_size_formats():
    assert measure.fmt_time(59.4) == "59 s" and measure.fmt_time(201) == "3 min 21 s"
    assert measure.fmt_mb(88) == "88 MB" and measure.fmt_mb(2816) == "2.8 GB"


def test_the_job_counts_agree_with_the_default_runs_record():
    """measured.json counts a run's jobs as default_run.json does: one benchmark file a job (Snakemake's
    "N of N steps" also counts the target rule `all`, which runs nothing)."""
    import json

    record = json.loads((ROOT / "docs" / "data" / "default_run.json").read_text())
    assert DATA["runs"]["default"]["jobs"] == record["all_jobs"]
    assert record["all_jobs"] == sum(s["jobs"] for s in record["steps"].values())
