"""The decode experiment: its configuration checks, its shard job against pcast.theory.decode (fixed seeds,
tolerances from the sample size), its statistics and the decode verdict on constructed data, and the smoke
run's decode outputs (byte-identical on a forced rerun)."""

import copy
import math

import numpy as np
import pandas as pd
import pytest
import yaml

import synthetic_tables as data
from pcast.analysis import stats
from pcast.analysis.verdicts.decode import claim_decode
from pcast.contract import DECODE_TIDY_COLUMNS
from pcast.pipeline import provenance
from pcast.pipeline.config import ConfigError, expected_rows, inputs_spec, shard_spec
from pcast.pipeline.decode_config import calls, policy_calls
from pcast.policies import DECODE_PRESETS
from pcast.pipeline.validation import load_config

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def cfg():
    return yaml.safe_load((data.ROOT / "config.yaml").read_text())


def _load(cfg, **decode):
    c = copy.deepcopy(cfg)
    c["experiments"]["decode"].update(decode)
    return load_config(c, {}, data.ROOT / "workflow" / "schemas")


@pytest.mark.parametrize("override, key, allowed", [
    ({"d": 24}, "experiments.decode.d", "a power of two from 16 to 256"),
    ({"ksink": 80}, "experiments.decode.ksink", "ksink <= block_n"),
    ({"num_splits": [1, 4, 4]}, "experiments.decode.num_splits", "distinct values"),
    ({"split_layout": ["diagonal"]}, "experiments.decode.split_layout", "contiguous"),
    ({"policies": ["fa3"]}, "experiments.decode.policies", "fa3-decode, xqa-sm90"),
    ({"partition": {"keys": [256], "scale": [1], "rows": 0}}, "experiments.decode.partition", "rows"),
])
def test_bad_decode_config_names_the_key(cfg, override, key, allowed):
    with pytest.raises(ConfigError) as e:
        _load(cfg, **override)
    msg = str(e.value)
    assert key in msg and allowed in msg and "\n" not in msg


def test_calls_run_one_layout_for_one_split_and_partition_in_forward_order(cfg):
    grid = cfg["experiments"]["decode"]
    got = calls(grid)
    assert len(got) == len({tuple(sorted(c.items())) for c in got}) == 30
    assert [p["policy"] for p in policy_calls(grid)] == list(DECODE_PRESETS), \
        "config.yaml experiments.decode.policies must list every decode preset of pcast.policies.DECODE_PRESETS"
    assert {c["split_layout"] for c in got if c["num_splits"] == 1} == {"contiguous"}
    assert {c["order"] for c in got if c["p_normalize"] == "partition"} == {"forward"}
    # online: 1 split x 2 orders + 2 x 2 layouts x 2 orders; partition: 1 + 2 x 2 layouts; times 2 scales
    assert sum(c["p_normalize"] == "online" for c in got) == 2 * (2 + 8)


def _tiny(tmp_path, cfg, **over):
    from pcast.pipeline.decode_runs import run_decode_shard
    from pcast.pipeline.inputs import write_inputs

    exp = {**cfg["experiments"]["decode"], "seeds": 1, "seeds_per_shard": 1, "heads": 4, "n": 1024,
           "delta": [0.0, 8.0, 16.0], "num_splits": [1, 4], "backend": "emulator",
           "partition": {"keys": [256], "scale": [1, 256], "rows": 32}, "policies": ["xqa-sm90", "vllm-triton-decode"],
           **over}
    write_inputs(inputs_spec("decode", exp, 0), tmp_path / "in.safetensors")
    out = tmp_path / "rows.csv"
    run_decode_shard(shard_spec("decode", exp, 0), tmp_path / "in.safetensors", out, tmp_path / "t.csv")
    return exp, out


def test_shard_rows_match_the_theory_and_the_expected_count(tmp_path, cfg):
    """4 decode rows of 1020 non-sink keys at Δ = 16: the mean measured fraction of each online configuration
    within 4 standard errors (binomial, over 4 x 1020 keys) plus 0.01 (the leading-order model's neglected
    underflow) of pcast.theory.decode; the partition rows' relative RMS error within 10% of its closed form."""
    from pcast.analysis.decode import predicted_fraction
    from pcast.theory.decode import partition_rms_error

    exp, out = _tiny(tmp_path, cfg)
    df = pd.read_csv(out)
    assert list(df.columns) == list(DECODE_TIDY_COLUMNS) and len(df) == expected_rows("decode", exp)
    at = df[(df["kind"] != "partition") & (df["delta"] == 16.0) & (df["p_normalize"] == "online")]
    assert set(at["policy"]) == {"-", "xqa-sm90", "vllm-triton-decode"}
    xqa = at[at["policy"] == "xqa-sm90"].iloc[0]
    assert (xqa["num_splits"], xqa["split_layout"], xqa["block_n"], xqa["scale"]) == (4, "interleaved", 64, 448.0)
    assert set(at.loc[(at["policy"] == "vllm-triton-decode") & (at["kind"] == "logit"), "sink_mode"]) == {"init"}
    for key, g in at.groupby(["kind", "policy", "num_splits", "split_layout", "order", "scale"]):
        want = float(predicted_fraction(g.iloc[0].to_dict(), [16.0])[0])
        se = math.sqrt(max(want * (1 - want), 1e-4) / (len(g) * int(g["terms"].iloc[0])))
        assert abs(g["underflow_frac"].mean() - want) <= 4 * se + 0.01, (key, g["underflow_frac"].mean(), want)
    part = df[df["kind"] == "partition"]
    for _, r in part.iterrows():
        assert abs(r["p_rel_rms"] / partition_rms_error(256, r["scale"]) - 1) < 0.10, r.to_dict()


def test_shard_bytes_are_deterministic(tmp_path, cfg):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    small = {"num_splits": [4], "scale": [1], "partition": None, "heads": 1, "sink_kinds": ["logit"], "policies": []}
    _, a = _tiny(tmp_path / "a", cfg, **small)
    _, b = _tiny(tmp_path / "b", cfg, **small)
    assert a.read_bytes() == b.read_bytes() and len(a.read_bytes()) > 500


def _verdict(tidy, claims):
    stats_cfg, _ = data.config_sections()
    _, crossings, partition = stats.decode(tidy, stats_cfg)
    return claim_decode(crossings, partition, claims["decode"]), crossings, partition


def test_the_verdict_passes_on_theory_shaped_data():
    _, claims = data.config_sections()
    v, crossings, partition = _verdict(data.make_decode(), claims)
    assert v["verdict"] == "PASS", v["details"]
    crossed = crossings[crossings["status_meas"] == "cross"]
    assert len(crossed) >= 2 and np.allclose(crossed["dc_miss"], 0.0, atol=0.05)
    assert (crossings.loc[crossings["num_splits"] == 4, "status_meas"] == "never").all()
    assert np.allclose(partition["rel_diff"], 0.0, atol=0.02)
    assert any("claims.decode.dc_tolerance" in t for t in v["tolerances"])


@pytest.mark.parametrize("shift, rms_off, failing", [(0.8, 0.0, "Δc"), (0.0, 0.15, "relative RMS error")])
def test_the_verdict_fails_past_either_tolerance(shift, rms_off, failing):
    _, claims = data.config_sections()
    v, _, _ = _verdict(data.make_decode(shift=shift, rms_off=rms_off), claims)
    assert v["verdict"] == "FAIL"
    assert any(failing in s["domain"] and s["verdict"] == "FAIL" for s in v["scoped"]), v["scoped"]


def test_the_verdict_fails_when_only_one_side_crosses():
    """A measured curve that never reaches 1/2 where the theory's does is a FAIL, whatever the tolerance."""
    _, claims = data.config_sections()
    tidy = data.make_decode()
    one = (tidy["kind"] == "keys") & (tidy["num_splits"] == 1)
    tidy.loc[one, "underflow_frac"] = tidy.loc[one, "underflow_frac"].clip(upper=0.4)
    v, _, _ = _verdict(tidy, claims)
    assert v["verdict"] == "FAIL" and any("measured never, theory cross" in s["domain"] for s in v["scoped"])


def test_smoke_decode_outputs(smoke_run):
    """The smoke run's decode tidy table, F12, T8 and the decode section."""
    tidy = pd.read_csv(smoke_run / "results" / "tidy" / "decode.csv")
    assert set(tidy["kind"]) == {"keys", "logit", "partition"}
    md = (smoke_run / "figures" / "claims.md").read_text()
    assert "## decode: " in md and "claims.decode.dc_tolerance" in md
    assert "T8." in (smoke_run / "figures" / "table_decode.md").read_text()


def test_smoke_forced_rerun_of_the_decode_rules_is_byte_identical(smoke_run, tmp_path):
    """A copy of the smoke run, the decode shard, statistics, F12, T8 and the verdict forced to run again: the
    same bytes (PDFs without a creation date)."""
    import hashlib
    import os
    import shutil
    import subprocess

    repo = tmp_path / "repo"
    shutil.copytree(smoke_run, repo, symlinks=True)
    outs = ["results/shards/decode/shard000.csv", "results/tidy/decode.csv", "results/stats/decode.csv",
            "results/stats/decode_curves.csv", "results/stats/decode_partition.csv", "figures/claims.md",
            "figures/claims.json"] + [f"figures/fig_decode.{e}" for e in ("pdf", "png", "csv")] + \
        [f"figures/table_decode.{e}" for e in ("csv", "tex", "md")]

    def digest():
        return {p: hashlib.sha256((repo / p).read_bytes()).hexdigest() for p in outs}

    before = digest()
    proc = subprocess.run(["snakemake", "--cores", "1", "--config", "preset=smoke", "--forcerun",
                           "results/shards/decode/shard000.csv", "stats_decode", "fig_decode", "table_decode", "claims",
                           "--", "fig_decode", "table_decode", "claims"], cwd=repo, capture_output=True, text=True,
                          timeout=900, env={**os.environ, "PYTHONPATH": provenance.import_path(repo, tmp_path / "path")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    assert "sweep_shard" in log and "stats_decode" in log and "fig_decode" in log
    assert digest() == before
