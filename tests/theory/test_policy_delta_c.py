"""Δc of lazy and exp2-offset policies (pcast.theory.policy.critical_delta_policy) against the emulator: at the
predicted Δc, the emulator's non-sink underflow fraction is the eager law's expectation
(pcast.theory.underflow_fraction, method exact), within a tolerance from the sample size."""

import math

import pytest
import torch

import pcast
from pcast.models.sinks import make_inputs
from pcast.theory import critical_delta, underflow_fraction
from pcast.theory.policy import critical_delta_policy

N, D, HEADS, K, BLOCK = 256, 32, 16, 4, 64


@pytest.mark.parametrize("policy", [
    dict(scale=256.0, scale_mode="exp2_offset", rescale_threshold=8.0),  # FA3's offset 8 with a lazy τ = 8
    dict(scale=1.0, scale_mode="multiply", rescale_threshold=8.0),  # FA4's lazy τ = 8 at S = 1
    dict(scale=256.0, scale_mode="exp2_offset", rescale_threshold=0.0),  # eager, exp2 offset 8
])
def test_lazy_and_exp2_offset_delta_c_meets_the_emulator(policy):
    dc = critical_delta_policy(policy["scale"], k=K, order="forward", scale_mode=policy["scale_mode"],
                               rescale_threshold=policy["rescale_threshold"])
    assert dc == pytest.approx(critical_delta(policy["scale"], k=K), rel=1e-12)  # the eager law
    q, k, v = make_inputs(seed=11, heads=HEADS, n=N, d=D, ksink=K, delta=dc)
    r = pcast.attention(q, k, v, order="forward", ksink=K, block_n=BLOCK, backend="emulator", **policy)
    # the heads are independent samples (the rows of one head share its keys): their mean and its standard error
    per_head = (r.underflow.sum(-1).double() / r.terms.sum(-1).double()).reshape(-1)
    mean, se = float(per_head.mean()), float(per_head.std()) / math.sqrt(per_head.numel())
    want = underflow_fraction(dc, policy["scale"], k=K, order="forward", n=N, block_n=BLOCK, method="exact")
    assert abs(want - 0.5) < 0.05  # Δc is where about half underflow (leading order)
    assert abs(mean - want) <= 4 * se, (mean, want, se)


def test_a_delta_away_from_dc_is_told_apart():
    """The same check fails when Δ is off Δc by one sigma: the emulator's fraction moves by far more than 4 SE."""
    dc = critical_delta_policy(256.0, k=K, scale_mode="exp2_offset", rescale_threshold=8.0)
    q, k, v = make_inputs(seed=11, heads=HEADS, n=N, d=D, ksink=K, delta=dc + 1.0)
    r = pcast.attention(q, k, v, order="forward", ksink=K, block_n=BLOCK, backend="emulator", scale=256.0,
                        scale_mode="exp2_offset", rescale_threshold=8.0)
    per_head = (r.underflow.sum(-1).double() / r.terms.sum(-1).double()).reshape(-1)
    se = float(per_head.std()) / math.sqrt(per_head.numel())
    want = underflow_fraction(dc, 256.0, k=K, order="forward", n=N, block_n=BLOCK, method="exact")
    assert float(per_head.mean()) - want > 8 * se


def test_reverse_has_no_delta_c_and_bad_arguments_are_named():
    assert critical_delta_policy(256.0, order="reverse", rescale_threshold=8.0) is None
    with pytest.raises(ValueError, match="scale_mode"):
        critical_delta_policy(256.0, scale_mode="per_row")
    with pytest.raises(ValueError, match="order"):
        critical_delta_policy(256.0, order="sideways")
