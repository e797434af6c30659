"""pcast.theory.decode against Monte Carlo and the emulator (fixed seeds; tolerances from the sample size).

Scores are set exactly: q is a one-hot row and sm_scale = 1, so a key's score is its first coordinate.
"""

import math

import numpy as np
import pytest
import torch

import pcast
from pcast.theory.collapse import critical_delta
from pcast.theory.decode import (init_underflow_fraction, meet_share, normal_range_scale, partition_rms_error,
                                   partition_underflow_fraction, round_to_format, split_critical_delta,
                                   split_underflow_fraction)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _rows(scores: torch.Tensor, d=16, seed=0):
    """q, k, v with one query row per head whose scores are ``scores`` [H, N] exactly (sm_scale = 1)."""
    h, n = scores.shape
    q = torch.zeros(1, h, 1, d)
    q[..., 0] = 1.0
    k = torch.randn(1, h, n, d, generator=torch.Generator().manual_seed(seed))
    k[..., 0] = scores
    v = torch.randn(1, h, n, d, generator=torch.Generator().manual_seed(seed + 1))
    return q, k, v


@pytest.mark.parametrize("n, S, sigma", [(256, 1.0, 1.0), (512, 1.0, 0.5), (256, 256.0, 1.0), (512, 256.0, 1.0)])
def test_partition_rms_error_matches_monte_carlo(n, S, sigma):
    """4000 partitions (about 1e6 keys): the pooled relative RMS error's sampling error is well under 3%."""
    s = torch.randn(4000, n, dtype=torch.float64, generator=torch.Generator().manual_seed(n + int(S))) * sigma
    x = (torch.softmax(s, -1) * S).float()
    q = pcast.quantize(x, "e4m3fn").double()
    x = x.double()
    mc = math.sqrt(float(((q - x) ** 2).sum() / (x ** 2).sum()))
    assert abs(mc / partition_rms_error(n, S, sigma) - 1) < 0.05


@pytest.mark.parametrize("n, S", [(256, 1.0), (256, 256.0), (128, 1.0)])
def test_partition_rms_error_matches_the_emulator(n, S):
    """One partition of n keys per row with V the identity (d = n), so the output is the emulator's own p_q / S;
    and the same call with fmt=None gives p: the pooled relative RMS error of 512 rows within 5% of theory."""
    scores = torch.randn(512, n, generator=torch.Generator().manual_seed(n + int(S)))
    q, k, _ = _rows(scores, d=n)
    v = torch.eye(n).expand(1, 512, n, n).contiguous()
    kw = dict(p_normalize="partition", block_n=min(n, 256), sm_scale=1.0, scale=S, backend="emulator")
    pq = pcast.attention(q, k, v, **kw).out.double() * S
    x = pcast.attention(q, k, v, fmt=None, **kw).out.double() * S
    rel = math.sqrt(float(((pq - x) ** 2).sum() / (x ** 2).sum()))
    assert abs(rel / partition_rms_error(n, S, 1.0) - 1) < 0.05, rel


def test_staircase_and_normal_range_scale():
    """S/n below 2^-6 sits on E4M3's subnormal staircase; normal_range_scale lifts it out."""
    assert normal_range_scale(256) == 4.0 and normal_range_scale(512) == 8.0
    assert partition_rms_error(512, 1.0) > 3 * partition_rms_error(512, normal_range_scale(512))
    x = np.array([2.0**-10, 3 * 2.0**-10, 2.0**-7 + 2.0**-10, 500.0])
    assert round_to_format(x).tolist() == [0.0, 2.0**-8, 2.0**-7, 448.0]  # ties to even, saturation


def test_meet_share_and_critical_delta():
    assert meet_share(8192, 64, 4, 1, "contiguous", "forward") == 1.0
    assert split_critical_delta(1.0, num_splits=1) == pytest.approx(critical_delta(1.0), abs=1e-9)
    for layout in ("contiguous", "interleaved"):
        assert meet_share(8192, 64, 4, 4, layout, "forward") == pytest.approx((2048 - 4) / 8188)
        assert meet_share(8192, 64, 4, 16, layout, "reverse") == pytest.approx(60 / 8188)
        assert math.isinf(split_critical_delta(256.0, num_splits=4, layout=layout))


@pytest.mark.parametrize("num_splits, layout, order", [(1, "contiguous", "forward"), (4, "contiguous", "forward"),
                                                       (4, "interleaved", "forward"), (16, "interleaved", "reverse"),
                                                       (16, "contiguous", "reverse")])
def test_split_underflow_fraction_matches_the_emulator(num_splits, layout, order):
    """64 decode rows of 8192 keys, four sink keys at Δ = 10 (S = 1, e4m3): the mean measured non-sink
    underflow fraction within 4 standard errors (plus 1e-3) of the exact theory."""
    g = torch.Generator().manual_seed(num_splits)
    scores = torch.randn(64, 8192, generator=g)
    scores[:, :4] += 10.0
    q, k, v = _rows(scores)
    r = pcast.attention(q, k, v, num_splits=num_splits, split_layout=layout, order=order, ksink=4, sm_scale=1.0,
                          backend="emulator")
    frac = (r.underflow.double() / r.terms.double()).flatten()
    want = split_underflow_fraction(10.0, 1.0, num_splits=num_splits, layout=layout, order=order, method="exact")
    se = float(frac.std()) / math.sqrt(frac.numel())
    assert abs(float(frac.mean()) - want) < 4 * se + 1e-3, (float(frac.mean()), want)


@pytest.mark.parametrize("num_splits, S, sink, delta", [(1, 256.0, "keys", 11.0), (4, 1.0, "keys", 8.0),
                                                        (16, 1.0, "logit", 10.0), (4, 256.0, "none", 0.0)])
def test_partition_underflow_fraction_matches_monte_carlo(num_splits, S, sink, delta):
    """100 rows of 8192 keys drawn in float64, each split normalised by its exact sum (four sink keys at Δ, or a
    logit Δ, in split 0), cast with pcast.quantize: the pooled fraction of non-sink zeros within 4 standard
    errors of the rows' spread, plus 0.01 for the model's mean-sum approximation."""
    g = torch.Generator().manual_seed(num_splits + int(S))
    rows, n, k = 100, 8192, 4 if sink == "keys" else 0
    s = torch.randn(rows, n, dtype=torch.float64, generator=g)
    if k:
        s[:, :k] += delta
    fracs = []
    c = n // num_splits  # contiguous splits of whole 64-key blocks
    for j in range(num_splits):
        part = s[:, j * c:(j + 1) * c]
        total = part.exp().sum(1, keepdim=True) + (math.exp(delta) if sink == "logit" and j == 0 else 0.0)
        x = (S * part.exp() / total).float()
        zero = pcast.quantize(x, "e4m3fn") == 0
        fracs.append(zero[:, k:].double().sum(1) if j == 0 else zero.double().sum(1))
    per_row = torch.stack(fracs).sum(0) / (n - k)
    want = partition_underflow_fraction(delta, S, num_splits=num_splits, k=max(k, 1), sink=sink)
    se = float(per_row.std()) / math.sqrt(rows)
    assert abs(float(per_row.mean()) - want) <= 4 * se + 0.01, (float(per_row.mean()), want)


def test_init_underflow_fraction_is_split_zeros_share_of_the_logit_law():
    from pcast.theory.collapse import critical_delta

    c = critical_delta(1.0, k=1)  # one deterministic sink: δ₁ = 0, so c itself
    assert init_underflow_fraction(c, 1.0, num_splits=1) == pytest.approx(0.5, abs=1e-9)
    assert init_underflow_fraction(30.0, 1.0, num_splits=4, layout="interleaved") == pytest.approx(0.25)
    assert init_underflow_fraction(30.0, 1.0, num_splits=16) == pytest.approx(1 / 16)
