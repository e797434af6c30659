"""The dynamic experiment (beyond the paper): config checks, the shard job against the loop oracle, the summary and
its finding on constructed data, F14, and, on the session's smoke run, its outputs and that it moves no claim.

* bad values of ``experiments.dynamic`` raise a ConfigError naming the key;
* a tiny shard's rows: columns, row count, and per row the underflow and term counts of the float64 loop oracle
  (``tests/support/loop_contract.py``, not the package's code) on the same tensors;
* the summary's ratio over reverse S=256 is the known per-seed ratio of constructed data, its theory is
  ``pcast.theory``'s, and the finding's words follow its numbers;
* the smoke run holds the tidy table, the statistics, F14 and claims.json's ``findings``; a copy of it run again
  with another dynamic experiment gives the same tidy tables of every claim and the same verdicts.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

import synthetic_tables as data
from loop_contract import loop_attention
from pcast import theory
from pcast.analysis.dynamic import dynamic_finding, dynamic_summary
from pcast.contract import DYNAMIC_EXPERIMENT, DYNAMIC_TIDY_COLUMNS
from pcast.models.sinks import value_stack
from pcast.pipeline import inputs, provenance
from pcast.pipeline.config import ConfigError, expected_rows, inputs_spec, shard_spec
from pcast.pipeline.dynamic_config import casts
from pcast.pipeline.dynamic_runs import run_dynamic_shard
from pcast.pipeline.validation import load_config
from pcast.theory.dynamic import underflow_fraction_dynamic

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py
D = DYNAMIC_EXPERIMENT


@pytest.fixture(scope="module")
def cfg():
    return yaml.safe_load((data.ROOT / "config.yaml").read_text())


def _load(cfg, **dynamic):
    c = copy.deepcopy(cfg)
    c["experiments"][D].update(dynamic)
    return load_config(c, {}, data.ROOT / "workflow" / "schemas")


@pytest.mark.parametrize("override, key, allowed", [
    ({"scale_modes": ["row_block_max", "per_row"]}, "experiments.dynamic.scale_modes", "row_block_max is per_row"),
    ({"scale_modes": ["row_max"]}, "experiments.dynamic.scale_modes", "tile_max"),
    ({"ksink": 80}, "experiments.dynamic.ksink", "ksink <= block_n"),
    ({"scale": [], "scale_modes": []}, "experiments.dynamic", "no P cast is listed"),
    ({"shapes": [{"n": 512, "d": 24, "block_m": 64, "block_n": 64}]}, "experiments.dynamic.shapes[0].d",
     "a power of two"),
])
def test_bad_dynamic_config_names_the_key(cfg, override, key, allowed):
    with pytest.raises(ConfigError) as e:
        _load(cfg, **override)
    msg = str(e.value)
    assert key in msg and allowed in msg and "\n" not in msg


def test_every_preset_runs_the_four_casts_in_both_orders(cfg):
    for preset in ("default", "smoke", "paper"):
        exp = _load({**cfg, "preset": preset})["experiments"][D]
        got = [(c["cast"], c["scale_mode"], c["scale"]) for c in casts(exp)]
        assert got == [("S=1", "multiply", 1.0), ("S=256", "multiply", 256.0), ("tile_max", "tile_max", 1.0),
                       ("row_block_max", "per_row", 1.0)], preset
        assert exp["order"] == ["forward", "reverse"] and exp["backend"] == "emulator"
    smoke = _load({**cfg, "preset": "smoke"})["experiments"][D]
    assert expected_rows(D, smoke) == 2 * 5 * 2 * 4  # seeds x Δ x orders x casts: kept small for CI


TINY = {"seeds": 1, "seeds_per_shard": 1, "batch": 1, "heads": 1, "shapes": [{"n": 64, "d": 16, "block_m": 16,
        "block_n": 16}], "causal": [False], "ksink": 4, "sigma": [1.0], "sink_v_scale": [1.0], "delta": [0.0, 16.0],
        "order": ["forward", "reverse"], "fmt": "e4m3fn", "scale": [1, 256], "scale_modes": ["tile_max", "row_block_max"],
        "backend": "emulator", "max_batch_items": 8}


def test_tiny_shard_counts_are_the_loop_oracles(tmp_path):
    spec = shard_spec(D, TINY, 0)
    inputs.write_inputs(inputs_spec(D, TINY, 0), tmp_path / "in.safetensors")
    run_dynamic_shard(spec, tmp_path / "in.safetensors", tmp_path / "rows.csv", tmp_path / "t.csv")
    df = pd.read_csv(tmp_path / "rows.csv")
    assert list(df.columns) == list(DYNAMIC_TIDY_COLUMNS) and len(df) == expected_rows(D, TINY) == 2 * 2 * 4
    assert (df.experiment == D).all() and (df.groups == 0).all()
    base = inputs.base_tensors(inputs.load_inputs(tmp_path / "in.safetensors", spec), 0, 64, 16, 1.0)
    for delta in (0.0, 16.0):
        q, k, (v,) = value_stack(base, 4, [delta], [1.0], "cpu")
        for c in casts(TINY):
            for order in ("forward", "reverse"):
                _, diag = loop_attention(q, k, v, order=order, scale=c["scale"], scale_mode=c["scale_mode"],
                                         ksink=4, block_n=16, block_m=16)
                row = df[(df.cast == c["cast"]) & (df.order == order) & (df.delta == delta)].iloc[0]
                assert row.underflow == int(diag["underflow"].sum()), (c["cast"], order, delta)
                assert row.terms == int(diag["terms"].sum()) == 64 * 60
    # the dynamic scales lose only the sink block's keys at Δ = 16; forward static S loses nearly all
    strong = df[df.delta == 16].set_index(["cast", "order"])["underflow_frac"]
    assert strong[("S=1", "forward")] > 0.9 and (strong.loc[["tile_max", "row_block_max"]] <= 12 / 60).all()


def _tidy(ratio: float, seeds: int = 6) -> pd.DataFrame:
    """Constructed tidy rows: every cast's MSE is reverse S=256's times a known factor (the dynamic ones: ``ratio``)."""
    rng = np.random.default_rng(0)
    rows = []
    factor = {"S=1": 3.0, "S=256": 1.0, "tile_max": ratio, "row_block_max": ratio}
    mode = {"S=1": ("multiply", 1.0), "S=256": ("multiply", 256.0), "tile_max": ("tile_max", 1.0),
            "row_block_max": ("per_row", 1.0)}
    for seed in range(seeds):
        base = float(np.exp(rng.normal(-10, 0.5)))
        for cast, f in factor.items():
            for order in ("forward", "reverse"):
                for delta in (0.0, 8.0, 16.0):
                    m = base * (1 + delta) * f
                    rows.append({"experiment": D, "seed": seed, "n": 512, "d": 64, "block_m": 64, "block_n": 64,
                                 "causal": False, "ksink": 4, "sigma": 1.0, "sink_v_scale": 1.0, "fmt": "e4m3fn",
                                 "scale_mode": mode[cast][0], "scale": mode[cast][1], "order": order, "delta": delta,
                                 "cast": cast, "backend": "emulator", "mse": m, "rel_mse": m,
                                 "underflow_frac": 0.1, "saturated_frac": 0.0})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("ratio, words", [(0.5, "beats reverse S=256's MSE beyond the CI somewhere"),
                                          (2.0, "every one lies above it")])
def test_summary_ratios_theory_and_finding_follow_the_data(ratio, words):
    s = dynamic_summary(_tidy(ratio), n_resamples=300)
    tm = s[(s.cast == "tile_max") & (s.order == "reverse")]
    assert np.allclose(tm.ref_ratio, ratio) and np.allclose(tm.ref_ratio_lo, ratio)
    assert np.allclose(s[s.cast == "S=1"].ref_ratio, 3.0)
    fwd1 = s[(s.cast == "S=1") & (s.order == "forward")].sort_values("delta")
    want = theory.underflow_fraction(np.array([0.0, 8.0, 16.0]), 1.0, k=4, order="forward", n=512, block_n=64,
                                     method="exact")
    assert np.allclose(fwd1.pred_underflow, want)
    dyn = s[(s.cast == "row_block_max") & (s.order == "forward")].sort_values("delta")
    assert np.allclose(dyn.pred_underflow, underflow_fraction_dynamic(np.array([0.0, 8.0, 16.0]), "per_row",
                                                                      "forward", n=512, block_n=64, method="exact"))
    f = dynamic_finding(s)
    assert words in f["finding"] and f["numbers"]["delta"] == 16.0
    assert f["numbers"]["ratio[reverse tile_max]"] == pytest.approx(ratio)
    assert f["numbers"]["sink_block_share"] == pytest.approx(60 / 508) and f["evidence"] == ["fig_dynamic"]


# ---------------------------------------------------------------------------------------------
# the session's smoke run


@pytest.mark.smoke_reader
def test_smoke_run_has_the_dynamic_table_figure_and_finding(smoke_run):
    cfg = yaml.safe_load((smoke_run / "config.yaml").read_text())
    exp = load_config({**cfg, "preset": "smoke"}, {}, smoke_run / "workflow" / "schemas")["experiments"][D]
    tidy = pd.read_csv(smoke_run / "results" / "tidy" / "dynamic.csv")
    assert len(tidy) == expected_rows(D, exp) and set(tidy["cast"]) == {"S=1", "S=256", "tile_max", "row_block_max"}
    stats = pd.read_csv(smoke_run / "results" / "stats" / "dynamic.csv")
    assert {"ref_ratio", "pred_underflow", "underflow_frac_mean"} <= set(stats.columns)
    for ext in ("pdf", "png", "csv"):
        assert (smoke_run / "figures" / f"fig_dynamic.{ext}").stat().st_size > 1000
    doc = json.loads((smoke_run / "figures" / "claims.json").read_text())
    assert D not in doc["claims"]
    nums = doc["findings"][D]["numbers"]
    share = nums["sink_block_share"]  # (16 - 4) / (128 - 4) at the smoke shape
    for tag in ("forward tile_max", "reverse tile_max", "forward row_block_max", "reverse row_block_max"):
        assert nums[f"lost[{tag}]"] <= share + 1e-9 and abs(nums[f"lost[{tag}]"] - nums[f"theory[{tag}]"]) < 0.01
    assert nums["lost[forward S=1]"] > 0.9
    md = (smoke_run / "figures" / "claims.md").read_text()
    assert "## Findings beyond the paper" in md and md.index("## Findings beyond the paper") > md.index("## C6: ")


def test_the_dynamic_experiment_moves_no_claim(smoke_run, tmp_path):
    """A copy of the smoke run, run again with another dynamic experiment (one mode, other Δ): the dynamic chain
    and the claims job rerun, every claim's tidy table keeps its bytes, the verdicts and their numbers stay, and
    only the finding moves."""
    repo = tmp_path / "repo"
    shutil.copytree(smoke_run, repo, symlinks=True)
    claim_tidy = [f"results/tidy/{x}.csv" for x in ("collapse", "scales", "threshold", "conformance", "policies",
                                                    "fp4", "decode")]
    before = {p: (repo / p).read_bytes() for p in claim_tidy}
    old = json.loads((repo / "figures" / "claims.json").read_text())
    override = tmp_path / "dynamic.yaml"
    override.write_text(yaml.safe_dump({"experiments": {D: {"scale_modes": ["tile_max"], "delta": [0.0, 8.0, 12.0]}}}))
    proc = subprocess.run(["snakemake", "--cores", "1", "--config", "preset=smoke", "--configfile", str(override),
                           "--", "claims", "fig_dynamic"], cwd=repo, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": provenance.import_path(repo, tmp_path / "path")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    assert "stats_dynamic" in log and "claims" in log
    for rule in ("stats_collapse", "stats_paired", "stats_scales", "stats_threshold", "stats_policies", "stats_fp4"):
        assert f"rule {rule}:" not in log and f"localrule {rule}:" not in log, rule
    assert {p: (repo / p).read_bytes() for p in claim_tidy} == before
    new = json.loads((repo / "figures" / "claims.json").read_text())
    assert new["claims"] == old["claims"]  # every verdict, number, table and word
    assert new["findings"][D]["numbers"]["delta"] == 12.0 != old["findings"][D]["numbers"]["delta"]
    assert "forward row_block_max" not in new["findings"][D]["finding"]
