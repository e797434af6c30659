"""The kick-the-tires path: the smoke preset gives the verdicts its config says it gives, loads no
model (one cached real-model layer), and that cached input is what tools/make_smoke_tensors.py makes."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import yaml

from pcast.pipeline import config as pconfig

REPO = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())
CACHED = REPO / "workflow" / "resources" / "realmodel-smoke.safetensors"


def test_every_preset_lists_the_verdict_of_every_claim():
    from pcast.analysis import registry

    claims = {c.id for c in registry.CLAIMS}
    for name in ("smoke", "default"):
        expected = CONFIG["presets"][name]["expected_verdicts"]
        assert set(expected) == claims, name
        assert all(e["why"].strip() for e in expected.values())
    smoke, default = (CONFIG["presets"][n]["expected_verdicts"] for n in ("smoke", "default"))
    for claim, e in smoke.items():  # a smoke verdict that differs from the default run's says why
        if e["verdict"] != default[claim]["verdict"]:
            assert "default" in e["why"] and len(e["why"]) > 40, claim


def test_expected_verdicts_override_nothing():
    merged = pconfig.resolve_preset({**CONFIG, "preset": "smoke"})
    assert "expected_verdicts" not in merged and "description" not in merged
    assert merged["experiments"]["realmodel"]["tensors"] == str(CACHED.relative_to(REPO))
    assert merged["experiments"]["realmodel"]["layers"] == 1


@pytest.mark.smoke_reader
def test_the_smoke_run_gives_its_expected_verdicts(smoke_run):
    expected = CONFIG["presets"]["smoke"]["expected_verdicts"]
    got = json.loads((smoke_run / "figures/claims.json").read_text())
    assert got["preset"] == "smoke" and got["expected"] == expected
    assert {k: v["verdict"] for k, v in got["claims"].items()} == {k: v["verdict"] for k, v in expected.items()}
    md = (smoke_run / "figures/claims.md").read_text()
    assert "## Expected verdicts of the `smoke` preset" in md and "This run gives every expected verdict." in md


@pytest.mark.smoke_reader
def test_the_smoke_run_loads_no_model_and_runs_few_jobs(smoke_run):
    meta = json.loads((smoke_run / "results/inputs/realmodel/passages.json").read_text())
    assert "the smoke preset's cached input" in meta["model"] and meta["layers"] == 1
    log = (smoke_run.parent / "snakemake.log").read_text()
    assert "the user's tensors" in log and "realmodel capture:" not in log
    steps = [int(m) for m in re.findall(r"\d+ of (\d+) steps", log)]
    assert steps and max(steps) <= 63  # 62 jobs (the dynamic experiment's five included) and the target rule `all`


def test_the_cached_input_is_recorded_in_the_smoke_configuration():
    from safetensors import safe_open

    with safe_open(str(CACHED), "pt") as fh:
        meta, keys = fh.metadata(), sorted(fh.keys())
        q = fh.get_tensor("layer0/q")
    assert keys == ["layer0/k", "layer0/q", "layer0/v"] and tuple(q.shape) == (2, 12, 128, 32)
    from pcast.models.realmodel import EXPECTED_FILES

    assert meta["model_sha256"] == EXPECTED_FILES["model.safetensors"]


@pytest.mark.slow
def test_make_smoke_tensors_rewrites_the_cached_input_byte_for_byte(tmp_path, monkeypatch):
    import make_smoke_tensors

    before = hashlib.sha256(CACHED.read_bytes()).hexdigest()
    monkeypatch.setattr(make_smoke_tensors, "OUT", tmp_path / "again.safetensors")
    assert make_smoke_tensors.main([]) == 0
    assert hashlib.sha256((tmp_path / "again.safetensors").read_bytes()).hexdigest() == before
