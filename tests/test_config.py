"""The pipeline's configuration: presets, grids, shards, and bad values stopping the run early.

The bad-config cases run the real workflow (``snakemake --cores 1``, not a dry run, so a check
that failed to fire would start writing files) in a temporary copy of the repository, with the
bad value supplied through ``--configfile`` (or ``--config``). Each must fail before any job,
print a message that names the key and what is allowed, and leave no ``results/`` behind.
Snakemake prints its errors on stdout, so stdout and stderr are searched together.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kernels import contract
from kernels.pipeline import config as pconfig
from kernels.pipeline.tables import format_value

from repo_copy import copy_repo

REPO = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())

pytestmark = pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake not installed")


# ---------------------------------------------------------------------------------------------
# helpers


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory) -> Path:
    return copy_repo(tmp_path_factory.mktemp("repo"))


def merged(preset: str = "default", overrides: dict | None = None) -> dict:
    cfg = copy.deepcopy(CONFIG)
    cfg["preset"] = preset
    return pconfig.resolve_preset(cfg, overrides)


# ---------------------------------------------------------------------------------------------
# presets, grids, shards (no Snakemake)


def test_every_preset_passes_the_checks():
    for name in CONFIG["presets"]:
        pconfig.check_config(merged(name))


def test_presets_merge_over_experiments_and_the_command_line_beats_the_preset():
    smoke = merged("smoke")
    assert smoke["experiments"]["collapse"]["shapes"] == [{"n": 128, "d": 16, "block_m": 16, "block_n": 16}]
    # untouched keys keep the default preset's values
    assert smoke["experiments"]["collapse"]["scale"] == CONFIG["experiments"]["collapse"]["scale"]
    cli = {"experiments": {"collapse": {"seeds": 3}}}
    assert merged("smoke", cli)["experiments"]["collapse"]["seeds"] == 3
    assert merged("default") ["experiments"] == CONFIG["experiments"]


def test_issue_requirements_on_the_default_grids():
    e = merged("default")["experiments"]
    c = e["collapse"]
    deltas = pconfig.delta_values(c["delta"])
    assert deltas[0] == 0 and deltas[-1] == 16 and max(b - a for a, b in zip(deltas, deltas[1:])) <= 0.5
    assert c["ksink"] == [4] and set(c["order"]) == {"forward", "reverse"} and set(c["scale"]) == {1, 256}
    assert c["seeds"] >= 16 and set(c["sink_v_scale"]) == {0, 0.25, 1}
    s = e["scales"]
    assert set(s["scale"]) >= {2**i for i in range(10)} | {448, 100, 300, 384}
    assert set(pconfig.delta_values(s["delta"])) == {4, 8, 12} and set(s["order"]) == {"forward", "reverse"}
    t = e["threshold"]
    assert t["ksink"] == [1, 2, 4, 8, 16] and t["scale"] == [1, 16, 256] and t["order"] == ["forward"]
    td = pconfig.delta_values(t["delta"])
    assert max(b - a for a, b in zip(td, td[1:])) <= 0.25
    k = e["conformance"]
    assert set(k["causal"]) == {False, True} and len(k["order"]) * len(k["scale"]) == 4
    p = merged("paper")["experiments"]
    for name in contract.SWEEP_EXPERIMENTS:
        assert all(sh["n"] >= 4096 and sh["d"] == 128 for sh in p[name]["shapes"])
        assert p[name]["seeds"] > e[name]["seeds"]


def test_delta_range_is_inclusive_and_clean():
    assert pconfig.delta_values({"start": 0, "stop": 1, "step": 0.1}) == [round(0.1 * i, 10) for i in range(11)]
    assert pconfig.delta_values({"start": 0, "stop": 16, "step": 0.5})[-1] == 16.0
    assert pconfig.delta_values({"start": 2, "stop": 3, "step": 5}) == [2.0]
    assert pconfig.delta_values([4, 8.5]) == [4.0, 8.5]


def test_shards_cover_every_seed_once_and_specs_are_canonical():
    exp = merged("default")["experiments"]["collapse"]
    groups = pconfig.shard_seeds(exp)
    assert sorted(s for g in groups for s in g) == list(range(exp["seeds"]))
    a = pconfig.spec_json(pconfig.shard_spec("collapse", exp, 0))
    assert a == pconfig.spec_json(pconfig.shard_spec("collapse", copy.deepcopy(exp), 0))
    with pytest.raises(pconfig.ConfigError):
        pconfig.shard_spec("collapse", exp, len(groups))


def test_grid_changes_touch_only_the_shard_specs_they_should():
    exp = merged("default")["experiments"]["collapse"]
    more = copy.deepcopy(exp)
    more["delta"] = {"start": 0, "stop": 16, "step": 0.25}
    assert pconfig.shard_spec("collapse", exp, 0) != pconfig.shard_spec("collapse", more, 0)
    assert pconfig.inputs_spec("collapse", exp, 0) == pconfig.inputs_spec("collapse", more, 0)  # no new inputs
    seeds = copy.deepcopy(exp)
    seeds["seeds"] = exp["seeds"] + exp["seeds_per_shard"]  # one more shard, the others unchanged
    for i in range(pconfig.n_shards(exp)):
        assert pconfig.shard_spec("collapse", exp, i)["seeds"] == pconfig.shard_spec("collapse", seeds, i)["seeds"]


def test_expected_rows_matches_the_grid():
    e = merged("default")["experiments"]
    c = e["collapse"]
    assert pconfig.expected_rows("collapse", c) == c["seeds"] * 33 * 3 * 4
    k = e["conformance"]
    assert pconfig.expected_rows("conformance", k) == k["seeds"] * len(k["shapes"]) * 2 * 4


def test_format_value_is_fixed():
    assert [format_value(x) for x in (True, 3, 0.5, 256.0, 1 / 3, float("nan"))] == [
        "True", "3", "0.5", "256", "0.3333333333", "nan"]
    assert contract.combo_label("forward", 256.0) == "forward S=256"


# ---------------------------------------------------------------------------------------------
# bad values stop the run before any job

BAD = {
    # id: (config overrides, extra CLI args, strings the message must contain)
    "scale_zero": ({"experiments": {"collapse": {"scale": [0, 256]}}}, [], ["experiments.collapse.scale", "> 0"]),
    "scale_negative": ({"experiments": {"scales": {"scale": [1, -256]}}}, [], ["experiments.scales.scale", "> 0"]),
    "unknown_order": ({"experiments": {"collapse": {"order": ["forward", "sideways"]}}}, [],
                      ["experiments.collapse.order[1]", "forward or reverse"]),
    "unknown_fmt": ({"experiments": {"scales": {"fmt": "e4m3"}}}, [], ["experiments.scales.fmt", "e4m3fn, e5m2"]),
    "unknown_backend": ({"experiments": {"threshold": {"backend": "cuda"}}}, [],
                        ["experiments.threshold.backend", "auto, triton, emulator, reference"]),
    "ksink_ge_n": ({"experiments": {"collapse": {"ksink": [1024]}}}, [], ["experiments.collapse.ksink", "ksink < n"]),
    "ksink_gt_block_n": ({"experiments": {"threshold": {"ksink": [1, 65]}}}, [],
                         ["experiments.threshold.ksink", "ksink <= block_n"]),
    "empty_grid": ({"experiments": {"collapse": {"sink_v_scale": []}}}, [],
                   ["experiments.collapse.sink_v_scale", "non-empty"]),
    "empty_delta": ({"experiments": {"threshold": {"delta": []}}}, [], ["experiments.threshold.delta", "non-empty"]),
    "delta_not_a_number": ({"experiments": {"collapse": {"delta": [0, "eight"]}}}, [],
                           ["experiments.collapse.delta", "numbers"]),
    "delta_nan": ({"experiments": {"collapse": {"delta": [0.0, float("nan")]}}}, [],
                  ["experiments.collapse.delta", "finite"]),
    "delta_step_zero": ({"experiments": {"threshold": {"delta": {"start": 0, "stop": 4, "step": 0}}}}, [],
                        ["experiments.threshold.delta", "step > 0"]),
    "delta_stop_before_start": ({"experiments": {"threshold": {"delta": {"start": 4, "stop": 0, "step": 1}}}}, [],
                                ["experiments.threshold.delta", "start <= stop"]),
    "d_not_power_of_two": ({"experiments": {"collapse": {"shapes": [{"n": 1024, "d": 48, "block_m": 64,
                                                                     "block_n": 64}]}}}, [],
                           ["experiments.collapse.shapes[0].d", "power of two"]),
    "block_not_power_of_two": ({"experiments": {"scales": {"shapes": [{"n": 512, "d": 64, "block_m": 64,
                                                                       "block_n": 48}]}}}, [],
                               ["experiments.scales.shapes[0].block_n", "power of two"]),
    "seeds_zero": ({"experiments": {"scales": {"seeds": 0}}}, [], ["experiments.scales.seeds", ">= 1"]),
    "seeds_per_shard_zero": ({"experiments": {"collapse": {"seeds_per_shard": 0}}}, [],
                             ["experiments.collapse.seeds_per_shard", ">= 1"]),
    "duplicate_scale": ({"experiments": {"collapse": {"scale": [256, 256]}}}, [],
                        ["experiments.collapse.scale", "distinct"]),
    "causal_not_bool": ({"experiments": {"conformance": {"causal": ["maybe"]}}}, [],
                        ["experiments.conformance.causal[0]", "true or false"]),
    "unknown_top_level_key": ({"colapse": {"seeds": 4}}, [], ["colapse", "allowed keys"]),
    "unknown_experiment_key": ({"experiments": {"collapse": {"detla": [1.0]}}}, [],
                               ["experiments.collapse.detla", "allowed keys"]),
    "unknown_experiment": ({"experiments": {"colapse": {"seeds": 4}}}, [], ["experiments.colapse", "allowed keys"]),
    "unknown_preset": ({}, ["--config", "preset=huge"], ["preset", "default, paper, smoke"]),
    "preset_not_a_string": ({"preset": 3}, [], ["preset", "one of the keys of 'presets'"]),
    "missing_experiment": (None, [], ["experiments.threshold", "missing", "collapse, scales, threshold, conformance"]),
    # the policies experiment (kernels.pipeline.policy_config, kernels.policies.policies_from_config)
    "unknown_policy": ({"experiments": {"policies": {"policies": ["fa3", "fa5"]}}}, [],
                       ["experiments.policies.policies[1]", "'fa5'", "fa4-s256"]),
    "bad_user_policy_field": ({"policies": {"fa4-s256": {"rescale_threshold": -1}}}, [],
                              ["policies.fa4-s256.rescale_threshold", ">= 0"]),
    "unknown_variant": ({"experiments": {"policies": {"variants": {"fp8_all": {}}}}}, [],
                        ["experiments.policies.variants", "p_only or deployed"]),
    "unknown_sink_kind": ({"experiments": {"policies": {"sink_kinds": ["keys", "logits"]}}}, [],
                          ["experiments.policies.sink_kinds[1]", "keys or logit"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_config_stops_before_any_job(case, repo_copy, tmp_path):
    overrides, extra, needles = BAD[case]
    args = ["snakemake", "--cores", "1"]
    cfg = tmp_path / "bad.yaml"
    if overrides is None:  # a whole config without the threshold section
        full = copy.deepcopy(CONFIG)
        del full["experiments"]["threshold"]
        cfg.write_text(yaml.safe_dump(full))
        args += ["--configfile", str(cfg), "--replace-workflow-config"]
    elif overrides:
        cfg.write_text(yaml.safe_dump(overrides))
        args += ["--configfile", str(cfg)]
    args += extra
    res = subprocess.run(args, cwd=repo_copy, capture_output=True, text=True, timeout=300)
    text = res.stdout + res.stderr
    assert res.returncode != 0, text
    assert "Invalid configuration" in text, text
    line = next(ln for ln in text.splitlines() if "Invalid configuration" in ln)
    for needle in needles:
        assert needle in line, f"{needle!r} not in: {line}"
    assert not (repo_copy / "results").exists(), "a bad config left results/ behind"
    assert not re.search(r"^rule \w+:", res.stdout, re.M), "a job was scheduled"


def test_default_preset_stores_well_under_1_gb_of_inputs():
    total = 0
    for name, exp in merged("default")["experiments"].items():
        if name == "realmodel":  # q, k, v float32 of every layer: all-MiniLM-L6-v2's 12 heads x 32 dims
            total += exp["layers"] * 3 * 4 * exp["passages"] * exp["tokens"] * 12 * 32
            continue
        nd = {(s["n"], s["d"]) for s in exp["shapes"]}
        sigmas = exp["sigma"] if isinstance(exp["sigma"], list) else [exp["sigma"]]
        per_seed = sum(3 * 4 * n * d for n, d in nd) * len(sigmas) * exp.get("batch", 1) * exp.get("heads", 1)
        total += per_seed * exp["seeds"]
    assert total < 250e6  # measured: 22 MB of sweep inputs + 113 MB of captured real-model tensors
