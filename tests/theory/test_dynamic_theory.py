"""The dynamic-scale underflow law (pcast.theory.dynamic) against the emulator: a fixed-seed Monte Carlo with a
tolerance from the standard error over rows."""

import math

import pytest
import torch

import pcast
from pcast.probes.inputs import Probe
from pcast.theory.collapse import critical_delta, underflow_fraction
from pcast.theory.dynamic import critical_delta_dynamic, dynamic_threshold, underflow_fraction_dynamic

N, K, ROWS, CALLS = 1024, 4, 64, 3


def _measured(delta, mode, order, seed=7):
    """Per-row underflow fractions of the non-sink keys, emulator, rows of one-hot queries (the scores are the
    drawn logits exactly) in calls of 64 rows: one tile of 64 under tile_max."""
    g = torch.Generator().manual_seed(seed + int(delta * 10))
    fracs = []
    for _ in range(CALLS):
        logits = torch.randn(ROWS, N, generator=g)
        logits[:, :K] += delta
        q, k, v, _ = Probe("mc", "", "", logits).tensors()
        r = pcast.attention(q, k, v, scale_mode=mode, order=order, ksink=K, block_m=64, backend="emulator")
        fracs.append((r.underflow / r.terms).flatten())
    return torch.cat(fracs).double()


@pytest.mark.parametrize("mode", ["per_row", "tile_max"])
@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("delta", [6.0, 11.0, 12.0, 14.0])
def test_underflow_fraction_matches_the_emulator(mode, order, delta):
    f = _measured(delta, mode, order)
    mean, se = float(f.mean()), float(f.std()) / math.sqrt(f.numel())
    pred = underflow_fraction_dynamic(delta, mode, order, k=K, n=N, method="exact")
    assert abs(mean - pred) <= 4 * se + 2e-5, (mean, se, pred)


def test_dynamic_scales_confine_the_collapse_to_the_sink_block():
    """Forward static S = 256 collapses the whole row past its Δc; the dynamic modes never pass the sink
    block's share, and their Δc is the static law's at S = 448."""
    assert dynamic_threshold() == pytest.approx(math.log(448 * 1024))
    assert critical_delta_dynamic("tile_max", "forward") == critical_delta_dynamic("per_row", "reverse") \
        == pytest.approx(critical_delta(448.0))
    share = (64 - K) / (N - K)
    assert underflow_fraction_dynamic(30.0, "tile_max", "forward", k=K, n=N) <= share + 1e-12
    assert underflow_fraction(16.0, 256.0, k=K, n=N) > 0.9


def test_bad_mode_is_refused():
    with pytest.raises(ValueError, match="mode='multiply'"):
        underflow_fraction_dynamic(1.0, "multiply")
