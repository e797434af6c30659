"""Verdict code reads a sub-case's setting from its structured fields (``Subcase.params``), never back from the
text a reader sees (its name or domain)."""

import ast
from pathlib import Path

import pandas as pd

from pcast.analysis.verdicts.common import Subcase
from pcast.analysis.verdicts.floor import _by_norm
from pcast.analysis.verdicts.threshold import _c4_readings, _crossings

VERDICTS = Path(__file__).resolve().parents[2] / "kernels" / "analysis" / "verdicts"
TEXT = {"name", "domain"}
PARSE = {"split", "rsplit", "partition", "rpartition", "endswith", "startswith", "removeprefix", "removesuffix",
         "index", "find"}


def test_no_verdict_module_parses_a_name_or_domain():
    found = []
    for path in sorted(VERDICTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PARSE
                    and isinstance(node.func.value, ast.Attribute) and node.func.value.attr in TEXT):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and any(
                    isinstance(c, ast.Attribute) and c.attr in TEXT for c in node.comparators):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []


def test_c4_groups_the_knees_by_their_sink_value_norm_not_their_names():
    knees = [Subcase("knee a", "PASS", "", {"sink_v_scale": 0.03}), Subcase("knee b", "FAIL", "", {"sink_v_scale": 1.0}),
             Subcase("knee c", "PASS", "", {"sink_v_scale": 0.03})]
    got = {r.name: r.verdict for r in _c4_readings([], knees)}
    assert got == {"precision loss = the MSE knee, sink_v_scale=0.03": "PASS",
                   "precision loss = the MSE knee, sink_v_scale=1": "FAIL"}
    # without norms: one reading over every knee
    assert [r.name for r in _c4_readings([], [Subcase("knee", "PASS")])] == ["precision loss = the MSE knee"]


def test_c6_groups_its_cells_by_norm_and_names_their_pairs_from_params():
    cells = [Subcase("x", "PASS", "", {"pair": "forward S=1 vs reverse S=256", "sink_v_scale": 0.03}),
             Subcase("y", "FAIL", "", {"pair": "reverse S=1 vs reverse S=256", "sink_v_scale": 0.03})]
    (reading,) = _by_norm(cells)
    assert reading.name == "sink_v_scale=0.03" and reading.verdict != "PASS"
    assert "forward S=1 vs reverse S=256 PASS; reverse S=1 vs reverse S=256 FAIL" in reading.domain


def test_crossings_return_only_their_sub_cases():
    t = pd.DataFrame({"ksink": [4, 4], "scale": [1.0, 256.0], "dc_meas": [float("nan"), 12.5],
                      "dc_pred": [6.9, 12.4], "dc_lo": [float("nan"), 12.3], "dc_hi": [float("nan"), 12.7],
                      "diff": [float("nan"), 0.1]})
    got = _crossings(t, 0.95)
    assert [s.verdict for s in got] == ["INCONCLUSIVE", "PASS"]
