"""pcast.policies: the named P policies of deployed kernels, their checks and the config format."""

import dataclasses
import inspect
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pcast.contract import COMBOS, is_block_size, log2_scale
from pcast.formats import get_format
from pcast.deployed.registry import ADAPTERS, WHEELS
from pcast.policies import DECODE_PRESETS, POLICIES, POLICY_KEYS, Policy, get_policy, policies_from_config, policy_from_config

ROOT = Path(__file__).resolve().parents[2]
DECODE = ("fa3-decode", "xqa-sm90", "aiter-pa-ragged", "vllm-paged-v2", "vllm-triton-decode", "sglang-decode")
PRESETS = ("fa3", "fa4", "sage2", "flashinfer-hopper", "hpc-ops", "hpc-ops-s1", "vllm-unified", "vllm-unified-1c98a49",
           "triton-tutorial",
           *DECODE, "forward-s1", "forward-s256", "reverse-s1", "reverse-s256")
# The keywords of pcast.attention a policy sets (docs/interfaces.md, "Keywords").
KWARGS = ("order", "scale", "scale_mode", "rescale_threshold", "sink_mode", "fmt", "rowsum", "qk_fmt", "qk_scale",
          "v_fmt", "v_scale", "block_m", "block_n")
DECODE_KWARGS = ("num_splits", "split_layout", "p_normalize")  # in attention_kwargs only where not the single pass

# The documented facts of each deployed kernel (implementations.md and the task): order, S,
# how S is applied, sink mode and P's format.
FACTS = {
    "fa3": ("reverse", 256.0, "exp2_offset", "final", "e4m3fn"),
    "fa4": ("reverse", 1.0, "exp2_offset", "final", "e4m3fn"),
    "sage2": ("forward", 448.0, "exp2_offset", "final", "e4m3fn"),
    "flashinfer-hopper": ("reverse", 448.0, "multiply", "final", "e4m3fn"),
    "hpc-ops": ("forward", 256.0, "multiply", "final", "e4m3fn"),
    "hpc-ops-s1": ("forward", 1.0, "multiply", "final", "e4m3fn"),
    "vllm-unified": ("forward", 256.0, "multiply", "init", "e4m3fn"),
    "vllm-unified-1c98a49": ("forward", 1.0, "multiply", "init", "e4m3fn"),
    "triton-tutorial": ("forward", 1.0, "exp2_offset", "final", "e5m2"),
    "fa3-decode": ("reverse", 256.0, "exp2_offset", "final", "e4m3fn"),
    "xqa-sm90": ("forward", 448.0, "multiply", "final", "e4m3fn"),
    "aiter-pa-ragged": ("forward", 1.0, "multiply", "final", "e4m3fn"),
    "vllm-paged-v2": ("forward", 1.0, "multiply", "final", "bf16"),
    "vllm-triton-decode": ("forward", 256.0, "multiply", "init", "e4m3fn"),
    "sglang-decode": ("forward", 1.0, "multiply", "final", "e4m3fn"),
}
# The decode presets' splits (docs/decode.md): layout, normalisation, keys per split at N = 8,192.
DECODE_FACTS = {
    "fa3-decode": ("contiguous", "online", None),
    "xqa-sm90": ("interleaved", "online", None),
    "aiter-pa-ragged": ("contiguous", "partition", 256),
    "vllm-paged-v2": ("contiguous", "partition", 512),
    "vllm-triton-decode": ("contiguous", "online", None),
    "sglang-decode": ("contiguous", "online", None),
}


# ------------------------------------------------------------------------- presets

def test_the_presets_are_the_documented_names():
    """The presets this file documents (PRESETS, FACTS) are presets; a preset they do not name passes here and
    is listed in the docs by tools/preset_docs.py (tests/policies/test_new_preset.py)."""
    assert set(PRESETS) <= set(POLICIES) and set(FACTS) <= set(POLICIES)
    assert all(POLICIES[n].name == n for n in POLICIES)


@pytest.mark.parametrize("name", PRESETS)
def test_preset_validates_and_carries_its_source(name):
    p = POLICIES[name]
    assert Policy(**dataclasses.asdict(p)) == p  # constructing it again passes every check
    verified = {a.preset: a for a in ADAPTERS.values()}
    if name in verified:  # read from and verified against a pinned release's wheel (pcast.deployed)
        w = WHEELS[verified[name].wheel]
        assert p.source.startswith(f"{w.dist} {w.version} (wheel sha256 {w.sha256}) {verified[name].file}"), name
    else:
        repo, _, path = p.source.partition(" ")
        assert repo.count("/") == 1 or repo == "this", f"{name}: source {p.source!r} is not 'owner/repo@commit path'"
        if repo != "this":  # pinned: the commit of the version read, not only a path and a month
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", repo), f"{name}: source {p.source!r} pins no commit"
        assert path, f"{name}: source {p.source!r} names no file"
    assert p.read == "2026-11"
    assert is_block_size(p.block_m) and is_block_size(p.block_n)  # the kernel's own tile
    if name not in verified:  # a preset verified against code carries the operand casts its adapter runs
        assert p.qk_fmt is None and p.v_fmt is None, "presets read from source describe the P path only"
    assert p.rowsum == "unrounded"  # FA3 and FlashInfer sum the unrounded P; none of the presets rounds l


@pytest.mark.parametrize("name", sorted(FACTS))
def test_deployed_preset_matches_its_documented_facts(name):
    p = POLICIES[name]
    assert (p.order, p.scale, p.scale_mode, p.sink_mode, p.fmt) == FACTS[name]


@pytest.mark.parametrize("name", DECODE)
def test_decode_preset_splits(name):
    from pcast.emulator.splits import split_blocks

    p = POLICIES[name]
    layout, normalize, keys = DECODE_FACTS[name]
    assert (p.split_layout, p.p_normalize) == (layout, normalize) and p.num_splits > 1
    if keys is not None:  # partitions of exactly that many keys at the decode experiment's N
        parts = split_blocks(8192 // p.block_n, p.num_splits, p.split_layout)
        assert {len(b) * p.block_n for b in parts} == {keys}
    if name == "xqa-sm90":
        assert p.block_n == 64  # XQA's 64-token tiles


def test_decode_presets_run_on_a_decode_row():
    import torch

    import pcast

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 64, generator=g) for n in (1, 1024, 1024))
    sink = torch.full((2,), 4.0)
    assert DECODE_PRESETS == DECODE
    for name in DECODE:
        r = pcast.attention(q, k, v, policy=name, backend="emulator", sink_logit=sink)
        ref = pcast.attention(q, k, v, backend="reference", sink_logit=sink)
        assert r.lse is not None and float((r.out - ref.out).abs().max()) < 0.1, name
        assert int(r.terms.min()) == 1024, name


def test_fa3_offset_is_max_offset_8():
    # FA3 subtracts Max_offset = 8 inside exp2: log2 S must be exactly 8, and exactly representable
    assert log2_scale(POLICIES["fa3"].scale) == 8.0
    assert POLICIES["fa3"].rescale_threshold == 0.0  # FA3 rescales eagerly


def test_sage2_offset_is_its_8_807():
    # SageAttention2 adds S_FP8_OFFSET = 8.807 in exp2: our S = 448 gives log2 S within 4e-4 of it
    assert abs(log2_scale(POLICIES["sage2"].scale) - 8.807) < 4e-4


def test_fa4_lazy_threshold_leaves_no_room_to_saturate():
    """FA4 rescales lazily; its FP8 offset is floor(log2(max) - tau), so P <= S*2^tau <= max."""
    p, e4m3 = POLICIES["fa4"], get_format("e4m3fn")
    assert p.rescale_threshold > 0
    assert p.scale * 2.0**p.rescale_threshold <= e4m3.max_finite
    assert math.log2(p.scale) == max(0, math.floor(math.log2(e4m3.max_finite) - p.rescale_threshold))
    # the pre-fix offset 8 (S = 256) with the same threshold would saturate: what the issue asks to report
    assert 256.0 * 2.0**p.rescale_threshold > e4m3.max_finite


def test_only_fa4_rescales_lazily_and_only_vllm_seeds_the_max_with_the_sink():
    assert [n for n, p in POLICIES.items() if p.rescale_threshold > 0] == ["fa4"]
    assert [n for n, p in POLICIES.items() if p.sink_mode == "init"] == ["vllm-unified", "vllm-unified-1c98a49",
                                                                         "vllm-triton-decode"]


def test_paper_presets_are_the_four_combinations_of_the_contract():
    paper = [POLICIES[f"{o}-s{s}"] for o in ("forward", "reverse") for s in (1, 256)]
    assert [(p.order, p.scale) for p in paper] == [(o, float(s)) for o, s in COMBOS]
    # everything but order and S is pcast.attention's default, so the paper's numbers are unchanged
    import pcast

    # (pcast.api marks a default the caller did not give with a wrapper that holds .value)
    defaults = {n: getattr(prm.default, "value", prm.default)
                for n, prm in inspect.signature(pcast.attention).parameters.items()}
    for p in paper:
        for key, value in p.attention_kwargs().items():
            if key in defaults and key not in ("order", "scale"):
                assert value == defaults[key], f"{p.name}.{key}={value!r}, pcast.attention default {defaults[key]!r}"


# ------------------------------------------------------------------------- the dataclass

def test_attention_kwargs_are_the_keywords_without_name_source_read():
    kw = POLICIES["fa4"].attention_kwargs()
    assert tuple(kw) == KWARGS
    assert kw["rescale_threshold"] == POLICIES["fa4"].rescale_threshold
    assert [f.name for f in dataclasses.fields(Policy)] == ["name", *KWARGS, *DECODE_KWARGS, "source", "read"]
    assert POLICY_KEYS == (*KWARGS, *DECODE_KWARGS, "source", "read")
    assert tuple(POLICIES["aiter-pa-ragged"].attention_kwargs()) == (*KWARGS, "num_splits", "p_normalize")
    assert tuple(POLICIES["xqa-sm90"].attention_kwargs()) == (*KWARGS, "num_splits", "split_layout")
    assert tuple(POLICIES["fa3-decode"].attention_kwargs()) == (*KWARGS, "num_splits")


def test_attention_accepts_every_policy_keyword():
    import pcast

    params = inspect.signature(pcast.attention).parameters
    if "policy" not in params:
        pytest.skip("pcast.attention does not take policy keywords yet")
    assert set(KWARGS) | set(DECODE_KWARGS) <= set(params)


def test_replace_checks_again_and_leaves_the_original():
    fa3 = POLICIES["fa3"]
    fwd = fa3.replace(order="forward")
    assert (fwd.order, fwd.scale, fa3.order) == ("forward", 256.0, "reverse")
    with pytest.raises(ValueError, match="scale=-1"):
        fa3.replace(scale=-1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fa3.scale = 1.0


def test_numbers_are_stored_as_floats():
    p = Policy("mine", scale=256, rescale_threshold=1, v_scale=2)
    assert [type(x) for x in (p.scale, p.rescale_threshold, p.v_scale)] == [float, float, float]
    assert p.qk_scale == "tensor"


@pytest.mark.parametrize("field,value,allowed", [
    ("name", "", "non-empty name"), ("name", "a b", "non-empty name"), ("order", "sideways", "forward, reverse"),
    ("scale", 0, "finite number > 0"), ("scale", float("inf"), "finite number > 0"), ("scale", True, "> 0"),
    ("scale", "256", "> 0"), ("scale_mode", "fold", "multiply, exp2_offset"),
    ("rescale_threshold", -1.0, ">= 0"), ("rescale_threshold", float("nan"), ">= 0"),
    ("sink_mode", "middle", "init, final"), ("fmt", "e4m3", "e4m3fn"), ("rowsum", "both", "unrounded, rounded"),
    ("qk_fmt", "int8", "e5m2"), ("qk_scale", "row", "tensor"), ("qk_scale", -2.0, "tensor"),
    ("v_fmt", "fp8", "e4m3fn"), ("v_scale", 0.0, "tensor"), ("block_m", 40, "multiple of 16"),
    ("block_n", 0, "positive multiple of 16"), ("block_n", 64.0, "multiple of 16"), ("source", None, "string"),
    ("read", 202611, "string"),
])
def test_bad_field_raises_naming_it(field, value, allowed):
    kw = {"name": "mine", field: value}
    with pytest.raises(ValueError) as e:
        Policy(**kw)
    msg = str(e.value)
    assert f"{field}={value!r} is not allowed" in msg and allowed in msg


# ------------------------------------------------------------------------- look-up

def test_get_policy_by_name_by_object_and_from_extra():
    mine = Policy("mine", order="reverse")
    assert get_policy("fa3") is POLICIES["fa3"]
    assert get_policy(mine) is mine
    assert get_policy("mine", {"mine": mine}) is mine
    from_cfg = get_policy("cfg", {"cfg": {"scale": 16}})
    assert (from_cfg.name, from_cfg.scale) == ("cfg", 16.0)


@pytest.mark.parametrize("bad", ["fa5", "", None, 3, ["fa3"]])
def test_get_policy_unknown_lists_the_allowed_names(bad):
    with pytest.raises(ValueError) as e:
        get_policy(bad, {"mine": Policy("mine")})
    msg = str(e.value)
    assert msg.startswith(f"policy={bad!r} is not allowed")
    assert all(n in msg for n in (*PRESETS, "mine"))


# ------------------------------------------------------------------------- config

def test_policy_from_config_takes_the_keys_and_defaults_the_rest():
    p = policy_from_config("mine", {"order": "reverse", "scale": 448, "scale_mode": "exp2_offset",
                                    "v_fmt": "e4m3fn", "block_n": 128})
    assert (p.name, p.order, p.scale, p.scale_mode, p.v_fmt, p.block_n) == \
        ("mine", "reverse", 448.0, "exp2_offset", "e4m3fn", 128)
    assert (p.fmt, p.block_m, p.rescale_threshold, p.sink_mode) == ("e4m3fn", 64, 0.0, "final")
    assert policy_from_config("empty", None) == Policy("empty")


@pytest.mark.parametrize("mapping,msg", [
    ({"bogus": 1}, r"policies\.mine\.bogus is not a policy key; allowed keys: order, scale, scale_mode"),
    ({"name": "other"}, r"policies\.mine\.name is not a policy key"),
    ({"scale": -1}, r"policies\.mine\.scale=-1 is not allowed; allowed: a finite number > 0"),
    ({"fmt": "none"}, r"policies\.mine\.fmt='none' is not allowed; allowed: None \(YAML null\)"),
    ({"block_n": 100}, r"policies\.mine\.block_n=100 is not allowed; allowed: a positive multiple of 16"),
    (["reverse"], r"policies\.mine must be a mapping"),
])
def test_bad_config_raises_naming_the_key(mapping, msg):
    with pytest.raises(ValueError, match=msg):
        policy_from_config("mine", mapping)


def test_policies_section_builds_each_and_refuses_a_preset_name():
    out = policies_from_config({"a": {"scale": 2}, "b": {"order": "reverse"}})
    assert {n: (p.order, p.scale) for n, p in out.items()} == {"a": ("forward", 2.0), "b": ("reverse", 1.0)}
    assert policies_from_config(None) == {}
    with pytest.raises(ValueError, match=r"policies\.fa3: the name is a preset's"):
        policies_from_config({"fa3": {"scale": 1}})
    with pytest.raises(ValueError, match="policies must be a mapping"):
        policies_from_config(["a"])
    with pytest.raises(ValueError, match="name 'bad name' is not allowed"):
        policies_from_config({"bad name": {}})


def test_config_yaml_policies_section_is_valid():
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    section = cfg.get("policies") or {}
    out = policies_from_config(section)
    assert set(out) == set(section)
    # every policy the policies experiment names is a preset or the user's
    names = ((cfg.get("experiments") or {}).get("policies") or {}).get("policies") or []
    for n in names:
        assert get_policy(n, out).name == n


def test_import_is_torch_free():
    code = "import sys, pcast.policies; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_yaml_policies_take_every_p_format_the_api_takes():
    """fmt takes what pcast.attention's fmt takes (FP8 and microscaled formats); the Q/K and V casts stay FP8."""
    from pcast.contract import MX_FORMAT_NAMES
    from pcast.formats.microscaling import MX_FORMATS
    from pcast.policies import policy_from_config

    assert tuple(MX_FORMATS) == MX_FORMAT_NAMES
    for name in MX_FORMAT_NAMES:
        assert policy_from_config("mine", {"fmt": name}).fmt == name
    with pytest.raises(ValueError, match=r"policies.mine.v_fmt='nvfp4' is not allowed"):
        policy_from_config("mine", {"v_fmt": "nvfp4"})


def test_presets_take_their_kernels_own_tiles():
    # FlashAttention-3's FP8 tiles (hopper/tile_size.h, hdim <= 64) and FlashInfer's Hopper FP8 CTA_Q: not
    # rounded to a power of two
    assert (POLICIES["fa3"].block_m, POLICIES["fa3"].block_n) == (192, 160)
    assert (POLICIES["flashinfer-hopper"].block_m, POLICIES["flashinfer-hopper"].block_n) == (192, 128)
    assert POLICIES["fa3"].replace(block_n=96).block_n == 96
