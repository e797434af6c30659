"""Tests of the sink generator :mod:`pcast.models.sinks`.

Statistical tolerances are derived from the number of independent samples m:
* mean of m iid N(mu, s^2): standard error s / sqrt(m);
* sample variance of m iid normals: Var(s_hat^2) = 2 s^4 / (m - 1) (normal theory,
  (m-1) s_hat^2 / s^2 ~ chi^2_{m-1}), so SE = s^2 sqrt(2 / (m - 1)).
We allow 5 standard errors (two-sided false-alarm probability 5.7e-7 per check under the
normal approximation, which is accurate at these m >= 4000). Seeds are fixed, so the tests are
deterministic; the tolerances say they would also pass for almost every other seed.

Independence: scores of one fixed query over keys are iid; different (batch, head) slices are
independent. Different query rows of one slice share keys and are *not* independent, so each
statistical test uses one query row per slice.
"""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from pcast.models.sinks import apply_sink, make_base, make_inputs

Z = 5.0  # standard errors allowed


def scores(q, k):
    """q k^T / sqrt(d) in float64, [B, H, Nq, N]."""
    d = q.shape[-1]
    return torch.einsum("bhid,bhjd->bhij", q.double(), k.double()) / math.sqrt(d)


def first_row_scores(q, k):
    """Scores of query row 0 of every (batch, head) slice: [B*H, N], independent rows."""
    d = q.shape[-1]
    s = torch.einsum("bhd,bhjd->bhj", q[:, :, 0].double(), k.double()) / math.sqrt(d)
    return s.reshape(-1, k.shape[-2]).numpy()


def check_mean_var(x, mu, sigma, what):
    m = x.size
    se_mean = sigma / math.sqrt(m)
    se_var = sigma**2 * math.sqrt(2.0 / (m - 1))
    assert abs(x.mean() - mu) <= Z * se_mean, f"{what}: mean {x.mean():.5f} vs {mu} (tol {Z * se_mean:.5f})"
    assert abs(x.var(ddof=1) - sigma**2) <= Z * se_var, (
        f"{what}: var {x.var(ddof=1):.5f} vs {sigma**2} (tol {Z * se_var:.5f})")


# ---------------------------------------------------------------------------------------------
# exact sink offset


@pytest.mark.parametrize("d,delta,sigma", [(64, 8.0, 1.0), (32, 5.5, 0.5), (128, 13.0, 2.0), (16, -3.0, 1.0),
                                           (256, 16.0, 1.0)])
def test_sink_offset_exact_for_every_query(d, delta, sigma):
    ksink, n = 4, 96
    q0, k0, v0 = make_inputs(3, batch=2, heads=2, n=n, d=d, ksink=ksink, delta=0.0, sigma=sigma)
    q1, k1, v1 = make_inputs(3, batch=2, heads=2, n=n, d=d, ksink=ksink, delta=delta, sigma=sigma)
    s0, s1 = scores(q0, k0), scores(q1, k1)
    diff = (s1 - s0).numpy()
    assert np.all(np.abs(diff[..., :ksink] - delta) <= 1e-5), np.abs(diff[..., :ksink] - delta).max()
    assert np.all(diff[..., ksink:] == 0.0)
    # the offset comes from coordinate 0 alone: q[.., 0] * k[sink, 0] / sqrt(d) == delta
    off = (q1[..., :, 0:1].double() * k1[..., None, :ksink, 0].double()) / math.sqrt(d)
    assert torch.all((off - delta).abs() <= 1e-5)
    assert torch.all(q1[..., 0] == 1.0) and torch.all(k1[..., ksink:, 0] == 0.0)
    # queries and values are untouched by delta (sink_v_scale = 1)
    assert torch.equal(q0, q1) and torch.equal(v0, v1)


def test_query_tail_norm_is_exact():
    d = 64
    q, _, _ = make_base(11, batch=2, heads=3, n=200, d=d)
    norms = torch.linalg.vector_norm(q[..., 1:].double(), dim=-1)
    assert torch.all((norms - math.sqrt(d - 1)).abs() <= 1e-5)


def test_sink_v_scale_and_no_in_place_change():
    q, k, v = make_base(5, n=32, d=16, heads=2)
    qc, kc, vc = q.clone(), k.clone(), v.clone()
    q2, k2, v2 = apply_sink(q, k, v, ksink=3, delta=7.0, sink_v_scale=0.25)
    assert torch.equal(q, qc) and torch.equal(k, kc) and torch.equal(v, vc)
    assert torch.equal(v2[..., :3, :], v[..., :3, :] * 0.25)
    assert torch.equal(v2[..., 3:, :], v[..., 3:, :])
    assert torch.all(k2[..., :3, 0] == 7.0 * 4.0)
    assert torch.equal(k2[..., :, 1:], k[..., :, 1:]) and torch.equal(k2[..., 3:, :], k[..., 3:, :])
    assert q2 is not q and torch.equal(q2, q)


def test_ksink_zero_is_identity():
    base = make_base(8, n=40, d=32)
    out = apply_sink(*base, ksink=0, delta=9.0, sink_v_scale=3.0)
    for a, b in zip(base, out):
        assert torch.equal(a, b)


# ---------------------------------------------------------------------------------------------
# score distribution


@pytest.mark.parametrize("d", [16, 64])
def test_sink_and_nonsink_score_moments(d):
    # 256 independent slices x 128 sink / 128 non-sink keys of query row 0: m = 32768 each.
    # The relative variance tolerance 5 sqrt(2/32767) = 0.039 is below 1/16, so at d = 16 a key
    # scale missing its sqrt(d/(d-1)) factor would fail this test.
    delta, sigma, ksink = 3.0, 0.7, 128
    q, k, _ = make_inputs(20240601, batch=4, heads=64, n=256, d=d, ksink=ksink, delta=delta, sigma=sigma)
    s = first_row_scores(q, k)
    check_mean_var(s[:, :ksink].ravel(), delta, sigma, "sink scores")
    check_mean_var(s[:, ksink:].ravel(), 0.0, sigma, "non-sink scores")
    # distribution shape: KS test of the standardised scores against N(0,1); alpha = 1e-4
    for x, mu in ((s[:, :ksink].ravel(), delta), (s[:, ksink:].ravel(), 0.0)):
        assert stats.kstest((x - mu) / sigma, stats.norm.cdf).pvalue > 1e-4


@pytest.mark.parametrize("sigma,d", [(1.0, 64), (1.7, 128), (0.3, 16)])
def test_one_fixed_query_over_keys(sigma, d):
    # One query row, m = n - ksink = 6140 iid keys: the variance over keys is sigma^2.
    n, ksink = 6144, 4
    q, k, _ = make_inputs(99, n=n, d=d, ksink=ksink, delta=8.0, sigma=sigma)
    row = first_row_scores(q[:, :, 17:18], k)[0]  # an arbitrary fixed query (row 17)
    check_mean_var(row[ksink:], 0.0, sigma, f"row 17, sigma={sigma}")


def test_scale_across_slices_independent_queries():
    # The first query of independent slices: the pooled variance is sigma^2 (m = 512 * 60).
    q, k, _ = make_inputs(7, batch=8, heads=64, n=64, d=32, ksink=4, delta=0.0, sigma=1.3)
    s = first_row_scores(q, k)[:, 4:]
    check_mean_var(s.ravel(), 0.0, 1.3, "pooled slices")


# ---------------------------------------------------------------------------------------------
# determinism


def test_same_seed_same_bytes():
    kw = dict(batch=2, heads=3, n=130, d=64, ksink=5, delta=6.5, sigma=0.9, sink_v_scale=2.0)
    a = make_inputs(123, **kw)
    b = make_inputs(123, **kw)
    for x, y in zip(a, b):
        assert x.dtype == torch.float32 and x.device.type == "cpu" and x.shape == (2, 3, 130, 64)
        assert x.numpy().tobytes() == y.numpy().tobytes()


def test_global_rng_not_used_or_disturbed():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    a = make_inputs(1, n=16, d=16, ksink=2)
    after = torch.rand(3)
    assert torch.equal(expected, after)
    torch.manual_seed(12345)
    b = make_inputs(1, n=16, d=16, ksink=2)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_different_seeds_differ():
    a = make_inputs(1, n=64, d=16)
    b = make_inputs(2, n=64, d=16)
    for x, y in zip(a, b):
        assert x.numpy().tobytes() != y.numpy().tobytes()


def test_base_then_sink_equals_make_inputs():
    kw = dict(batch=1, heads=2, n=50, d=32)
    direct = make_inputs(4, ksink=3, delta=2.5, sigma=1.5, sink_v_scale=0.5, **kw)
    staged = apply_sink(*make_base(4, sigma=1.5, **kw), ksink=3, delta=2.5, sink_v_scale=0.5)
    for x, y in zip(direct, staged):
        assert x.numpy().tobytes() == y.numpy().tobytes()


# ---------------------------------------------------------------------------------------------
# validation


@pytest.mark.parametrize("kwargs,argname", [
    (dict(ksink=64, n=64), "ksink"),
    (dict(ksink=100, n=64), "ksink"),
    (dict(ksink=-1), "ksink"),
    (dict(ksink=2.0), "ksink"),
    (dict(sigma=0.0), "sigma"),
    (dict(sigma=-1.0), "sigma"),
    (dict(sigma=float("nan")), "sigma"),
    (dict(sigma=float("inf")), "sigma"),
    (dict(delta=float("nan")), "delta"),
    (dict(delta=float("inf")), "delta"),
    (dict(delta="8"), "delta"),
    (dict(delta=1 + 2j), "delta"),
    (dict(d=48), "d"),
    (dict(d=8), "d"),
    (dict(d=512), "d"),
    (dict(d=64.0), "d"),
    (dict(n=0), "n"),
    (dict(batch=0), "batch"),
    (dict(heads=0), "heads"),
    (dict(heads=1.5), "heads"),
    (dict(seed=-1), "seed"),
    (dict(seed=1.0), "seed"),
    (dict(seed=True), "seed"),
    (dict(seed="1"), "seed"),
    (dict(sink_v_scale=float("inf")), "sink_v_scale"),
    (dict(sink_v_scale=float("nan")), "sink_v_scale"),
])
def test_make_inputs_value_errors(kwargs, argname):
    kw = dict(seed=0, n=64, d=16)
    kw.update(kwargs)
    seed = kw.pop("seed")
    with pytest.raises(ValueError, match=argname):
        make_inputs(seed, **kw)


def test_apply_sink_value_errors():
    q, k, v = make_base(0, n=8, d=16)
    with pytest.raises(ValueError, match="ksink"):
        apply_sink(q, k, v, ksink=8)
    with pytest.raises(ValueError, match="delta"):
        apply_sink(q, k, v, delta=float("nan"))
    with pytest.raises(ValueError, match="sink_v_scale"):
        apply_sink(q, k, v, sink_v_scale=float("-inf"))
    with pytest.raises(ValueError, match="k must be"):
        apply_sink(q, k.double(), v)
    with pytest.raises(ValueError, match="shapes"):
        apply_sink(q, k, v[..., :4, :])


# ---------------------------------------------------------------------------------------------
# learned sink logits


def test_learned_sink_values_and_shape():
    from pcast.models.sinks import learned_sink

    t = learned_sink(8.5, batch=2, heads=3)
    assert t.dtype == torch.float32 and t.shape == (2, 3) and t.device.type == "cpu"
    assert torch.all(t == 8.5)
    assert learned_sink(-3).shape == (1, 1) and float(learned_sink(0.1)[0, 0]) == float(np.float32(0.1))
    # a logit, no key: it leaves the keys of make_inputs(ksink=0) as they are
    q, k, v = make_inputs(0, n=64, ksink=0, delta=8.0)
    q0, k0, v0 = make_base(0, n=64)
    assert torch.equal(k, k0) and torch.equal(v, v0) and torch.equal(q, q0)


@pytest.mark.parametrize("kwargs,argname", [
    (dict(delta=math.nan), "delta"), (dict(delta=math.inf), "delta"), (dict(delta=1e39), "delta"),
    (dict(delta="8"), "delta"), (dict(delta=True), "delta"), (dict(delta=1.0, batch=0), "batch"),
    (dict(delta=1.0, heads=2.0), "heads"), (dict(delta=1.0, heads=True), "heads"),
])
def test_learned_sink_value_errors(kwargs, argname):
    from pcast.models.sinks import learned_sink

    with pytest.raises(ValueError, match=argname):
        learned_sink(**kwargs)
