"""tools/plan_check.py: the plan's estimate against a run's measured seconds, experiment by experiment."""

import shutil
from pathlib import Path

import pytest
import yaml

import plan_check  # tools/, on sys.path through tests/conftest.py

from pcast.pipeline import calibration, plan
from pcast.pipeline.config import resolve_preset

ROOT = Path(__file__).resolve().parents[2]


def _cal():
    return {**calibration.machine_key(), "c_q": 1e-8, "c_p": 2e-8, "c_s": 1e-8, "c_v": 1e-8, "c_refa": 3e-8, "c_ref": 2e-8,
            "o_call": 1e-4, "o_p": 2e-4, "o_s": 2e-4, "o_v": 5e-5, "o_refa": 1e-4, "o_ref": 2e-4, "o_proc": 0.03}


def _run_dir(tmp_path, factors: dict) -> Path:
    """A run directory with the repository's config.yaml and one timing file per estimated sweep, whose
    measured seconds are the estimate times ``factors[name]``, split over two shards."""
    shutil.copy(ROOT / "config.yaml", tmp_path / "config.yaml")
    config = {**yaml.safe_load((ROOT / "config.yaml").read_text()), "preset": "smoke"}
    rows = {r["experiment"]: r for r in plan.plan_rows(resolve_preset(config), _cal())}
    (tmp_path / "results" / "timing").mkdir(parents=True)
    for name, f in factors.items():
        est = rows[name]["cpu_s"]
        with open(tmp_path / "results" / "timing" / f"{name}.csv", "w") as fh:
            fh.write("experiment,shard,seeds,runs,backend,wall_s,reference_s,kernel_s\n")
            fh.write(f"{name},0,0,1,emulator,1,{est * f * 0.25!r},{est * f * 0.25!r}\n")
            fh.write(f"{name},1,1,1,emulator,1,0,{est * f * 0.5!r}\n")
    return tmp_path


def test_ratio_is_estimate_over_measured_and_outside_is_flagged(tmp_path, monkeypatch, capsys):
    run = _run_dir(tmp_path, {"collapse": 1.0, "scales": 2.0, "threshold": 0.8})
    rows = {r["experiment"]: r for r in plan_check.compare(run, "smoke", _cal())}
    assert set(rows) == {"collapse", "scales", "threshold"}  # experiments without timings are left out
    assert rows["collapse"]["ratio"] == pytest.approx(1.0, rel=1e-12)
    assert rows["scales"]["ratio"] == pytest.approx(0.5, rel=1e-12)
    assert rows["threshold"]["ratio"] == pytest.approx(1.25, rel=1e-12)
    monkeypatch.setattr(plan, "load_calibration", _cal)
    assert plan_check.main([str(run), "--preset", "smoke"]) == 1  # scales at 0.5x lies outside 1.5x
    out = capsys.readouterr().out
    assert "scales" in out and "OUTSIDE" in out and "2 of 3 within 1.5x" in out
    assert plan_check.main([str(run), "--preset", "smoke", "--within", "2"]) == 0


def test_no_timings_and_bad_factor_are_refused(tmp_path, monkeypatch):
    shutil.copy(ROOT / "config.yaml", tmp_path / "config.yaml")
    monkeypatch.setattr(plan, "load_calibration", _cal)
    assert plan_check.main([str(tmp_path), "--preset", "smoke"]) == 1
    with pytest.raises(SystemExit):
        plan_check.main([str(tmp_path), "--within", "0.5"])
