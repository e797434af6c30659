"""The policies experiment's run side: config checks, shard specs, the shard job, the tidy table.

* bad values of ``experiments.policies`` or of the top-level ``policies:`` section raise a
  ConfigError naming the key (the workflow runs the same check before any job: test_config);
* shard specs hold every listed policy's resolved keywords, so a change to the experiment or to
  a user policy changes only the policies shards' params;
* a tiny :func:`run_policies_shard` on a temporary inputs file: columns, row count, identical
  policies giving identical numbers, floors equal to the same call with ``fmt=None`` made
  through :func:`pcast.attention` directly, the learned-sink rows, determinism;
* the session's smoke run holds ``results/tidy/policies.csv`` with the expected rows, and dry
  runs after it rerun only the policies jobs when only the experiment changes.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from pcast import contract
from pcast.pipeline import config as pconfig
from pcast.pipeline import inputs, policy_runs, tables
from pcast.pipeline.policy_config import resolve_variants
from pcast.policies import DECODE_PRESETS, POLICIES

REPO = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())
P = contract.POLICY_EXPERIMENT


def merged(preset: str = "default", overrides: dict | None = None) -> dict:
    cfg = copy.deepcopy(CONFIG)
    cfg["preset"] = preset
    return pconfig.resolve_preset(cfg, overrides)


# ---------------------------------------------------------------------------------------------
# config: the issue's grid, and bad values naming their key


def test_default_grid_is_the_issues():
    cfg = merged("default")
    e = cfg["experiments"][P]
    deltas = pconfig.delta_values(e["delta"])
    assert deltas == [0.5 * i for i in range(33)]
    assert e["seeds"] >= 16 and e["shapes"] == [{"n": 1024, "d": 64}]
    assert e["sink_kinds"] == ["keys", "logit"] and e["ksink"] == 4 and set(e["sink_v_scale"]) == {0, 1}
    # every preset but the decode ones (split-KV, for N = 8,192), the paper's four, the user's, the two dynamic
    users = {"fa4-s256", "vllm-final", "tile-max", "row-block-max"}
    assert (set(POLICIES) - set(DECODE_PRESETS)) | users == set(e["policies"]), \
        "config.yaml experiments.policies.policies must list every single-pass preset of pcast.policies.POLICIES"
    assert set(e["variants"]) == set(contract.VARIANTS)
    deployed = resolve_variants(e)["deployed"]
    assert deployed == {"qk_fmt": "e4m3fn", "qk_scale": "tensor", "v_fmt": "e4m3fn", "v_scale": "tensor"}
    # the shipped user policy is FA4's at S = 256
    spec = pconfig.shard_spec(P, e, 0, policies=cfg["policies"])
    assert spec["policies"]["fa4-s256"] == {**spec["policies"]["fa4"], "scale": 256.0}
    # and vLLM's with the learned sink joining l after the loop (the fix the issue names)
    assert spec["policies"]["vllm-final"] == {**spec["policies"]["vllm-unified-1c98a49"], "sink_mode": "final"}
    # and the dynamic P scales beside the static ones: per tile and per block row (the alias is normalised)
    dyn = {name: spec["policies"][name] for name in ("tile-max", "row-block-max")}
    assert dyn == {name: {**spec["policies"]["forward-s1"], "scale_mode": mode, "sink_mode": "final"}
                   for name, mode in (("tile-max", "tile_max"), ("row-block-max", "per_row"))}
    smoke, paper = merged("smoke")["experiments"][P], merged("paper")["experiments"][P]
    assert smoke["shapes"] == [{"n": 128, "d": 16}] and smoke["seeds"] == 2
    assert paper["shapes"] == [{"n": 4096, "d": 128}] and paper["seeds"] > e["seeds"]


BAD = {
    # id: (overrides merged over the default preset, strings the ConfigError must contain)
    "unknown_policy": ({"experiments": {P: {"policies": ["fa3", "fa5"]}}},
                       ["experiments.policies.policies[1]", "'fa5'", "fa3, fa4", "fa4-s256"]),
    "bad_user_policy_value": ({"policies": {"fa4-s256": {"scale_mode": "exp3"}}},
                              ["policies.fa4-s256.scale_mode", "multiply, exp2_offset"]),
    "unknown_user_policy_key": ({"policies": {"mine": {"sclae": 2}}}, ["policies.mine.sclae", "allowed keys"]),
    "user_policy_named_as_a_preset": ({"policies": {"fa3": {"scale": 2}}}, ["policies.fa3", "preset"]),
    "user_policy_casts_operands": ({"policies": {"fa4-s256": {"v_fmt": "e4m3fn"}}},
                                   ["policies.fa4-s256.v_fmt", "variants"]),
    "unknown_variant": ({"experiments": {P: {"variants": {"fp8_all": {}}}}},
                        ["experiments.policies.variants.fp8_all", "p_only, deployed"]),
    "p_only_with_a_cast": ({"experiments": {P: {"variants": {"p_only": {"v_fmt": "e4m3fn"}}}}},
                           ["experiments.policies.variants.p_only.v_fmt", "float32"]),
    "deployed_without_casts": ({"experiments": {P: {"variants": {"deployed": {"qk_fmt": None, "v_fmt": None}}}}},
                               ["experiments.policies.variants.deployed", "casts no operand"]),
    "variant_bad_format": ({"experiments": {P: {"variants": {"deployed": {"v_fmt": "e4m3"}}}}},
                           ["experiments.policies.variants.deployed", "v_fmt='e4m3'"]),
    "variant_unknown_key": ({"experiments": {P: {"variants": {"deployed": {"p_fmt": "e4m3fn"}}}}},
                            ["experiments.policies.variants.deployed.p_fmt", "qk_fmt, qk_scale, v_fmt, v_scale"]),
    "ksink_above_a_policys_block_n": ({"experiments": {P: {"ksink": 40}}},
                                      ["experiments.policies.ksink", "'vllm-unified'", "block_n = 32"]),
    "d_not_power_of_two": ({"experiments": {P: {"shapes": [{"n": 256, "d": 48}]}}},
                           ["experiments.policies.shapes[0].d", "power of two"]),
    "delta_repeats": ({"experiments": {P: {"delta": [1.0, 1.0]}}}, ["experiments.policies.delta", "distinct"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_policies_config_names_the_key(case):
    overrides, needles = BAD[case]
    cfg = merged("default", overrides)
    with pytest.raises(pconfig.ConfigError) as info:
        pconfig.check_config(cfg)
    for needle in needles:
        assert needle in str(info.value), f"{needle!r} not in: {info.value}"


def test_every_preset_passes_and_a_missing_section_is_named():
    for name in CONFIG["presets"]:
        pconfig.check_config(merged(name))
    cfg = merged("default")
    del cfg["experiments"][P]
    with pytest.raises(pconfig.ConfigError, match=r"experiments\.policies' is missing"):
        pconfig.check_config(cfg)


# ---------------------------------------------------------------------------------------------
# specs: what each job computes


def test_spec_resolves_every_policy_and_changes_only_with_the_policies_work():
    cfg = merged("default")
    e = cfg["experiments"][P]
    spec = pconfig.shard_spec(P, e, 0, policies=cfg["policies"])
    for name in (n for n in POLICIES if n not in DECODE_PRESETS):  # the decode presets are not in the list
        want = {k: v for k, v in POLICIES[name].attention_kwargs().items() if k not in ("qk_fmt", "qk_scale",
                                                                                          "v_fmt", "v_scale")}
        assert spec["policies"][name] == want
    assert spec["seeds"] == list(range(e["seeds_per_shard"])) and spec["delta"] == pconfig.delta_values(e["delta"])
    # a user policy's field is part of the spec; its source text is not (no rerun for a comment)
    changed = merged("default", {"policies": {"fa4-s256": {"rescale_threshold": 4.0}}})
    assert pconfig.shard_spec(P, e, 0, policies=changed["policies"]) != spec
    noted = merged("default", {"policies": {"fa4-s256": {"source": "elsewhere"}}})
    assert pconfig.shard_spec(P, e, 0, policies=noted["policies"]) == spec
    # the list's order does not change the work; the other experiments' specs ignore it all
    shuffled = merged("default", {"experiments": {P: {"policies": list(reversed(e["policies"]))}}})
    assert pconfig.spec_json(pconfig.shard_spec(P, shuffled["experiments"][P], 0, policies=cfg["policies"])) == \
        pconfig.spec_json(spec)
    assert pconfig.shard_spec("collapse", changed["experiments"]["collapse"], 0) == \
        pconfig.shard_spec("collapse", cfg["experiments"]["collapse"], 0)
    # inputs depend on seeds, shapes and sigma only
    finer = merged("default", {"experiments": {P: {"delta": [1.0, 2.0], "policies": ["fa3"]}}})
    assert pconfig.inputs_spec(P, finer["experiments"][P], 3) == pconfig.inputs_spec(P, e, 3)
    per = e["seeds_per_shard"]  # shard 3 holds seeds 3·per .. 4·per - 1
    assert pconfig.inputs_spec(P, e, 3) == {"experiment": P, "shard": 3, "seeds": list(range(3 * per, 4 * per)),
                                            "batch": 1, "heads": 1, "nd": [[1024, 64]], "sigma": [1.0]}


def test_expected_rows_counts_every_policy_variant_and_sink_item():
    e = merged("default")["experiments"][P]
    # 16 seeds x (keys: 2 sink_v_scale x 33 Δ + logit: 33 Δ) x the listed policies (17) x 2 variants
    n = len(e["policies"])
    assert n == 17 and pconfig.expected_rows(P, e) == 16 * (2 * 33 + 33) * n * 2
    one = dict(e, sink_kinds=["logit"], variants={"p_only": {}})
    assert pconfig.expected_rows(P, one) == 16 * 33 * n


def test_call_key_drops_only_what_cannot_change_the_bits():
    base = policy_runs.call_kwargs(POLICIES["forward-s256"].attention_kwargs(), resolve_variants(
        {"variants": {"p_only": {}}})["p_only"], kind="keys", ksink=4, causal=False, backend="emulator")
    key = policy_runs.call_key
    # without a sink logit the sink mode is irrelevant; with one it is not
    assert key({**base, "sink_mode": "init"}, logit=False) == key(base, logit=False)
    assert key({**base, "sink_mode": "init"}, logit=True) != key(base, logit=True)
    # with fmt=None the rounded row sum is the unrounded one for S a power of two (or exp2_offset) only
    floor = {**base, "fmt": None}
    assert key({**floor, "rowsum": "rounded"}, logit=False) == key(floor, logit=False)
    s448 = {**floor, "scale": 448.0}
    assert key({**s448, "rowsum": "rounded"}, logit=False) != key(s448, logit=False)
    assert key({**s448, "rowsum": "rounded", "scale_mode": "exp2_offset"}, logit=False) == \
        key({**s448, "scale_mode": "exp2_offset"}, logit=False)
    # everything that moves fp32 rounding stays in the floor's key
    for field, value in (("order", "reverse"), ("scale", 1.0), ("rescale_threshold", 8.0), ("block_n", 128),
                         ("scale_mode", "exp2_offset"), ("v_fmt", "e4m3fn")):
        assert key({**floor, field: value}, logit=False) != key(floor, logit=False), field
    assert key({**base, "fmt": None}, logit=False) != key(base, logit=False)


# ---------------------------------------------------------------------------------------------
# a tiny shard

TINY_USER = {  # two user policies: one identical to a preset, one lazy policy that can saturate
    "twin": {k: v for k, v in POLICIES["forward-s256"].attention_kwargs().items()
             if k not in ("qk_fmt", "v_fmt")},
    "lazy-s256": {"order": "reverse", "scale": 256, "scale_mode": "exp2_offset", "rescale_threshold": 8.0,
                  "block_m": 16, "block_n": 16},
}
TINY = {"seeds": 2, "seeds_per_shard": 2, "shapes": [{"n": 64, "d": 16}], "causal": [False],
        "sink_kinds": ["keys", "logit"], "ksink": 4, "sigma": [1.0], "sink_v_scale": [0.0, 1.0],
        "delta": [0.0, 12.0], "policies": ["forward-s1", "forward-s256", "twin", "vllm-unified-1c98a49", "fa4", "lazy-s256"],
        "variants": {"p_only": {}, "deployed": {}}, "backend": "emulator"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """One shard of the tiny grid run twice; returns (tmp dir, tidy DataFrame, the two shard files)."""
    d = tmp_path_factory.mktemp("policies")
    spec = pconfig.shard_spec(P, TINY, 0, policies=TINY_USER)
    inputs.write_inputs(pconfig.inputs_spec(P, TINY, 0), d / "in.safetensors")
    paths = []
    for run in ("a", "b"):
        policy_runs.run_policies_shard(spec, d / "in.safetensors", d / f"rows_{run}.csv", d / f"t_{run}.csv")
        paths.append(d / f"rows_{run}.csv")
    n = tables.merge_tidy([paths[0]], d / "tidy.csv", experiment=P, expected=pconfig.expected_rows(P, TINY))
    assert n == 2 * (2 * 2 + 2) * 6 * 2
    return d, pd.read_csv(d / "tidy.csv", keep_default_na=False, na_values=["nan"]), paths


def test_tiny_shard_rows_columns_and_determinism(tiny):
    d, df, (a, b) = tiny
    assert list(df.columns) == list(contract.POLICY_TIDY_COLUMNS)
    assert a.read_bytes() == b.read_bytes()  # same spec and inputs: same bytes
    assert (df.backend == "emulator").all() and (df.experiment == P).all()
    keys, logit = df[df.sink_kind == "keys"], df[df.sink_kind == "logit"]
    assert (keys.ksink == 4).all() and (keys.terms == 64 * 60).all() and (keys.terms_sink == 64 * 4).all()
    assert (logit.ksink == 0).all() and (logit.sink_v_scale == 0).all() and (logit.terms == 64 * 64).all()
    assert (logit.terms_sink == 0).all() and (logit.underflow_sink_frac == 0).all()  # 0 of 0 terms is 0
    assert set(df[df.variant == "p_only"].qk_fmt) == {"none"} and set(df[df.variant == "deployed"].v_fmt) == {"e4m3fn"}
    assert ((df.saturated_frac * (df.terms + df.terms_sink) - df.saturated).abs() < 1e-6).all()
    key = list(contract.POLICY_CONFIG_COLUMNS) + ["seed"]
    assert not df.duplicated(key).any()
    assert df[key].equals(df.sort_values(key, kind="stable")[key])


def test_identical_policies_give_identical_numbers(tiny):
    d, df, _ = tiny
    cols = ["mse", "rel_mse", "max_abs_err", "floor_mse", "underflow", "underflow_sink", "saturated"]
    on = ["sink_kind", "delta", "sink_v_scale", "variant", "seed"]
    a = df[df.policy == "twin"].set_index(on).sort_index()[cols]
    b = df[df.policy == "forward-s256"].set_index(on).sort_index()[cols]
    assert len(a) == 24 and a.equals(b)  # 2 seeds x 2 variants x (2 x 2 keys items + 2 logit items)
    # and the twin was not run again: per stack and variant 5 distinct policy calls and one floor
    # (24 calls without sharing), on 4 keys items and 2 logit items, for 2 seeds
    timing = pd.read_csv(d / "t_a.csv")
    assert int(timing.runs.iloc[0]) == 2 * (2 * (5 + 1)) * (4 + 2)


def test_floor_is_the_variants_casts_without_the_p_cast(tiny):
    """One row's error and floor recomputed through pcast.attention and the float64 reference.

    The floor is P unrounded with the row's operand casts on the paper's P path; the policy's own
    P path with fmt=None differs from it by fp32 rounding only: output ulps (~1e-7 relative) on
    an FP8 operand error of ~1e-2 relative move the floor's MSE by ~1e-5 relative at most, so
    1e-4 bounds it with margin."""
    from pcast import attention
    from pcast.reference import reference_attention
    from pcast.models.sinks import learned_sink

    d, df, _ = tiny
    base = inputs.base_tensors(inputs.load_inputs(d / "in.safetensors", {"seeds": [0, 1], "batch": 1, "heads": 1}),
                               1, 64, 16, 1.0)
    sink = learned_sink(12.0, batch=1, heads=1)
    row = df[(df.policy == "fa4") & (df.variant == "deployed") & (df.sink_kind == "logit") & (df.delta == 12)
             & (df.seed == 1)].iloc[0]
    kw = dict(POLICIES["fa4"].attention_kwargs(), qk_fmt="e4m3fn", v_fmt="e4m3fn", backend="emulator")
    ref = reference_attention(*base, sink_logit=sink)

    def mse(**kwargs):
        return float((attention(*base, sink_logit=sink, **kwargs).out.double() - ref).square().mean())

    assert float(row["mse"]) == pytest.approx(mse(**kw), rel=1e-9)
    assert float(row["floor_mse"]) == pytest.approx(mse(qk_fmt="e4m3fn", v_fmt="e4m3fn", fmt=None,
                                                        backend="emulator"), rel=1e-9)
    assert float(row["floor_mse"]) == pytest.approx(mse(**{**kw, "fmt": None}), rel=1e-4)
    # p_only floors are fp32 rounding only; FP8 operands cost far more than that
    p_only, deployed = df[df.variant == "p_only"], df[df.variant == "deployed"]
    assert p_only.floor_rel_mse.max() < 1e-10 < 1e-6 < deployed.floor_rel_mse.min()


def test_paper_policies_match_the_collapse_sweep(tiny, tmp_path):
    """The paper's contract through the other shard job (pcast.pipeline.runs.run_sweep_shard, its
    own stacking and reference): on the same seeds and sink keys, forward-s1 and forward-s256 with
    float32 operands give the collapse sweep's numbers bit for bit."""
    from pcast.pipeline import runs

    _, df, _ = tiny
    exp = {"seeds": 2, "seeds_per_shard": 2, "shapes": [{"n": 64, "d": 16, "block_m": 64, "block_n": 64}],
           "causal": [False], "ksink": [4], "sigma": [1.0], "sink_v_scale": [0.0, 1.0], "delta": [0.0, 12.0],
           "order": ["forward"], "scale": [1, 256], "backend": "emulator"}
    inputs.write_inputs(pconfig.inputs_spec("collapse", exp, 0), tmp_path / "in.safetensors")
    runs.run_sweep_shard(pconfig.shard_spec("collapse", exp, 0), tmp_path / "in.safetensors", tmp_path / "c.csv",
                         tmp_path / "t.csv")
    sweep = pd.read_csv(tmp_path / "c.csv").assign(policy=lambda t: t.combo.map(
        {"forward S=1": "forward-s1", "forward S=256": "forward-s256"}))
    mine = df[(df.sink_kind == "keys") & (df.variant == "p_only") & df.policy.isin(["forward-s1", "forward-s256"])]
    on = ["policy", "seed", "delta", "sink_v_scale"]
    both = mine.merge(sweep, on=on, suffixes=("", "_sweep"))
    assert len(both) == len(mine) == len(sweep) == 16
    for col in ("mse", "max_abs_err", "underflow", "terms", "underflow_sink", "terms_sink", "saturated"):
        assert (both[col] == both[f"{col}_sweep"]).all(), col


def test_a_dynamic_policy_runs_on_the_emulator_where_auto_would_pick_the_kernel():
    """The Triton kernel refuses FP8 dynamic scales: ``auto`` sends them to the emulator, static ones stay."""
    from pcast.pipeline.policy_config import call_kwargs
    spec = pconfig.shard_spec(P, merged("default")["experiments"][P], 0, policies=CONFIG["policies"])
    backend = {name: call_kwargs(spec["policies"][name], {}, kind="keys", ksink=4, causal=False,
                                 backend=b)["backend"] for name in ("tile-max", "row-block-max", "fa3")
               for b in ("auto",)}
    assert backend == {"tile-max": "emulator", "row-block-max": "emulator", "fa3": "auto"}
    assert call_kwargs(spec["policies"]["tile-max"], {}, kind="keys", ksink=4, causal=False,
                       backend="triton")["backend"] == "triton"


def test_dynamic_policies_run_in_a_shard_and_lose_only_the_sink_block(tmp_path):
    """The shipped dynamic policies in a policies shard: their rows are there, and at Δ = 16 (far past the
    static S = 1 collapse) they lose at most the sink block's non-sink keys, (64 − 4)/(128 − 4) of a row."""
    cfg = dict(TINY, shapes=[{"n": 128, "d": 16}], seeds=1, seeds_per_shard=1, delta=[16.0], sink_kinds=["keys"],
               sink_v_scale=[1.0], variants={"p_only": {}}, policies=["forward-s1", "tile-max", "row-block-max"])
    spec = pconfig.shard_spec(P, cfg, 0, policies=CONFIG["policies"])
    inputs.write_inputs(pconfig.inputs_spec(P, cfg, 0), tmp_path / "in.safetensors")
    policy_runs.run_policies_shard(spec, tmp_path / "in.safetensors", tmp_path / "rows.csv", tmp_path / "t.csv")
    df = pd.read_csv(tmp_path / "rows.csv").set_index("policy")
    assert df.loc[["tile-max", "row-block-max"], "scale_mode"].tolist() == ["tile_max", "per_row"]
    share = (64 - 4) / (128 - 4)
    assert (df.loc[["tile-max", "row-block-max"], "underflow_frac"] <= share).all()
    assert df.loc["forward-s1", "underflow_frac"] > 0.9


def test_learned_sink_modes_and_lazy_saturation(tiny):
    """vLLM's init mode seeds every row's max with the logit Δ = 12: at S = 1 every key falls below
    half the smallest E4M3 subnormal (exp(s - 12) < 2^-10 needs s > 5.07, a 2e-7 event for N(0, 1)
    scores over 2 x 64 x 64 keys); the final mode keeps the row max (s - m < -6.93 needs ~4.5
    sigma below the max of 64 scores: expected well under 1 of the 8192 keys)."""
    _, df, _ = tiny
    strong = df[(df.sink_kind == "logit") & (df.delta == 12) & (df.variant == "p_only")].set_index(["policy", "seed"])
    assert (strong.loc["vllm-unified-1c98a49"].underflow_frac == 1).all()
    assert (strong.loc["forward-s1"].underflow <= 1).all()
    # lazy rescaling at S = 256: x reaches S·2^τ > 448 only where the max went stale (saturated);
    # an eager multiply policy with S <= 448 never saturates (x <= S)
    assert df[df.policy == "lazy-s256"].saturated.sum() > 0
    assert (df[df.policy.isin(["forward-s1", "forward-s256", "vllm-unified-1c98a49"])].saturated == 0).all()


# ---------------------------------------------------------------------------------------------
# the workflow (the session's smoke run)

needs_snakemake = pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake not installed")


@needs_snakemake
@pytest.mark.smoke_reader
def test_smoke_run_has_the_policies_table(smoke_run):
    cfg = config_of(smoke_run)
    text = (smoke_run / "results/tidy/policies.csv").read_text().splitlines()
    assert text[0] == ",".join(contract.POLICY_TIDY_COLUMNS)
    assert len(text) - 1 == pconfig.expected_rows(P, cfg["experiments"][P]) == 2 * (2 * 3 + 3) * 8 * 2
    assert (smoke_run / "results/timing/policies.csv").exists()
    log = (smoke_run.parent / "snakemake.log").read_text()
    assert "[pcast] policies shard 1/1:" in log


def config_of(root: Path) -> dict:
    cfg = yaml.safe_load((root / "config.yaml").read_text())
    return pconfig.resolve_preset({**cfg, "preset": "smoke"})


@needs_snakemake
def test_changing_the_policies_experiment_reruns_only_its_shards(smoke_run, tmp_path):
    from test_pipeline import MY_RULES, jobs, smk

    override = tmp_path / "policies.yaml"
    override.write_text(yaml.safe_dump({"experiments": {P: {"delta": [0.0, 4.0, 16.0]}},
                                        "policies": {"fa4-s256": {"rescale_threshold": 6.0}}}))
    listed = jobs(smk(smoke_run, "-n", "--configfile", str(override)).stdout)
    mine = {(j["rule"], j["wildcards"].get("experiment")) for j in listed if j["rule"] in MY_RULES}
    # the conformance check runs every policy's call through the multi-call engine, so a changed policy reruns it
    assert mine == {("sweep_shard", P), ("tidy_table", P), ("conformance_shard", "conformance"),
                    ("tidy_table", "conformance")}
    for j in listed:
        if j["rule"] in ("sweep_shard", "conformance_shard"):
            assert j["reason"].startswith("Params have changed"), j
    override.write_text(yaml.safe_dump({"experiments": {P: {"delta": [0.0, 4.0, 16.0]}}}))  # the grid alone
    listed = jobs(smk(smoke_run, "-n", "--configfile", str(override)).stdout)
    mine = {(j["rule"], j["wildcards"].get("experiment")) for j in listed if j["rule"] in MY_RULES}
    assert mine == {("sweep_shard", P), ("tidy_table", P)}


@needs_snakemake
def test_the_policies_table_is_a_target_of_its_own(tmp_path):
    from repo_copy import copy_repo
    from test_pipeline import jobs, smk

    clean = copy_repo(tmp_path / "clean")
    listed = jobs(smk(clean, "-n", "results/tidy/policies.csv").stdout)
    assert {(j["rule"], j["wildcards"].get("experiment")) for j in listed} == {
        ("inputs", P), ("sweep_shard", P), ("tidy_table", P)}
    res = subprocess.run(["snakemake", "-n", "--config", "preset=smoke"], cwd=clean, capture_output=True, text=True)
    assert "results/tidy/policies.csv" in res.stdout  # part of the default target
