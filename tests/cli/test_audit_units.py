"""The audit's Δ, σ, Δc and distance share one unit (logits) and one definition (Δ: the sinks' largest score above
the non-sink mean): heads built with exact scores, σ in {0.26, 1, 3}, 1 or 4 sink keys, Δ either side of the
crossing, forward S = 1 and S = 256. The sign of the distance must match the measured underflow fraction (above one
half: past the crossing)."""

import math

import pytest
import torch
from scipy.stats import norm

from pcast.audit.heads import audit_heads
from pcast.audit.verdicts import head_verdicts

N, ROWS, BLOCK = 512, 64, 64


def _head(delta, sigma, n_sinks, seed=0):
    """q = the identity rows, k[j, r] = row r's score of key j (sm_scale 1: the scores are exact). Non-sink scores
    N(0, σ²) centred per row; sink keys 0..n_sinks-1: the first at mean + Δ, the others below it (the measured Δ is
    their max), all inside the first KV block."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(ROWS, N, generator=g, dtype=torch.float64) * sigma
    s[:, n_sinks:] -= s[:, n_sinks:].mean(-1, keepdim=True)
    s[:, n_sinks:] *= sigma / s[:, n_sinks:].std(-1, keepdim=True)
    s[:, 0] = delta
    for j in range(1, n_sinks):
        s[:, j] = delta - 0.25 * j
    q = torch.eye(ROWS, dtype=torch.float32)[None, None]
    k = s.T.to(torch.float32).contiguous()[None, None]
    v = torch.randn(1, 1, N, ROWS, generator=g)
    return q, k, v


def _forward(q, k, v, scale, n_sinks, order="forward"):
    run = ("fwd", dict(order=order, scale=float(scale), fmt="e4m3fn", block_n=BLOCK, rowsum="unrounded"))
    _, heads = audit_heads(q, k, v, runs=[run], ksink=n_sinks, backend="emulator", sm_scale=1.0,
                           sinks={(0, 0): list(range(n_sinks))}, per_head=True)
    return heads[0]


CASES = [(sigma, n_sinks, scale, side) for sigma in (0.26, 1.0, 3.0) for n_sinks in (1, 4) for scale in (1, 256)
         for side in (-1.5, 1.5)]


@pytest.mark.parametrize("sigma, n_sinks, scale, side", CASES)
def test_the_sign_of_the_distance_is_the_side_of_one_half(sigma, n_sinks, scale, side):
    crossing = 10 * math.log(2) + math.log(scale)  # 6.93 + ln S, whatever σ and the number of sink keys
    delta = crossing + side * sigma
    hr = _forward(*_head(delta, sigma, n_sinks), scale, n_sinks)
    assert hr["delta"] == pytest.approx(delta, abs=1e-4)  # in logits, the max of the sink keys
    assert hr["sigma"] == pytest.approx(sigma, rel=1e-3)
    assert hr["delta_c"] == pytest.approx(crossing, abs=1e-3)
    assert hr["distance_to_delta_c"] == pytest.approx(crossing - delta, abs=1e-3)
    past = hr["distance_to_delta_c"] < 0
    if not past and crossing < sigma * math.sqrt(2 * math.log(N)):
        # outside the law's domain: the non-sink keys' own max (about σ·sqrt(2 ln n)) passes 6.93 + ln S, so more
        # than half round to zero from their spread, whatever the sink; reverse order (sink last) loses as much
        rev = _forward(*_head(delta, sigma, n_sinks), scale, n_sinks, order="reverse")
        assert hr["underflow_frac"] > 0.5 and rev["underflow_frac"] > 0.5, (hr, rev)
        return
    assert past == (hr["underflow_frac"] > 0.5), hr
    if sigma < 3:  # the sink stays every row's max: the fraction is Φ((Δ − Δc)/σ)
        assert abs(hr["underflow_frac"] - norm.cdf(side)) < 0.05, hr


def test_a_narrow_head_short_of_the_crossing_does_not_collapse():
    """σ = 0.26, Δ = 9, forward S = 256, one sink key: Δ/σ = 35 but Δ is 3.5 logits short of Δc = 12.48."""
    hr = _forward(*_head(9.0, 0.26, 1), 256, 1)
    assert hr["distance_to_delta_c"] == pytest.approx(10 * math.log(2) + math.log(256) - 9.0, abs=1e-3)
    assert hr["distance_to_delta_c"] > 0 and hr["underflow_frac"] == 0.0
    verdict = head_verdicts(hr, collapse_threshold=0.5, floor_factor=2.0)
    assert verdict["collapses"] is False


def test_the_why_line_speaks_in_logits():
    from pcast.audit.remedy import cause

    hr = _forward(*_head(9.0, 0.26, 1), 1, 1)
    full = dict(order="forward", scale=1.0)
    text = cause(hr, full, "collapse")
    assert "Δ = 9 is past Δc = 6.93" in text and "Δ/σ" not in text
