"""fingerprint and assert_policy on black boxes whose policy is known: every preset, the decode presets
included, through the emulator (a confusion matrix), the same with outputs moved by a GPU exp error, policies
that are no preset, and the presets through the interpreted Triton kernel (a covering subset by default, the
whole matrix with -m slow)."""

import pytest
import torch

import pcast
from pcast.policies import POLICIES
from pcast.probes import ProbeError, assert_policy, default_probes, fingerprint, small_probes

pytestmark = pytest.mark.usefixtures("one_thread")

EXP_ULP = 2.0 ** -23  # one float32 ulp at 1: ex2.approx is within 2 of them


def _box(policy=None, backend="emulator", jitter: float = 0.0, dtype=torch.float32, **options):
    """An attention callable with a fixed policy; ``jitter``: move every non-zero score by up to that much
    (absolute, seeded) and every output by up to 2 ulp, as a GPU exp error moves P by up to 2 ulp."""
    def fn(q, k, v, *, sink_logit=None):
        if jitter:
            g = torch.Generator().manual_seed(int(k.shape[2]) + int(q.shape[2]))
            k = k + jitter * (torch.rand(k.shape, generator=g) * 2 - 1) * (k != 0)
        out = pcast.attention(q, k, v, policy=policy, sink_logit=sink_logit, backend=backend, **options).out
        if jitter:
            g = torch.Generator().manual_seed(7)
            out = out * (1 + 2 * EXP_ULP * (torch.rand(out.shape, generator=g) * 2 - 1))
        return out.to(dtype)
    return fn


ALL = tuple(POLICIES)  # every preset, the split-KV decode presets included


def _confusion(jitter: float, dtype=torch.float32) -> dict:
    return {name: fingerprint(_box(name, jitter=jitter, dtype=dtype), params=False) for name in ALL}


def _assert_diagonal(found: dict) -> None:
    for name, fp in found.items():
        got = fp.policy if isinstance(fp.policy, tuple) else (fp.policy,)
        assert name in got, f"{name} identified as {fp.policy!r}; distances {fp.distance}"
        assert set(got) <= {name}, f"{name} also matched another preset: {fp.policy!r}"


def test_confusion_matrix_every_preset_through_the_emulator():
    found = _confusion(0.0)
    assert len(found) == len(ALL) and all(len(fp.distance) == len(ALL) for fp in found.values())  # every preset
    _assert_diagonal(found)
    for name, fp in found.items():
        assert fp.distance[name] == 0.0
        assert min(d for n, d in fp.distance.items() if n != name) > 0.05  # a margin well above ALLOW


def test_confusion_matrix_with_a_gpu_exp_error():
    # scores moved by up to 2^-22 (P by up to ~2 ulp before its cast), outputs by up to 2 ulp
    _assert_diagonal(_confusion(2.0 ** -22))


def test_confusion_matrix_with_bf16_outputs():
    # a kernel that writes bf16: the tolerance widens by one bf16 ulp, and every preset is still told apart
    _assert_diagonal(_confusion(2.0 ** -22, torch.bfloat16))


@pytest.mark.parametrize("options, order, scale, block_n", [
    (dict(order="forward", scale=64.0), "forward", 64.0, 64),
    (dict(order="reverse", scale=16.0, block_n=32), "reverse", 16.0, 32),
])
def test_a_policy_that_is_no_preset_gets_none_and_its_options(options, order, scale, block_n):
    fp = fingerprint(_box(**options))
    assert fp.policy is None
    assert (fp.params["order"].value, fp.params["scale"].value, fp.params["block_n"].value) == (order, scale, block_n)
    for name in ("order", "scale", "block_n", "fmt", "num_splits", "p_normalize"):
        assert fp.params[name].confidence == 1.0, fp.params[name]
    # exp2 offset and multiply differ only in P's float32 rounding: honestly ambiguous on these probes
    assert set(fp.params["scale_mode"].consistent) == {"multiply", "exp2_offset"}
    # with one split there is no layout to see
    assert set(fp.params["split_layout"].consistent) == {"contiguous", "interleaved"}


@pytest.mark.parametrize("options", [
    dict(order="forward", scale=1.0, block_n=64, num_splits=8, split_layout="interleaved"),
    dict(order="forward", scale=16.0, block_n=256, num_splits=4, p_normalize="partition"),
])
def test_a_decode_policy_that_is_no_preset_gets_its_splits_layout_and_normalisation(options):
    fp = fingerprint(_box(**options))
    assert fp.policy is None
    for name in ("num_splits", "split_layout", "p_normalize", "fmt", "scale", "block_n"):
        want = options.get(name, POLICIES["forward-s1"].__getattribute__(name))
        assert fp.params[name].value == want and fp.params[name].confidence == 1.0, fp.params[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_every_presets_own_option_values_are_among_those_identified(name):
    fp = fingerprint(_box(name))
    for option, param in fp.params.items():
        assert getattr(POLICIES[name], option) in param.consistent, (option, param)


def test_explicit_candidates_and_a_preset_found_among_them():
    fp = fingerprint(_box("fa4"), candidates=["fa3", "fa4", {"order": "reverse", "scale": 256.0,
                                                               "scale_mode": "exp2_offset", "rescale_threshold": 4.0}],
                     params=False)
    assert fp.policy == "fa4" and set(fp.distance) == {"fa3", "fa4", "options-2"}


# Every option value of the presets at least once: order, S (1, 256, 448), scale mode, tau (0, 8), sink mode,
# P format (e4m3fn, e5m2, bf16), block size (32, 64, 128, 160 in a 256-key tile, 256), splits (1, 4, 16, 32),
# layout, normalisation.
TRITON_COVER = ("fa3", "fa4", "vllm-unified", "triton-tutorial", "fa3-decode", "xqa-sm90", "aiter-pa-ragged",
                "vllm-paged-v2", "sglang-decode")


def _triton_identified(name):
    fp = fingerprint(_box(name, backend="triton"), probes=small_probes(), params=False)
    got = fp.policy if isinstance(fp.policy, tuple) else (fp.policy,)
    assert got == (name,), fp.distance
    assert len(fp.distance) == len(ALL)


def test_the_triton_cover_holds_every_option_value_of_the_presets():
    for option in ("order", "scale", "scale_mode", "rescale_threshold", "sink_mode", "fmt", "block_n",
                   "num_splits", "split_layout", "p_normalize"):
        missing = {getattr(p, option) for p in POLICIES.values()} - {getattr(POLICIES[n], option) for n in TRITON_COVER}
        assert not missing, (f"{option} = {sorted(map(str, missing))} of a preset is in no preset of TRITON_COVER: add "
                             "that preset to TRITON_COVER in tests/probes/test_fingerprint.py")


def test_the_small_probe_set_tells_every_preset_apart():
    for name in ALL:
        fp = fingerprint(_box(name), probes=small_probes(), params=False)
        assert fp.policy == name, fp.distance


# The split-KV presets take many seconds each through the interpreter; the inner loop keeps the others, and
# tests/triton/test_splits_triton.py checks the split kernel against the emulator at a small size.
SPLIT_COVER = ("fa3-decode", "aiter-pa-ragged", "vllm-paged-v2", "sglang-decode")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.heavy) if n in SPLIT_COVER else n
                                  for n in TRITON_COVER])
def test_presets_through_the_interpreted_triton_kernel(name):
    _triton_identified(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in ALL if n not in TRITON_COVER])
def test_the_other_presets_through_the_interpreted_triton_kernel(name):
    _triton_identified(name)


def test_assert_policy_passes_and_fails_naming_probe_expected_actual():
    assert_policy(_box("fa3"), "fa3")
    with pytest.raises(AssertionError) as e:
        assert_policy(_box("reverse-s256"), "fa3")  # the same order and S, but 64-key blocks and multiply
    msg = str(e.value)
    assert "probe " in msg and "expected " in msg and "actual " in msg and "'fa3'" in msg
    with pytest.raises(AssertionError, match="probe 'mass-2048'"):
        assert_policy(_box("hpc-ops-s1"), {"order": "forward", "scale": 256.0, "block_n": 128})


def _bad(kind):
    def fn(q, k, v, *, sink_logit=None):
        if kind == "raises":
            raise RuntimeError("no kernel for d=16")
        out = torch.zeros_like(q)
        return {"shape": out[..., :8], "dtype": out.to(torch.int32), "device": out.to("meta"),
                "type": out.tolist()}[kind]
    return fn


@pytest.mark.parametrize("kind, words", [("raises", "raised on probe"), ("shape", "shape"), ("dtype", "dtype"),
                                         ("device", "device"), ("type", "expected a tensor")])
def test_a_bad_callable_gets_a_clear_error(kind, words):
    with pytest.raises(ProbeError, match=words):
        fingerprint(_bad(kind), params=False)


def test_bad_candidates_are_named():
    with pytest.raises(ValueError, match="policy='nope'"):
        fingerprint(_box("fa3"), candidates=["nope"])
    with pytest.raises(ValueError, match="scale"):
        fingerprint(_box("fa3"), candidates=[{"scale": -1.0}])


def test_the_probe_sets_are_small():
    rows = sum(p.shape[0] for p in default_probes())
    assert 60 <= rows <= 160  # ALLOW = 2% is three rows; the tile probe fills a 64-row tile
    assert max(p.shape[1] for p in default_probes()) <= 4352  # a decode row spans 17 partitions of 256 keys
    assert sum(p.shape[0] for p in small_probes()) == 114 and max(p.shape[1] for p in small_probes()) <= 512


def test_candidates_no_probe_tells_apart_come_back_as_a_group():
    # block_m never changes a number (query rows are independent): two such candidates form a group
    same = {"fa3": POLICIES["fa3"], "fa3-m64": POLICIES["fa3"].replace(name="fa3-m64", block_m=64),
            "fa4": POLICIES["fa4"]}
    fp = fingerprint(_box("fa3"), candidates=same, params=False)
    assert fp.policy == ("fa3", "fa3-m64")
    assert fingerprint(_box("fa4"), candidates=same, params=False).policy == "fa4"
