"""The probe inputs: their scores are the stated logits bit for bit, and what the emulator expects on them
agrees with values computed here by hand (float64, the FP8 grid written out)."""

import math

import pytest
import torch

from pcast.policies import POLICIES
from pcast.probes import PROBES, default_probes, exact, expected, make_probe
from pcast.probes.inputs import BOUNDARY_LENGTHS, UNIFORM_SIZES, boundary, learned_sink, mass, one_hot, uniform


@pytest.mark.parametrize("probe", [*default_probes(), *(boundary(n) for n in BOUNDARY_LENGTHS)], ids=lambda p: p.name)
def test_scores_are_the_logits_bit_for_bit(probe):
    q, k, v, _ = probe.tensors()
    d = q.shape[-1]
    s = (q[0, 0] @ k[0, 0].T) * (1.0 / math.sqrt(d))
    assert torch.equal(s, probe.logits)
    assert v.shape[-1] == d and bool((v[0, 0, :, 0] == 1).all())
    assert probe.purpose and probe.observable


def test_every_probe_name_builds_and_a_bad_name_is_refused():
    for name in PROBES:
        assert make_probe(name).name.startswith(name)
    with pytest.raises(ValueError, match="probe='massive' is not allowed"):
        make_probe("massive")


@pytest.mark.parametrize("name", list(POLICIES))
def test_one_hot_returns_the_hot_keys_value_under_every_preset(name):
    probe = one_hot()
    _, _, v, _ = probe.tensors()
    hot = probe.logits.argmax(dim=1)
    # far keys visited before the hot one are cast against their own max, then weighted by exp(-60)
    got = expected(probe, name).out[0, 0]
    assert torch.allclose(got, v[0, 0, hot], rtol=0, atol=probe.shape[1] * math.exp(-60.0))


def test_mass_probe_matches_hand_computed_fp8_values():
    probe = mass(2048, depths=(7.0,))
    e7 = math.exp(-7.0)
    unscaled = expected(probe, "forward-s1").out[0, 0, 0, 0].item()  # exp(-7) < 2^-10 rounds to 0 in E4M3
    assert unscaled == pytest.approx(1 / (1 + 2047 * e7), rel=1e-6)
    # S = 448: x = 448·exp(-7) = 0.4085 lies in [0.25, 0.5), where E4M3's step is 2^-5: it rounds to 13·2^-5
    scaled = expected(probe, {"order": "forward", "scale": 448.0}).out[0, 0, 0, 0].item()
    assert scaled == pytest.approx((448 + 2047 * 13 / 32) / (448 * (1 + 2047 * e7)), rel=1e-6)
    assert exact(probe)[0, 0].item() == pytest.approx(1.0, abs=1e-12)


def test_learned_sink_init_and_final_match_hand_values():
    n, sigma = 256, 6.0
    probe = learned_sink(n, sigma, depths=(0.0,))
    final = expected(probe, "forward-s1").out[0, 0, 0, 0].item()  # P = 1 exact; the sink joins l at the end
    assert final == pytest.approx(n / (n + math.exp(sigma)), rel=1e-6)
    # init: the max starts at sigma, P = exp(-6) = 1.27·2^-9 rounds to 2^-9; l starts at the sink's 1
    init = expected(probe, "vllm-unified-1c98a49").out[0, 0, 0, 0].item()
    assert init == pytest.approx(n * 2.0 ** -9 / (1 + n * math.exp(-sigma)), rel=1e-6)


@pytest.mark.parametrize("n", [UNIFORM_SIZES[0], UNIFORM_SIZES[-1]])
def test_uniform_gives_the_mean_of_v_up_to_131072_keys(n):
    probe = uniform(n)
    _, _, v, _ = probe.tensors()
    mean = v[0, 0].double().mean(dim=0)
    assert torch.allclose(exact(probe)[0].double(), mean, atol=1e-12)
    got = expected(probe, "fa3").out[0, 0, 0].double()
    assert torch.allclose(got, mean, atol=n * 2.0 ** -24)


@pytest.mark.parametrize("n, alone", [(128, False), (129, True)])
def test_a_max_alone_in_its_block_is_seen_late_by_a_lazy_rescaling_kernel(n, alone):
    # FA4 with the pre-fix FP8 offset (S = 256, tau = 4, 128-key blocks), the last key lifted by 2 log2
    # units. Reverse order visits the last block first, so its max is right from the start: nothing
    # saturates. Forward order at n = 129 finds the lifted key alone in a second block, 2 < tau above the
    # stale max: it is cast at 256·2^2 = 1024 > 448 and saturates. At n = 128 it shares the only block.
    pol = dict(POLICIES["fa4"].attention_kwargs(), scale=256.0, rescale_threshold=4.0)
    assert int(expected(boundary(n, lifts=(2.0,)), pol).saturated.sum()) == 0
    fwd = expected(boundary(n, lifts=(2.0,)), dict(pol, order="forward"))
    assert int(fwd.saturated.sum()) == int(alone)


def test_diagnostics_come_with_the_expected_output():
    probe = mass(2048, depths=(7.0, 9.0))
    r = expected(probe, "forward-s1")
    assert r.underflow[0, 0].tolist() == [2047, 2047] and r.terms[0, 0].tolist() == [2048, 2048]
    assert expected(probe, "fa3").underflow[0, 0].tolist() == [0, 0]  # 256·exp(-9) = 0.0316 is normal


def test_decode_tiles_interleaved_splits_gather_the_lifted_tiles_hand_values():
    # tiles of 64 keys, every fourth (index 1 mod 4) lifted by 3; forward order, S = 1, E4M3, 64-key blocks
    probe = make_probe("decode-tiles", 2048, levels=(3.0,), patterns=((4, 1),))
    opts = dict(order="forward", scale=1.0, block_n=64, num_splits=4)
    # interleaved: split 1 holds only the lifted tiles, the others only unlifted ones: every P = 1, exact
    inter = expected(probe, dict(opts, split_layout="interleaved")).out[0, 0, 0].double()
    assert torch.allclose(inter, exact(probe)[0].double(), atol=1e-6)
    # contiguous: each split of 8 tiles starts with an unlifted tile (P = 1, then rescaled by a = e^-3); its
    # other 5 unlifted tiles are cast at e^-3 = 12.74·2^-8, rounded to 13·2^-8; the two lifted tiles give P = 1
    a = math.exp(-3.0)
    want = (64 * a + 128 + 5 * 64 * 13 / 256) / (64 * a + 128 + 5 * 64 * a)
    got = expected(probe, dict(opts, split_layout="contiguous")).out[0, 0, 0, 0].item()
    assert got == pytest.approx(want, rel=1e-6) and got > 1.002


def test_decode_sink_collapses_only_the_keys_its_split_visits_after_it():
    # a sink 8 above 4,095 keys at 0, just after the middle; forward order, S = 1: e^-8 < 2^-10 rounds to 0
    probe = make_probe("decode-sink", 4096, depths=(0.0,), positions=(4096 // 2 + 1,))
    one = expected(probe, {"order": "forward", "block_n": 64}).underflow[0, 0, 0].item()
    four = expected(probe, {"order": "forward", "block_n": 64, "num_splits": 4}).underflow[0, 0, 0].item()
    # one pass: every key of the sink's block (2048..2111) and after it, but the sink itself
    assert one == 4096 - 2048 - 1
    # four contiguous splits of 1,024 keys: only split 2 (keys 2048..3071) meets the sink; the rest keep P = 1
    assert four == 1024 - 1
