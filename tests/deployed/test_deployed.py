"""pcast.deployed: the registry, the cache, and each adapter's kernel fingerprinted against its preset.

The kernels come from the pinned wheels in the cache (``python -m pcast.deployed fetch``); without them the
kernel tests skip with a reason naming that command. The fingerprint runs on the default probe set at d = 128
in bf16 with H = 4 and H_kv = 2 (the issue's acceptance layout).
"""

import pytest
import torch

import pcast.deployed as D
from pcast.deployed.cache import MissingWheel, cache_dir
from pcast.policies import POLICIES
from pcast.probes import assert_policy, fingerprint

LAYOUT = dict(d=128, dtype=torch.bfloat16, heads=4, kv_heads=2)
# The split kernels run many more interpreted programs (a decode request per query row, 8 or 16 splits each):
# minutes per probe set on 2 cores; the vLLM 2D kernel keeps them in the inner loop.
SPLIT = ("vllm-triton-decode", "sglang-decode")
NAMES = [pytest.param(n, marks=pytest.mark.heavy) if n in SPLIT else n for n in sorted(D.ADAPTERS)]
# vLLM's split (3D) path over the whole default set takes about 10 minutes on 2 cores: the exhaustive run
# (``-m slow``) fingerprints it; the full suite keeps its assert_policy on the small set and the two-probe twin.
FINGERPRINTED = [pytest.param(n, marks=pytest.mark.slow) if n == "vllm-triton-decode" else p
                 for n, p in zip(sorted(D.ADAPTERS), NAMES)]


def _load(name):
    try:
        return D.load(name)
    except MissingWheel as e:
        pytest.skip(str(e))


def test_registry_names_presets_wheels_and_licences():
    for a in D.ADAPTERS.values():
        assert a.preset in POLICIES, a.name
        w = D.WHEELS[a.wheel]
        assert len(w.sha256) == 64 and w.licence == "Apache-2.0" and w.filename.startswith(f"{w.dist}-{w.version}-")
        assert a.file.endswith(".py") and a.function and a.choices
        src = POLICIES[a.preset].source
        assert f"{w.dist} {w.version}" in src and w.sha256 in src, f"preset {a.preset}: name the release verified"


def test_unknown_name_and_missing_cache(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="allowed: vllm-unified"):
        D.load("nope")
    monkeypatch.setenv(D.CACHE_ENV, str(tmp_path))
    assert cache_dir() == tmp_path
    with pytest.raises(MissingWheel, match="python -m pcast.deployed fetch"):
        D.load("sglang-decode")
    assert set(D.missing()) == set(D.WHEELS)


@pytest.mark.parametrize("name", FINGERPRINTED)
def test_fingerprint_names_the_preset(name):
    fn = _load(name)
    preset = D.ADAPTERS[name].preset
    fp = fingerprint(fn, params=False, **LAYOUT)
    assert fp.policy == preset, f"{name}: {fp.policy!r}, distance to {preset}: {fp.distance[preset]:.3f}\n{fp}"
    assert fp.distance[preset] == 0.0


@pytest.mark.parametrize("name", NAMES)
def test_assert_policy_passes_with_the_preset_and_names_a_wrong_option(name):
    fn = _load(name)
    preset = POLICIES[D.ADAPTERS[name].preset]
    assert_policy(fn, preset, small=True, **LAYOUT)
    wrong = preset.replace(name="wrong", scale=128.0 if preset.scale != 128.0 else 256.0)
    with pytest.raises(AssertionError, match=f"scale = {preset.scale:g}"):
        assert_policy(fn, wrong, small=True, **LAYOUT)


@pytest.mark.parametrize("name", SPLIT)
def test_split_kernels_on_two_probes(name):
    """The heavy tests' fast twin: the learned-sink probe (sink mode) and two-hot-128 (S and the P cast)."""
    from pcast.probes import small_probes

    fn = _load(name)
    probes = [p for p in small_probes() if p.name in ("two-hot-128", "learned-sink-128")]
    preset = POLICIES[D.ADAPTERS[name].preset]
    assert_policy(fn, preset, probes=probes, diagnose=False, **LAYOUT)
    other = "init" if preset.sink_mode == "final" else "final"
    with pytest.raises(AssertionError, match="does not implement"):
        assert_policy(fn, preset.replace(name="wrong", sink_mode=other), probes=probes, diagnose=False, **LAYOUT)
