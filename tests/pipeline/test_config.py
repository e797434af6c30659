"""The pipeline's configuration: presets, grids, shards, and bad values stopping the run early.

Every bad-config case runs through :func:`pcast.pipeline.validation.load_config`, the function
``workflow/rules/common.smk`` calls before any job, on the config Snakemake would hand it (the bad
value merged in as ``--configfile`` or ``--config`` would). One case for each way a refusal can
arise (``WORKFLOW_CASES``) also runs the real workflow (``snakemake --cores 1``, not a dry run, so a
check that failed to fire would start writing files) in a temporary copy of the repository: it must
fail before any job, print a message that names the key and what is allowed, and leave no
``results/`` behind. Snakemake prints its errors on stdout, so stdout and stderr are searched together.

The ``statistics:`` and ``claims:`` sections are checked key by key without Snakemake:
:func:`refusal` runs what ``load_config`` in ``workflow/rules/common.smk`` runs on the merged
config (both schemas through ``snakemake.utils.validate``, worded by ``schema_message``, then
``check_config``), and a few of those cases also run the real workflow as above.
"""

from __future__ import annotations

import copy
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from pcast import contract
from pcast.pipeline import config as pconfig
from pcast.pipeline import validation as pvalidation
from pcast.pipeline.tables import format_value

from repo_copy import copy_repo

REPO = Path(__file__).resolve().parents[2]
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


SCHEMAS = [REPO / "workflow" / "schemas" / name for name in ("config.schema.yaml", "claims.schema.yaml")]


def refusal(cfg: dict) -> str | None:
    """What common.smk's load_config says of a merged config: the first schema error, worded as
    there, else check_config's ConfigError; None when the config passes."""
    cfg = copy.deepcopy(cfg)
    for schema in SCHEMAS:
        try:
            validate(cfg, str(schema))
        except WorkflowError as e:
            return pconfig.schema_message(e.__context__, schema.name)
    try:
        pconfig.check_config(cfg)
    except pconfig.ConfigError as e:
        return str(e)
    return None


# ---------------------------------------------------------------------------------------------
# presets, grids, shards (no Snakemake)


@pytest.mark.parametrize("preset", sorted(CONFIG["presets"]))
def test_every_preset_passes_the_schemas_and_the_checks(preset):
    assert sorted(CONFIG["presets"]) == ["default", "paper", "smoke"]
    assert refusal(merged(preset)) is None
    pconfig.check_config(merged(preset))


def test_the_shipped_config_passes_as_written():
    assert CONFIG["preset"] == "default" and refusal(pconfig.resolve_preset(copy.deepcopy(CONFIG))) is None


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
    assert c["seeds"] >= 16 and set(c["sink_v_scale"]) == {0, 0.03, 0.25, 1}  # 0.03: the real model's measured median
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
    assert pconfig.expected_rows("collapse", c) == c["seeds"] * 33 * 4 * 4
    k = e["conformance"]
    grid = k["seeds"] * len(k["shapes"]) * 2 * 4
    assert pconfig.expected_rows("conformance", {**k, "engine": None}) == grid
    spec = pconfig.shard_spec("conformance", k, 0, experiments=e, policies=CONFIG.get("policies"))
    eng = k["engine"]
    keys = sum(c["kind"] == "keys" for c in spec["cases"])
    engine = keys * len(eng["delta"]) * len(eng["sink_v_scale"]) + (len(spec["cases"]) - keys) * len(eng["delta"])
    assert pconfig.expected_rows("conformance", k, experiments=e, policies=CONFIG.get("policies")) == \
        grid + eng["seeds"] * (engine + len(spec["cover"]["cases"]))
    with pytest.raises(pconfig.ConfigError, match="other experiments"):
        pconfig.expected_rows("conformance", k)


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
    # the policies experiment (pcast.pipeline.policy_config, pcast.policies.policies_from_config)
    "unknown_policy": ({"experiments": {"policies": {"policies": ["fa3", "fa5"]}}}, [],
                       ["experiments.policies.policies[1]", "'fa5'", "fa4-s256"]),
    "bad_user_policy_field": ({"policies": {"fa4-s256": {"rescale_threshold": -1}}}, [],
                              ["policies.fa4-s256.rescale_threshold", ">= 0"]),
    "unknown_variant": ({"experiments": {"policies": {"variants": {"fp8_all": {}}}}}, [],
                        ["experiments.policies.variants", "p_only or deployed"]),
    "unknown_sink_kind": ({"experiments": {"policies": {"sink_kinds": ["keys", "logits"]}}}, [],
                          ["experiments.policies.sink_kinds[1]", "keys or logit"]),
    # the statistics and claims sections (every key: test_bad_statistics_or_claims_names_the_key)
    "claims_level_out_of_range": ({"claims": {"C6": {"alpha": 1.5}}}, [], ["config key 'claims.C6.alpha'", "(0, 1)"]),
    "statistics_combination_not_run": ({"statistics": {"baseline": "forward S=7"}}, [],
                                       ["config key 'statistics.baseline'", "experiments.scales", "forward S=448"]),
    "claims_band_out_of_order": ({"claims": {"C5": {"band": [10, 3]}}}, [],
                                 ["config key 'claims.C5.band'", "0 < low < high"]),
    "collapse_grid_shrunk_under_a_claim": ({"experiments": {"collapse": {"scale": [1]}}}, [],
                                           ["config key 'statistics.reference'", "'reverse S=256'",
                                            "allowed: forward S=1, reverse S=1"]),
}


#: The cases that also run the real workflow, one for each way a refusal can arise: the schema on
#: config.yaml as given, the preset merge, the schema after the merge, the claims schema, the checks
#: of check_config, a section missing from a replaced config, and the policies' own checks.
WORKFLOW_CASES = ("unknown_top_level_key", "unknown_preset", "scale_zero", "claims_level_out_of_range",
                  "ksink_ge_n", "missing_experiment", "unknown_policy")


def _snakemake_config(case: str) -> tuple[dict, dict]:
    """The config and the ``--config`` overrides Snakemake hands to common.smk for a BAD case:
    ``--configfile`` merged over config.yaml (lists replaced), ``--config`` on top of both."""
    overrides, extra, _ = BAD[case]
    if overrides is None:  # --replace-workflow-config with a whole config lacking the threshold section
        cfg = copy.deepcopy(CONFIG)
        del cfg["experiments"]["threshold"]
    else:
        cfg = pconfig.deep_merge(copy.deepcopy(CONFIG), overrides)
    cli = {}
    for arg in extra[1:] if extra[:1] == ["--config"] else []:
        key, value = arg.split("=", 1)
        cli[key] = yaml.safe_load(value)
    return pconfig.deep_merge(cfg, cli), cli


def _check_message(text: str, needles) -> None:
    assert "Invalid configuration" in text, text
    line = next(ln for ln in text.splitlines() if "Invalid configuration" in ln)
    for needle in needles:
        assert needle in line, f"{needle!r} not in: {line}"


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_config_is_refused_naming_the_key(case):
    """Every case through what common.smk runs before any job (pcast.pipeline.validation)."""
    cfg, cli = _snakemake_config(case)
    with pytest.raises(pconfig.ConfigError) as err:
        pvalidation.load_config(cfg, cli)
    _check_message(str(err.value), BAD[case][2])


def test_the_good_config_is_not_refused():
    cfg = copy.deepcopy(CONFIG)
    assert pvalidation.load_config(cfg, {})["preset"] == CONFIG["preset"]


@pytest.mark.parametrize("case", WORKFLOW_CASES)
def test_bad_config_stops_the_workflow_before_any_job(case, repo_copy, tmp_path):
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
    _check_message(text, needles)
    assert not (repo_copy / "results").exists(), "a bad config left results/ behind"
    assert not re.search(r"^rule \w+:", res.stdout, re.M), "a job was scheduled"


def test_default_preset_stores_well_under_1_gb_of_inputs():
    total = 0
    for name, exp in merged("default")["experiments"].items():
        if name == "realmodel":  # q, k, v float32 of every layer: all-MiniLM-L6-v2's 12 heads x 32 dims
            total += exp["layers"] * 3 * 4 * exp["passages"] * exp["tokens"] * 12 * 32
            continue
        if name in ("tensorcore", "deployed"):  # inputs made inside its one job (deployed: the captured heads), none stored
            continue
        nd = {(s["n"], s["d"]) for s in exp.get("shapes", [{"n": exp.get("n"), "d": exp.get("d")}])}
        sigmas = exp["sigma"] if isinstance(exp["sigma"], list) else [exp["sigma"]]
        per_seed = sum(3 * 4 * n * d for n, d in nd) * len(sigmas) * exp.get("batch", 1) * exp.get("heads", 1)
        total += per_seed * exp["seeds"]
    assert total < 250e6  # measured: 22 MB of sweep inputs + 113 MB of captured real-model tensors


# ---------------------------------------------------------------------------------------------
# the statistics and claims sections: every key that can be wrong, refused before any job

DELETE = object()
_STEP = re.compile(r"\.?([^.\[\]]+)|\[(\d+)\]")


def put(cfg: dict, path: str, value) -> None:
    """Set (or, with DELETE, remove) ``cfg`` at a config key such as ``claims.C6.pairs[1][0]``."""
    *head, last = [int(i) if i else k for k, i in _STEP.findall(path)]
    node = cfg
    for step in head:
        node = node[step]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value


def case(edits: dict, key: str, *needles: str, preset: str = "default") -> tuple:
    """A bad config: ``edits`` (config key -> value) on the merged ``preset``; the refusal must
    name ``key`` exactly (``config key '<key>'``), say what is allowed, and hold ``needles``."""
    return preset, edits, key, needles


PAIRS = [list(p) for p in CONFIG["statistics"]["pairs"]]
COMBOS4 = "forward S=1, forward S=256, reverse S=1, reverse S=256"
ANALYSIS_BAD = {
    # statistics: ranges and types (claims.schema.yaml)
    "stat_seed_negative": case({"statistics.seed": -1}, "statistics.seed", ">= 0"),
    "stat_seed_not_integer": case({"statistics.seed": 1.5}, "statistics.seed", "integer"),
    "stat_confidence_level_one": case({"statistics.confidence_level": 1.0}, "statistics.confidence_level", "(0, 1)"),
    "stat_confidence_level_zero": case({"statistics.confidence_level": 0}, "statistics.confidence_level", "(0, 1)"),
    "stat_bootstrap_resamples_zero": case({"statistics.bootstrap_resamples": 0}, "statistics.bootstrap_resamples",
                                          ">= 100"),
    "stat_bootstrap_method_unknown": case({"statistics.bootstrap_method": "bca"}, "statistics.bootstrap_method",
                                          "percentile, basic or BCa"),
    "stat_seed_interval_above_one": case({"statistics.seed_interval": 1.5}, "statistics.seed_interval", "(0, 1)"),
    "stat_alpha_zero": case({"statistics.alpha": 0}, "statistics.alpha", "(0, 1)"),
    "stat_alpha_nan": case({"statistics.alpha": float("nan")}, "statistics.alpha", "finite"),
    "stat_tost_margin_zero": case({"statistics.tost_margin": 0}, "statistics.tost_margin", "> 0"),
    "stat_crossing_level_one": case({"statistics.crossing_level": 1}, "statistics.crossing_level", "(0, 1)"),
    "stat_knee_factor_one": case({"statistics.knee_factor": 1.0}, "statistics.knee_factor", "> 1"),
    "stat_table_deltas_not_numbers": case({"statistics.table_deltas": [2, "x"]}, "statistics.table_deltas[1]",
                                          "a number"),
    "stat_table_deltas_empty": case({"statistics.table_deltas": []}, "statistics.table_deltas", "non-empty"),
    # statistics: combinations, against the experiment each is read from
    "stat_baseline_not_a_label": case({"statistics.baseline": "forward 1"}, "statistics.baseline",
                                      "'{order} S={scale:g}'"),
    "stat_baseline_not_run": case({"statistics.baseline": "forward S=7"}, "statistics.baseline",
                                  "experiments.scales", "forward S=512"),
    "stat_baseline_not_run_by_collapse": case({"statistics.baseline": "forward S=448"}, "statistics.baseline",
                                              "experiments.collapse", COMBOS4),
    "stat_baseline_label_not_canonical": case({"statistics.baseline": "forward S=1.0"}, "statistics.baseline",
                                              "'forward S=1.0'", "forward S=1, forward S=2,"),
    "stat_reference_not_run": case({"statistics.reference": "reverse S=448"}, "statistics.reference",
                                   "experiments.collapse", COMBOS4),
    "stat_reference_measures_no_knee": case({"statistics.reference": "forward S=1"}, "statistics.reference",
                                            "knee", "forward S=256, reverse S=1, reverse S=256"),
    "stat_fixes_not_run": case({"statistics.fixes[1]": "reverse S=7"}, "statistics.fixes[1]", "experiments.collapse"),
    "stat_fixes_not_paired": case({"statistics.pairs": [p for p in PAIRS if p != ["forward S=1", "reverse S=1"]]},
                                  "statistics.fixes[1]", "[forward S=1, reverse S=1]", "statistics.pairs"),
    "stat_fixes_empty": case({"statistics.fixes": []}, "statistics.fixes", "non-empty"),
    "stat_pairs_not_run": case({"statistics.pairs[2][1]": "reverse S=2"}, "statistics.pairs[2][1]",
                               "experiments.collapse", COMBOS4),
    "stat_pairs_with_itself": case({"statistics.pairs[5][0]": "reverse S=256"}, "statistics.pairs[5]", "itself"),
    "stat_pairs_repeat": case({"statistics.pairs[4]": ["forward S=1", "forward S=256"]}, "statistics.pairs[4]",
                              "twice", "[0]"),
    "stat_pairs_not_a_pair": case({"statistics.pairs[0]": ["forward S=1"]}, "statistics.pairs[0]", "a pair [a, b]"),
    "stat_table_deltas_off_the_grid": case({"statistics.table_deltas": [0.1, 0.3]}, "statistics.table_deltas",
                                           "experiments.collapse", "0, 0.5, 1,"),
    # claims: ranges and types
    "C2_max_expected_count_negative": case({"claims.C2.max_expected_count": -1}, "claims.C2.max_expected_count",
                                           ">= 0"),
    "C3_scale_zero": case({"claims.C3.scale": 0}, "claims.C3.scale", "> 0"),
    "C3_compare_scale_negative": case({"claims.C3.compare_scale": -448}, "claims.C3.compare_scale", "> 0"),
    "C4_knee_onset_fraction_half": case({"claims.C4.knee_onset_fraction": 0.5}, "claims.C4.knee_onset_fraction",
                                        "(0, 0.5)"),
    "C5_band_end_zero": case({"claims.C5.band": [0, 10]}, "claims.C5.band[0]", "> 0"),
    "C5_band_three_ends": case({"claims.C5.band": [3, 10, 30]}, "claims.C5.band", "0 < low < high"),
    "C5_far_above_zero": case({"claims.C5.far_above": 0}, "claims.C5.far_above", "> 0"),
    "C5_far_above_infinite": case({"claims.C5.far_above": float("inf")}, "claims.C5.far_above", "finite"),
    "C6_alpha_one": case({"claims.C6.alpha": 1}, "claims.C6.alpha", "(0, 1)"),
    "C6_holm_not_bool": case({"claims.C6.holm": "yes"}, "claims.C6.holm", "Holm"),
    "C5_moderate_empty": case({"claims.C5.moderate": []}, "claims.C5.moderate", "non-empty"),
    "C5_moderate_fraction_one": case({"claims.C5.moderate[0][1]": 1.0}, "claims.C5.moderate[0][1]", "(0, 1)"),
    "paper_dp_zero": case({"claims.paper.dp": 0}, "claims.paper.dp", "> 0"),
    "paper_threshold_constant_negative": case({"claims.paper.threshold_constant": -6.93},
                                              "claims.paper.threshold_constant", "> 0"),
    "paper_delta_k_one_number": case({"claims.paper.delta_k": [4]}, "claims.paper.delta_k", "[ksink, δk]"),
    "paper_compare_scale_zero": case({"claims.paper.compare_scale": 0}, "claims.paper.compare_scale", "> 0"),
    "audit_variant_unknown": case({"claims.audit.variant": "both"}, "claims.audit.variant", "p_only or deployed"),
    "audit_saturation_threshold_one": case({"claims.audit.saturation_threshold": 1},
                                           "claims.audit.saturation_threshold", "(0, 1)"),
    "audit_floor_factor_one": case({"claims.audit.floor_factor": 1}, "claims.audit.floor_factor", "> 1"),
    "realmodel_band_end_negative": case({"claims.realmodel.band[0]": -3.0}, "claims.realmodel.band[0]", "> 0"),
    "realmodel_max_abs_error_one": case({"claims.realmodel.max_abs_error": 1}, "claims.realmodel.max_abs_error",
                                        "(0, 1)"),
    "realmodel_worst_heads_zero": case({"claims.realmodel.worst_heads": 0}, "claims.realmodel.worst_heads", ">= 1"),
    "realmodel_worst_heads_not_integer": case({"claims.realmodel.worst_heads": 2.5}, "claims.realmodel.worst_heads",
                                              "integer"),
    # claims: intervals out of order
    "C5_band_out_of_order": case({"claims.C5.band": [10, 3]}, "claims.C5.band", "[10, 3]", "0 < low < high"),
    "C5_band_empty": case({"claims.C5.band": [5, 5]}, "claims.C5.band", "0 < low < high"),
    "C5_moderate_out_of_order": case({"claims.C5.moderate[1]": [0.9, 0.5]}, "claims.C5.moderate[1]",
                                     "0 < low < high"),
    "paper_band_out_of_order": case({"claims.paper.band": [10, 3]}, "claims.paper.band", "0 < low < high"),
    "C5_far_above_below_the_band": case({"claims.C5.far_above": 5}, "claims.C5.far_above", "claims.C5.band[1] = 10"),
    "C5_alternative_far_above_below_the_band": case({"claims.C5.alternatives.far_above": [20, 5]},
                                                    "claims.C5.alternatives.far_above[1]", "claims.C5.band[1] = 10"),
    "C5_alternative_window_out_of_order": case({"claims.C5.alternatives.moderate": [[[0.5, 0.1]]]},
                                               "claims.C5.alternatives.moderate[0][0]", "0 < low < high"),
    "C6_alternative_margin_zero": case({"claims.C6.alternatives.tost_margin": [0]}, "claims.C6.alternatives.tost_margin[0]",
                                       "> 0"),
    "C1_alternative_level_above_one": case({"claims.C1.alternatives.confidence_level": [0.9, 1.5]},
                                           "claims.C1.alternatives.confidence_level[1]", "(0, 1)"),
    "C2_alternative_level_zero": case({"claims.C2.alternatives.confidence_level": [0]},
                                      "claims.C2.alternatives.confidence_level[0]", "(0, 1)"),
    "C3_alternative_compare_scale_negative": case({"claims.C3.alternatives.compare_scale": [-1]},
                                                  "claims.C3.alternatives.compare_scale[0]", "> 0"),
    "C4_alternative_knee_factor_one": case({"claims.C4.alternatives.knee_factor": [1]},
                                           "claims.C4.alternatives.knee_factor[0]", "> 1"),
    "C4_alternative_onset_half": case({"claims.C4.alternatives.knee_onset_fraction": [0.5]},
                                      "claims.C4.alternatives.knee_onset_fraction[0]", "(0, 0.5)"),
    "C4_alternative_unknown_choice": case({"claims.C4.alternatives.knee_width": [1]}, "claims.C4.alternatives.knee_width",
                                          "knee_width"),
    "C1_allowance_negative": case({"claims.C1.allowance": -1}, "claims.C1.allowance", ">= 0"),
    "C1_alternative_allowance_negative": case({"claims.C1.alternatives.allowance": [-0.5]},
                                              "claims.C1.alternatives.allowance[0]", ">= 0"),
    "C2_alternative_block_n_zero": case({"claims.C2.alternatives.block_n": [0]}, "claims.C2.alternatives.block_n[0]",
                                        ">= 1"),
    "C3_max_scale_below_the_scale": case({"claims.C3.max_scale": 200}, "claims.C3.max_scale", "claims.C3.scale"),
    "C3_alternative_max_scale_below_one": case({"claims.C3.alternatives.max_scale": [0.5]},
                                               "claims.C3.alternatives.max_scale[0]", ">= 1"),
    "C6_trivial_margin_zero": case({"claims.C6.trivial_margin": 0}, "claims.C6.trivial_margin", "> 0"),
    "C6_min_nontrivial_zero": case({"claims.C6.min_nontrivial": 0}, "claims.C6.min_nontrivial", ">= 1"),
    "C6_alternative_trivial_margin_zero": case({"claims.C6.alternatives.trivial_margin": [0]},
                                               "claims.C6.alternatives.trivial_margin[0]", "> 0"),
    "C6_alternative_min_nontrivial_zero": case({"claims.C6.alternatives.min_nontrivial": [0]},
                                               "claims.C6.alternatives.min_nontrivial[0]", ">= 1"),
    "C6_alternative_alpha_one": case({"claims.C6.alternatives.alpha": [1]}, "claims.C6.alternatives.alpha[0]",
                                     "(0, 1)"),
    "expected_why_slot_names_no_claim": case({"presets.default.expected_verdicts.C5.why": "{C9.cells} cells"},
                                             "presets.default.expected_verdicts.C5.why", "{C9.cells}"),
    "realmodel_band_out_of_order": case({"claims.realmodel.band": [10.0, 3.0]}, "claims.realmodel.band",
                                        "0 < low < high"),
    # claims: combinations, scales and variants, against the experiment each is read from
    "C1_combos_not_run": case({"claims.C1.combos[1]": "forward S=2"}, "claims.C1.combos[1]",
                              "experiments.collapse", COMBOS4),
    "C1_combos_empty": case({"claims.C1.combos": []}, "claims.C1.combos", "non-empty"),
    "C2_zero_combo_not_run": case({"claims.C2.zero_combo": "reverse S=512"}, "claims.C2.zero_combo",
                                  "experiments.collapse"),
    "C2_reverse_combo_not_run": case({"claims.C2.reverse_combo": "reverse S=2"}, "claims.C2.reverse_combo",
                                     "experiments.collapse"),
    "C2_forward_combo_not_run": case({"claims.C2.forward_combo": "forward S=16"}, "claims.C2.forward_combo",
                                     "experiments.collapse"),
    "C2_zero_combo_not_a_label": case({"claims.C2.zero_combo": "reverse"}, "claims.C2.zero_combo",
                                      "'{order} S={scale:g}'"),
    "C3_scale_not_run": case({"claims.C3.scale": 257}, "claims.C3.scale", "experiments.scales", "256, 300, 384, 448"),
    "C3_compare_scale_not_run": case({"claims.C3.compare_scale": 449}, "claims.C3.compare_scale",
                                     "experiments.scales", "448, 512"),
    "C5_baseline_not_run": case({"claims.C5.baseline": "forward S=3"}, "claims.C5.baseline", "experiments.collapse"),
    "C5_fixes_not_run": case({"claims.C5.fixes[2]": "reverse S=3"}, "claims.C5.fixes[2]", "experiments.collapse"),
    "C5_fixes_not_paired": case({"claims.C5.baseline": "reverse S=1", "claims.C5.fixes": ["forward S=1"]},
                                "claims.C5.fixes[0]", "[reverse S=1, forward S=1]", "statistics.pairs"),
    "C6_pairs_not_run": case({"claims.C6.pairs[1][0]": "reverse S=3"}, "claims.C6.pairs[1][0]",
                             "experiments.collapse", COMBOS4),
    "C6_pairs_not_in_statistics_pairs": case({"claims.C6.pairs[0]": ["reverse S=256", "forward S=256"]},
                                             "claims.C6.pairs[0]", "statistics.pairs", "[forward S=256, reverse S=256]"),
    "C6_trivial_pair_not_in_statistics_pairs": case({"claims.C6.trivial_pair": ["reverse S=256", "forward S=1"]},
                                                    "claims.C6.trivial_pair", "statistics.pairs"),
    "C6_pairs_not_a_pair": case({"claims.C6.pairs[1]": ["reverse S=1"]}, "claims.C6.pairs[1]", "a pair [a, b]"),
    "audit_variant_not_run": case({"experiments.policies.variants.p_only": DELETE}, "claims.audit.variant",
                                  "'p_only'", "allowed: deployed"),
    "audit_floor_variant_not_run": case({"experiments.policies.variants.deployed": DELETE},
                                        "claims.audit.floor_variant", "'deployed'", "allowed: p_only"),
    "fp4_delta_not_on_the_grid": case({"claims.fp4.delta": 8.25}, "claims.fp4.delta", "not on the Δ grid",
                                      "experiments.fp4", "allowed: one of 0, 0.5"),
    "tensorcore_max_share_not_a_share": case({"claims.tensorcore.max_share": 1.5}, "claims.tensorcore.max_share",
                                              "allowed"),
    "decode_dc_tolerance_zero": case({"claims.decode.dc_tolerance": 0}, "claims.decode.dc_tolerance", "a number > 0"),
    "decode_rms_tolerance_above_one": case({"claims.decode.rms_tolerance": 1.5}, "claims.decode.rms_tolerance",
                                           "a fraction in (0, 1)"),
    "decode_delta_not_a_number": case({"claims.decode.delta": "late"}, "claims.decode.delta", "nearest Δ"),
    "deployed_layer_not_captured": case({"experiments.deployed.layer": 6}, "experiments.deployed.layer",
                                        "allowed: 0 to 5"),
    "realmodel_combos_not_run": case({"claims.realmodel.combos[1]": "forward S=16"}, "claims.realmodel.combos[1]",
                                     "experiments.realmodel", COMBOS4),
    # an experiment's grid shrunk under a key that names what it no longer runs
    "collapse_scale_shrunk": case({"experiments.collapse.scale": [1]}, "statistics.reference",
                                  "allowed: forward S=1, reverse S=1"),
    "collapse_order_shrunk": case({"experiments.collapse.order": ["forward"]}, "statistics.reference",
                                  "allowed: forward S=1, forward S=256"),
    "scales_order_shrunk": case({"experiments.scales.order": ["reverse"]}, "statistics.baseline",
                                "experiments.scales", "allowed: reverse S=1,"),
    "scales_scale_shrunk": case({"experiments.scales.scale": [1, 2, 4, 8, 16, 32, 64, 128, 256]},
                                "claims.C3.compare_scale", "allowed: 1, 2, 4, 8, 16, 32, 64, 128, 256"),
    "smoke_scales_scale_shrunk": case({"experiments.scales.scale": [1, 256]}, "claims.C3.compare_scale",
                                      "allowed: 1, 256", preset="smoke"),
    "smoke_collapse_delta_coarse": case({"experiments.collapse.delta": [0.0, 16.0]}, "statistics.table_deltas",
                                        "allowed: values among 0, 16", preset="smoke"),
    "paper_collapse_scale_shrunk": case({"experiments.collapse.scale": [256]}, "statistics.baseline",
                                        "experiments.collapse", preset="paper"),
}


@pytest.mark.parametrize("name", sorted(ANALYSIS_BAD))
def test_bad_statistics_or_claims_names_the_key(name):
    preset, edits, key, needles = ANALYSIS_BAD[name]
    cfg = merged(preset)
    for path, value in edits.items():
        put(cfg, path, value)
    message = refusal(cfg)
    assert message is not None, f"{name}: {edits} was not refused"
    assert f"config key '{key}'" in message, f"not naming {key!r}: {message}"
    assert "allowed" in message, message
    for needle in needles:
        assert needle in message, f"{needle!r} not in: {message}"


def _leaves(node, key: str):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, f"{key}.{k}")
    else:
        yield key


def test_every_statistics_and_claims_key_has_a_bad_case():
    """A key added to either section without a bad-value case above fails here."""
    covered = {re.sub(r"\[\d+\]", "", c[2]) for c in ANALYSIS_BAD.values()}
    leaves = [leaf for section in ("statistics", "claims") for leaf in _leaves(CONFIG[section], section)]
    assert len(leaves) == 67
    assert [leaf for leaf in leaves if leaf not in covered] == []


# ---------------------------------------------------------------------------------------------
# nested --config values, as docs/pipeline.md shows them


def _documented_nested_example() -> list[str]:
    page = (REPO / "docs" / "pipeline.md").read_text()
    block = page.split("<!-- nested-config-example -->")[1].split("```")[1]
    (line,) = [ln for ln in block.splitlines()[1:] if ln.strip()]
    return shlex.split(line)


def _snakemake_overrides(argv: list[str]) -> dict:
    """The --config words parsed by Snakemake's own parser, as the workflow receives them."""
    from snakemake.cli import parse_config

    return parse_config(argv[argv.index("--config") + 1:])


def test_snakemake_hands_nested_config_values_over_as_strings():
    over = _snakemake_overrides(_documented_nested_example())
    assert over["experiments"]["collapse"]["sink_v_scale"] == ["0.0", "0.5", "1.0"]


def test_the_documented_nested_override_is_typed_and_beats_the_preset():
    over = _snakemake_overrides(_documented_nested_example())
    cfg = copy.deepcopy(CONFIG)
    cfg["preset"] = over["preset"]
    cfg["experiments"]["collapse"]["sink_v_scale"] = over["experiments"]["collapse"]["sink_v_scale"]
    out = pvalidation.load_config(cfg, over)
    assert out["experiments"]["collapse"]["sink_v_scale"] == [0.0, 0.5, 1.0]
    assert all(type(v) is float for v in out["experiments"]["collapse"]["sink_v_scale"])
    # the rest of the collapse section is the smoke preset's
    assert out["experiments"]["collapse"]["shapes"] == merged("smoke")["experiments"]["collapse"]["shapes"]


@pytest.mark.parametrize("text,want", [("3", 3), ("-2", -2), ("0.25", 0.25), ("1e-3", 1e-3), ("true", True),
                                       ("False", False), ("null", None), ("fa3", "fa3"), ("2^8", "2^8")])
def test_nested_scalars_are_read_as_yaml_reads_them(text, want):
    got = pvalidation.typed_overrides({"experiments": {"x": [text]}})["experiments"]["x"][0]
    assert got == want and type(got) is type(want)


def test_top_level_values_stay_as_snakemake_typed_them():
    assert pvalidation.typed_overrides({"preset": "smoke", "n": "12"}) == {"preset": "smoke", "n": "12"}


def test_a_bad_nested_value_is_still_refused_naming_the_key():
    over = {"preset": "smoke", "experiments": {"collapse": {"sink_v_scale": ["heavy"]}}}
    cfg = copy.deepcopy(CONFIG)
    cfg["preset"] = "smoke"
    with pytest.raises(pconfig.ConfigError, match=r"experiments\.collapse\.sink_v_scale"):
        pvalidation.load_config(cfg, over)


def test_the_documented_nested_override_dry_runs(repo_copy):
    argv = _documented_nested_example()
    res = subprocess.run(argv, cwd=repo_copy, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert "Invalid configuration" not in res.stdout + res.stderr
    assert not (repo_copy / "results").exists()


def test_the_contracts_claim_ids_are_the_registrys_and_the_schemas():
    from pcast.analysis.registry import CLAIMS

    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())

    def find(node):  # the expected_verdicts entry, wherever the presets' schema nests it
        if isinstance(node, dict):
            if "expected_verdicts" in node:
                return node["expected_verdicts"]["propertyNames"]["enum"]
            return next((e for e in map(find, node.values()) if e), None)
        return None

    enum = find(schema)
    assert sorted(contract.CLAIM_IDS) == sorted(c.id for c in CLAIMS) == sorted(enum)
