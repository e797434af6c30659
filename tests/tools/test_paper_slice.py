"""tools/paper_slice.py: a slice of a preset measured against the run plan's estimate.
Run here on the smoke preset (tiny shapes); the paper slice itself is a measurement, in the README."""

from __future__ import annotations

import json

import pytest

import paper_slice
from pcast.pipeline import config as pconfig


def test_smoke_slice_reports_estimate_measurement_and_ratio(tmp_path, capsys):
    rc = paper_slice.main(["--preset", "smoke", "--experiments", "scales", "policies", "fp4", "--seeds", "1", "--jobs", "2",
                           "--out", str(tmp_path)])
    assert rc in (0, 1)  # 1 only when a ratio leaves the band; tiny smoke shapes are overhead-bound
    report = json.loads((tmp_path / "paper_slice.json").read_text())
    assert set(report) == {"scales", "policies", "fp4"}
    for name, r in report.items():
        _, exp = paper_slice.slice_config(name, 1, "smoke")
        rows = pconfig.expected_rows(name, exp)
        # a sweep's timing counts one run a row; the policies' counts the V-cast floors' runs too
        assert r["runs"] == rows if name != "policies" else r["runs"] >= rows
        assert r["estimate_s"] > 0 and r["measured_s"] > 0 and r["whole_preset_estimate_s"] >= r["estimate_s"]
        assert r["ratio"] == pytest.approx(r["estimate_s"] / r["measured_s"])
    out = capsys.readouterr().out
    assert "smoke preset slice, 1 seed(s) each" in out and "est/meas" in out
    assert ("within the factor of 1.5" in out) == (rc == 0)


@pytest.mark.parametrize("argv", [["--seeds", "0"], ["--jobs", "0"], ["--experiments", "conformance"]])
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as e:
        paper_slice.main(argv)
    assert e.value.code == 2
    assert "error" in capsys.readouterr().err
