"""tools/compare_runs.py, the byte-identity proof of a refactor, and its --rel mode for tidy tables, can fail."""

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("compare_runs", Path(__file__).resolve().parents[2] / "tools" / "compare_runs.py")
compare_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare_runs)

FILES = {
    "results/tidy/collapse.csv": "a,b\n1,2\n",
    "figures/fig_mse.csv": "x\n0.5\n",
    "figures/table_scales.tex": "\\toprule\n",
    "figures/claims.md": "# verdict\n",
    "figures/fig_mse.pdf": "not compared",
}


def _run(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_identical_runs_pass_and_every_pattern_is_hashed(tmp_path, capsys):
    a, b = _run(tmp_path / "a", FILES), _run(tmp_path / "b", FILES)
    assert set(compare_runs.hashes(a)) == set(FILES) - {"figures/fig_mse.pdf"}
    assert compare_runs.main(["--before-dir", str(a), "--after-dir", str(b)]) == 0
    assert "4 identical, 0 different or missing" in capsys.readouterr().out


@pytest.mark.parametrize("change", ["one byte", "missing"])
def test_a_changed_or_missing_output_fails(tmp_path, capsys, change):
    after = dict(FILES)
    if change == "one byte":
        after["results/tidy/collapse.csv"] = "a,b\n1,3\n"
    else:
        del after["figures/claims.md"]
    a, b = _run(tmp_path / "a", FILES), _run(tmp_path / "b", after)
    assert compare_runs.main(["--before-dir", str(a), "--after-dir", str(b)]) == 1
    out = capsys.readouterr().out
    assert ("DIFFERENT" if change == "one byte" else "missing") in out


def test_nothing_to_compare_fails(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    assert compare_runs.main(["--before-dir", str(tmp_path / "a"), "--after-dir", str(tmp_path / "b")]) == 1


# ----------------------------------------------------------------------------- --rel: tidy tables cell by cell
# Small tidy tables with the real column lists of pcast.contract; no pipeline runs.

from pcast.contract import CONFORMANCE_COLUMNS, POLICY_TIDY_COLUMNS, TIDY_COLUMNS  # noqa: E402

TABLES = {
    "results/tidy/scales.csv": TIDY_COLUMNS,
    "results/tidy/policies.csv": POLICY_TIDY_COLUMNS,
    "results/tidy/conformance.csv": CONFORMANCE_COLUMNS,
}
SAMPLE = {"experiment": "scales", "order": "forward", "fmt": "e4m3fn", "causal": "False", "backend": "emulator",
          "underflow": "201", "terms": "1044480", "saturated": "0", "diag_equal": "True"}


def _cell(column: str, seed: int) -> str:
    if column in compare_runs.TOLERANT_COLUMNS:
        return f"{(seed + 1) * 1.476092643e-06:.10g}"
    if column in compare_runs.COUNT_FRACTION_COLUMNS:
        return f"{(200 + seed) / 1044480:.10g}"
    return str(seed) if column == "seed" else SAMPLE.get(column, "64")


def _table(columns, rows: int = 3, edit=None, header=None) -> str:
    """A tidy CSV as pandas writes it (float_format %.10g, '\\n'); ``edit(rows)`` changes the row dicts."""
    table = [{c: _cell(c, seed) for c in columns} for seed in range(rows)]
    if edit is not None:
        edit(table)
    lines = [",".join(header or columns)] + [",".join(row[c] for c in columns) for row in table]
    return "\n".join(lines) + "\n"


RUN = {**{name: _table(cols) for name, cols in TABLES.items()}, "figures/claims.md": "# verdict\n"}


def _set(column: str, row: int, value):
    """An ``edit`` that puts ``value`` (text, or a function of the old text) in one cell."""
    def edit(table):
        old = table[row][column]
        table[row][column] = value(old) if callable(value) else value
    return edit


def _rel(tmp_path, capsys, after: dict[str, str], *extra: str, before: dict[str, str] = RUN) -> tuple[int, str]:
    """Exit code and output of ``--rel 1e-9`` between two finished runs made of ``before`` and ``after``."""
    a, b = _run(tmp_path / "a", before), _run(tmp_path / "b", after)
    rc = compare_runs.main(["--before-dir", str(a), "--after-dir", str(b), "--rel", "1e-9", *extra])
    return rc, capsys.readouterr().out


def _line(out: str, name: str) -> str:
    (line,) = [line for line in out.splitlines() if f" {name} " in line]
    return line


def test_column_classes_come_from_the_contract():
    every = set(TIDY_COLUMNS) | set(POLICY_TIDY_COLUMNS) | set(CONFORMANCE_COLUMNS)
    assert set(compare_runs.CONTRACT_COLUMNS) == every
    assert set(compare_runs.TOLERANT_COLUMNS) <= every
    assert set(compare_runs.COUNT_FRACTION_COLUMNS) == {"underflow_frac", "underflow_sink_frac", "saturated_frac"}
    assert set(compare_runs.EXACT_COLUMNS) == every - set(compare_runs.TOLERANT_COLUMNS)
    for count in ("underflow", "terms", "underflow_sink", "terms_sink", "saturated", "mismatched_rows",
                  "fragile_elements", "seed", "n", "order", "scale", "fmt", "underflow_frac", "saturated_frac"):
        assert count in compare_runs.EXACT_COLUMNS


@pytest.mark.parametrize("a, b, expected", [
    ("1.5e-06", "1.5e-06", 0), ("", "", 0), ("nan", "NaN", 0), ("", "nan", 0), ("inf", "inf", 0), ("0", "0.0", 0),
    ("1", "1.000001", 1e-6), ("-2", "-2.000000002", 1e-9),
    ("nan", "1", float("inf")), ("inf", "-inf", float("inf")), ("inf", "1e308", float("inf")), ("x", "1", float("inf")),
])
def test_relative_difference(a, b, expected):
    assert float(compare_runs.relative_difference(a, b)) == pytest.approx(expected, rel=1e-6)


def test_rel_identical_tables_pass(tmp_path, capsys):
    rc, out = _rel(tmp_path, capsys, RUN)
    assert rc == 0
    for name in TABLES:
        assert _line(out, name).startswith("identical")
    assert "4 identical, 0 within rel 1e-09, 0 differ (not checked numerically), 0 DIFFERENT or missing" in out


@pytest.mark.parametrize("name, column", [("results/tidy/scales.csv", "mse"),
                                          ("results/tidy/policies.csv", "floor_rel_mse"),
                                          ("results/tidy/conformance.csv", "max_rel_diff")])
def test_rel_float_moved_by_1e_12_passes_within_1e_9(tmp_path, capsys, name, column):
    moved = _table(TABLES[name], edit=_set(column, 1, lambda old: repr(float(old) * (1 + 1e-12))))
    rc, out = _rel(tmp_path, capsys, {**RUN, name: moved})
    assert rc == 0, out
    line = _line(out, name)
    assert line.startswith("within") and f"{column} 1e-12 at row 2" in line


@pytest.mark.parametrize("name, column", [("results/tidy/scales.csv", "mse"),
                                          ("results/tidy/policies.csv", "floor_mse"),
                                          ("results/tidy/conformance.csv", "max_abs_diff")])
def test_rel_float_moved_by_1e_6_fails_naming_column_and_row(tmp_path, capsys, name, column):
    moved = _table(TABLES[name], edit=_set(column, 2, lambda old: repr(float(old) * (1 + 1e-6))))
    rc, out = _rel(tmp_path, capsys, {**RUN, name: moved})
    assert rc == 1
    line = _line(out, name)
    assert line.startswith("DIFFERENT") and f"row 3 column {column}:" in line and "1e-06 > 1e-09" in line


@pytest.mark.parametrize("name, column", [("results/tidy/scales.csv", "underflow"),
                                          ("results/tidy/scales.csv", "terms_sink"),
                                          ("results/tidy/policies.csv", "saturated"),
                                          ("results/tidy/conformance.csv", "mismatched_rows")])
def test_rel_count_changed_by_one_fails(tmp_path, capsys, name, column):
    changed = _table(TABLES[name], edit=_set(column, 0, lambda old: str(int(old) + 1)))
    rc, out = _rel(tmp_path, capsys, {**RUN, name: changed})
    assert rc == 1
    assert _line(out, name).startswith(f"DIFFERENT {name}") and f"row 1 column {column}:" in out


@pytest.mark.parametrize("name, column, value", [("results/tidy/scales.csv", "order", "reverse"),
                                                 ("results/tidy/scales.csv", "seed", "7"),
                                                 ("results/tidy/policies.csv", "policy", "fa2"),
                                                 ("results/tidy/conformance.csv", "kernel_backend", "triton")])
def test_rel_key_column_changed_fails(tmp_path, capsys, name, column, value):
    rc, out = _rel(tmp_path, capsys, {**RUN, name: _table(TABLES[name], edit=_set(column, 1, value))})
    assert rc == 1 and f"row 2 column {column}:" in _line(out, name)


@pytest.mark.parametrize("name, column", [("results/tidy/scales.csv", "underflow_frac"),
                                          ("results/tidy/policies.csv", "saturated_frac")])
def test_rel_count_fraction_is_compared_as_text(tmp_path, capsys, name, column):
    moved = _table(TABLES[name], edit=_set(column, 0, lambda old: repr(float(old) * (1 + 1e-12))))
    rc, out = _rel(tmp_path, capsys, {**RUN, name: moved})
    assert rc == 1 and f"row 1 column {column}:" in out and "compared as text" in out


def test_rel_nan_vs_nan_passes_and_nan_vs_number_fails(tmp_path, capsys):
    name, cols = "results/tidy/scales.csv", TIDY_COLUMNS
    before = {**RUN, name: _table(cols, edit=_set("rel_mse", 0, ""))}  # pandas writes NaN as an empty cell
    rc, out = _rel(tmp_path / "nan", capsys, {**RUN, name: _table(cols, edit=_set("rel_mse", 0, "nan"))},
                   before=before)
    assert rc == 0 and _line(out, name).startswith("within")
    rc, out = _rel(tmp_path / "number", capsys, RUN, before=before)
    assert rc == 1 and "row 1 column rel_mse: ''" in out


def test_rel_row_count_differs_fails(tmp_path, capsys):
    name = "results/tidy/policies.csv"
    rc, out = _rel(tmp_path, capsys, {**RUN, name: _table(POLICY_TIDY_COLUMNS, rows=4)})
    assert rc == 1 and _line(out, name).endswith("3 rows before, 4 after")


@pytest.mark.parametrize("header", ["renamed", "reordered"])
def test_rel_header_differs_fails(tmp_path, capsys, header):
    name, cols = "results/tidy/scales.csv", list(TIDY_COLUMNS)
    if header == "renamed":
        cols[cols.index("mse")] = "mse_fp64"
    else:
        cols[0], cols[1] = cols[1], cols[0]
    rc, out = _rel(tmp_path, capsys, {**RUN, name: _table(TIDY_COLUMNS, header=cols)})
    assert rc == 1
    line = _line(out, name)
    assert line.startswith("DIFFERENT") and ("['mse_fp64']" in line if header == "renamed" else "another order" in line)


def test_rel_other_files_differ_without_failing_unless_strict(tmp_path, capsys):
    after = {**RUN, "figures/claims.md": "# verdict, last digit moved\n"}
    rc, out = _rel(tmp_path / "lenient", capsys, after)
    assert rc == 0 and _line(out, "figures/claims.md").startswith("differs") and "not checked numerically" in out
    rc, out = _rel(tmp_path / "strict", capsys, after, "--strict-others")
    assert rc == 1 and _line(out, "figures/claims.md").startswith("DIFFERENT")


@pytest.mark.parametrize("missing", ["results/tidy/conformance.csv", "figures/claims.md"])
def test_rel_missing_file_fails(tmp_path, capsys, missing):
    rc, out = _rel(tmp_path, capsys, {k: v for k, v in RUN.items() if k != missing})
    assert rc == 1 and _line(out, missing).startswith("missing")


def test_rel_without_tidy_tables_fails(tmp_path, capsys):
    only = {"figures/claims.md": "# verdict\n"}
    rc, out = _rel(tmp_path, capsys, only, before=only)
    assert rc == 1 and "no tidy table in either run" in out


@pytest.mark.parametrize("argv", [["--rel", "-1"], ["--rel", "nan"], ["--strict-others"]])
def test_rel_bad_arguments_are_refused(tmp_path, argv):
    with pytest.raises(SystemExit):
        compare_runs.main(["--before-dir", str(tmp_path), "--after-dir", str(tmp_path), *argv])


def test_rel_moved_lists_every_differing_cell(tmp_path, capsys):
    def edit(table):
        table[0]["underflow"] = "202"
        table[2]["mse"] = "1"
    changed = _table(TABLES["results/tidy/scales.csv"], edit=edit)
    rc, out = _rel(tmp_path, capsys, {**RUN, "results/tidy/scales.csv": changed}, "--moved")
    assert rc == 1
    assert "          row 1 column underflow: 201 -> 202" in out
    assert "          row 3 column mse: 4.428277929e-06 -> 1 (relative difference" in out


def test_moved_needs_rel(tmp_path):
    with pytest.raises(SystemExit):
        compare_runs.main(["--before-dir", str(tmp_path), "--after-dir", str(tmp_path), "--moved"])
