"""Kernels written outside the package (tests/support/own_kernels.py: plain torch, a blockwise loop, torch's own
E4M3 cast) at d = 128 in bf16, fingerprinted to their options; probes at the kernel's head dimension, dtype,
batch, heads (grouped-query) and causal mask; the one criterion that fingerprint and assert_policy share."""

import pytest
import torch

import pcast
from pcast.policies import POLICIES
from pcast.probes import Shape, assert_policy, fingerprint, small_probes

from own_kernels import KERNELS, make_kernel

pytestmark = pytest.mark.usefixtures("one_thread")

AT = dict(d=128, dtype="bf16", small=True)  # the acceptance's layout; the small set keeps each test under a second


@pytest.fixture(scope="module")
def found():
    torch.set_num_threads(1)
    return {name: fingerprint(make_kernel(**opts), **AT) for name, (opts, _) in KERNELS.items()}


@pytest.mark.parametrize("name", list(KERNELS))
def test_each_own_kernel_is_fingerprinted_to_its_options(found, name):
    fp, want = found[name], KERNELS[name][1]
    for option, value in want.items():
        assert fp.params[option].value == value and fp.params[option].confidence == 1.0, (option, fp.params[option])
    assert fp.params["fmt"].value == "e4m3fn" and fp.params["num_splits"].value == 1
    assert fp.shape.d == 128 and fp.shape.dtype == torch.bfloat16


def test_no_preset_is_claimed_for_kernels_that_are_none(found):
    for name in ("forward-offset8-lazy8", "reverse-s256-multiply", "forward-s1-tile192"):
        assert found[name].policy is None, (name, found[name].distance)


def test_a_kernel_with_no_sink_keyword_is_fa3_with_sinks_not_supported(found):
    fp = found["fa3-no-sinks"]
    assert fp.policy == "fa3" and not fp.sinks.supported and "TypeError" in fp.sinks.reason
    assert "learned sinks: not supported" in str(fp) and "learned-sink" not in " ".join(w[0] for w in fp.worst.values())
    # the same probes, the same criterion: assert_policy passes with the sink probes left out, fails with them
    assert_policy(make_kernel(**KERNELS["fa3-no-sinks"][0]), "fa3", sinks=False, **AT)


def test_a_kernel_that_ignores_sink_logit_is_reported_as_not_supporting_sinks():
    fp = fingerprint(make_kernel(order="reverse", scale=256.0, scale_mode="exp2_offset", block_n=160, sinks="ignore"),
                     candidates=["fa3", "fa4"], params=False, **AT)
    assert fp.policy == "fa3" and not fp.sinks.supported and "does not move" in fp.sinks.reason
    with pytest.raises(AssertionError, match="probe 'learned-sink-128'"):  # declared with sinks, it fails on them
        assert_policy(make_kernel(order="reverse", scale=256.0, scale_mode="exp2_offset", block_n=160,
                                  sinks="ignore"), "fa3", diagnose=False, **AT)


def test_an_s128_variant_is_never_labelled_fa3_and_is_near_it(found):
    fp = found["fa3-s128"]
    assert fp.policy is None and fp.near == "fa3" and fp.explains == {"scale": (128.0, 256.0)}
    assert fp.near_text().startswith("fa3? 1 of 114 rows outside (mass-512: 1): scale looks like 128 (fa3: 256, confidence 1)")
    assert "near: fa3?" in str(fp)
    with pytest.raises(AssertionError) as e:  # the shared criterion: assert_policy fails it too
        assert_policy(make_kernel(**KERNELS["fa3-s128"][0]), "fa3", **AT)
    msg = str(e.value)
    assert "block_m=192, block_n=160" in msg and "scale_mode='exp2_offset'" in msg  # the declared policy in full
    assert "probe 'mass-512'" in msg and "1 of 9 rows outside" in msg
    assert "the kernel looks like scale = 128 (confidence 1); declared 256" in msg


@pytest.mark.parametrize("name", ["fa3-no-sinks", "fa3-s128"])
def test_a_preset_is_named_exactly_when_assert_policy_passes_on_the_same_probes(found, name):
    fp, fn = found[name], make_kernel(**KERNELS[name][0])
    for preset in POLICIES:
        try:
            assert_policy(fn, preset, sinks=fp.sinks.supported, diagnose=False, **AT)
            passed = True
        except AssertionError:
            passed = False
        assert passed == (preset == fp.policy), (preset, fp.policy, fp.distance[preset])


def test_the_fingerprint_names_a_preset_exactly_when_assert_policy_passes(found):
    fn = make_kernel(**KERNELS["reverse-s256-multiply"][0])
    for name in ("fa3", "flashinfer-hopper", "reverse-s256"):
        with pytest.raises(AssertionError):
            assert_policy(fn, name, diagnose=False, **AT)
    mine = {"order": "reverse", "scale": 256.0, "block_n": 128}
    assert_policy(fn, mine, **AT)  # a dict policy
    assert fingerprint(fn, candidates={"mine": mine, "fa3": "fa3"}, params=False, **AT).policy == "mine"


def test_every_failing_probe_is_summarised_and_a_dict_policy_is_given_in_full():
    fn = make_kernel(order="forward", scale=1.0, block_n=64)
    with pytest.raises(AssertionError) as e:
        assert_policy(fn, {"order": "forward", "scale": 256.0, "block_n": 64}, small=True)
    msg = str(e.value)
    assert "policy 'options' (order='forward', scale=256.0," in msg
    assert msg.count("\n  probe '") >= 3 and "the kernel looks like scale = 1 (confidence 1); declared 256" in msg


@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_probes_are_built_at_the_kernels_head_dimension_and_dtype(d, dtype):
    shape = Shape(d=d, dtype=dtype)
    probe = small_probes()[0]
    q, k, v, _ = probe.tensors(shape)
    assert q.shape[-1] == k.shape[-1] == v.shape[-1] == d and q.dtype == k.dtype == v.dtype == dtype

    def strict(q, k, v, *, sink_logit=None):  # refuses anything but its own shape and dtype, as real kernels do
        assert q.shape[-1] == d and q.dtype == dtype, (q.shape, q.dtype)
        return pcast.attention(q, k, v, policy="sage2", sink_logit=sink_logit, backend="emulator").out
    assert_policy(strict, "sage2", probes=small_probes()[:2], d=d, dtype=dtype)


def test_batched_grouped_query_causal_probes():
    shape = dict(batch=2, heads=4, kv_heads=2, causal=True)
    q, k, v, _ = small_probes()[0].tensors(Shape(**shape))
    assert q.shape[:2] == (2, 4) and k.shape[:2] == (2, 2) and k.shape[2] == q.shape[2] - 1 + 512

    def causal_box(q, k, v, *, sink_logit=None):
        return pcast.attention(q, k, v, policy="fa4", sink_logit=sink_logit, causal=True, causal_align="bottom_right",
                               backend="emulator").out
    probes = small_probes()[:3]
    assert_policy(causal_box, "fa4", probes=probes, **shape)

    def wrong_head(q, k, v, *, sink_logit=None):  # reads key/value head h % H_kv instead of h // (H / H_kv)
        k, v = k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1)
        return causal_box(q, k, v, sink_logit=sink_logit)
    with pytest.raises(AssertionError, match=r"of \(batch, head\) 1"):
        assert_policy(wrong_head, "fa4", probes=probes, diagnose=False, **shape)

    def top_left(q, k, v, *, sink_logit=None):  # a mask aligned top left: row i sees keys j <= i only
        return pcast.attention(q, k, v, policy="fa4", sink_logit=sink_logit, causal=True, causal_align="top_left",
                               backend="emulator").out
    with pytest.raises(AssertionError, match="probe .mass-512. .*: (6[5-9]|7[0-2]) of 72 rows outside"):
        assert_policy(top_left, "fa4", probes=probes[:1], diagnose=False, **shape)


def test_a_bad_layout_is_named():
    with pytest.raises(ValueError, match="d=100 is not allowed"):
        fingerprint(make_kernel(), d=100)
    with pytest.raises(ValueError, match="kv_heads=3 is not allowed"):
        fingerprint(make_kernel(), heads=4, kv_heads=3)
    with pytest.raises(ValueError, match="dtype='int8' is not allowed"):
        fingerprint(make_kernel(), dtype="int8")
    with pytest.raises(ValueError, match="allow=2 is not allowed"):
        fingerprint(make_kernel(), allow=2)


def test_presets_with_real_tiles_are_told_apart_from_their_power_of_two_neighbours():
    box = make_kernel(order="reverse", scale=256.0, scale_mode="exp2_offset", block_n=128)  # fa3's P path, 128 keys
    fp = fingerprint(box, candidates=["fa3", POLICIES["fa3"].replace(name="fa3-128", block_n=128)], params=False, **AT)
    assert fp.policy == "fa3-128" and fp.distance["fa3"] > 0
