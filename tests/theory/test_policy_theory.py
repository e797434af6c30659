"""Tests of :mod:`pcast.theory.policy`: closed-form special cases, Monte Carlo of each model
(written here, independently of the integrals), and the init-mode and lazy-rescaling laws
against the emulator of :func:`pcast.attention`.

Tolerances. Monte Carlo of a model draws R independent rows; a row's fraction is an average
over its keys, so the rows are iid and the SE of their mean is ``sd(row fractions)/sqrt(R)``;
we take the larger of that and the binomial SE ``sqrt(p(1-p)/(R·n))`` (keys as if independent:
correlation within a row only inflates the SE) and allow 5 SE (two-sided false alarm 6e-7 per
check under the normal approximation). The emulator's independent units are (seed, head) slices
(rows of one slice share keys); with U units we allow ``t_{U-1}`` at two-sided 1e-4 times the
SE between units, as tests/theory/test_theory.py does. Seeds are fixed: every run is the same.
"""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy import integrate, stats
from scipy.stats import multivariate_normal, norm

import pcast
from pcast.theory import lazy as lazy_theory
from pcast.contract import log2_scale
from pcast.formats import FORMATS, get_format
from pcast.theory.policy import (best_lazy_scale, exp2_offset_scale, max_safe_tau, saturation_fraction,
                                   underflow_fraction_init, v_cast_floor, v_rounding_mse)
from pcast.models.sinks import learned_sink, make_base, make_inputs
from pcast.theory import log_threshold, optimal_scale, underflow_fraction

from loop_contract import loop_attention

LN2 = math.log(2.0)
Z = 5.0


def check_mc(theory, row_fracs, n):
    """|mean - theory| <= 5 SE, SE = max(between rows, binomial); returns the SE."""
    R = row_fracs.size
    p = min(max(theory, 1e-12), 1 - 1e-12)
    se = max(row_fracs.std(ddof=1) / math.sqrt(R), math.sqrt(p * (1 - p) / (R * n)))
    assert abs(row_fracs.mean() - theory) <= Z * se, (row_fracs.mean(), theory, se)
    return se


def walk(scores, block_n, order, m0, tau, visit_block):
    """The block walk of step 2 on [rows, n] scores: m starts at m0, moves to a block's max B when
    m is -inf or B - m > tau·ln 2; ``visit_block(block scores, m)`` returns per-row counts."""
    n = scores.shape[1]
    starts = list(range(0, n, block_n))
    m, count = m0.copy(), np.zeros(scores.shape[0])
    for lo in (starts if order == "forward" else starts[::-1]):
        blk = scores[:, lo:lo + block_n]
        bm = blk.max(1)
        m = np.where(np.isneginf(m) | (bm - m > tau * LN2), bm, m)
        count += visit_block(blk, m)
    return count / n


# ---------------------------------------------------------------------------------------------
# underflow_fraction_init


def simulate_init(delta, S, fmt="e4m3fn", sigma=1.0, n=1024, block_n=64, order="forward", rows=3000, seed=0):
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((rows, n)) * sigma
    thr = get_format(fmt).underflow_threshold
    return walk(s, block_n, order, np.full(rows, float(delta)), 0.0,
                lambda blk, m: (S * np.exp(blk - m[:, None]) <= thr).sum(1))


def test_init_leading_is_phi_and_a_lower_bound():
    for delta, S, sigma, fmt in [(6.0, 1.0, 1.0, "e4m3fn"), (12.0, 256.0, 1.5, "e4m3fn"), (14.0, 2.0, 0.7, "e5m2")]:
        c = log_threshold(fmt) + math.log(S)
        lead = underflow_fraction_init(delta, S, fmt, sigma)
        assert lead == pytest.approx(norm.cdf((delta - c) / sigma), rel=1e-12)
        ex = underflow_fraction_init(delta, S, fmt, sigma, method="exact")
        assert lead <= ex <= lead + 1e-3


@pytest.mark.parametrize("x", [-12.0, -3.0, 0.0, 1.5])
def test_init_exact_two_keys_bivariate(x):
    # n = 2 in one block: key 0 underflows iff Z0 <= max(D, Z1) - u. With X = -Z0, Y = Z1 - Z0
    # (var 1, 2, cov 1): P = 1 - P(X < u - D, Y < u), a bivariate normal CDF.
    sigma, S = 1.2, 4.0
    u = (log_threshold() + math.log(S)) / sigma
    D = u + x
    want = 1 - multivariate_normal(mean=[0, 0], cov=[[1, 1], [1, 2]]).cdf([u - D, u])
    got = underflow_fraction_init(D * sigma, S, sigma=sigma, n=2, block_n=2, method="exact")
    assert got == pytest.approx(want, abs=2e-6)
    one = underflow_fraction_init(D * sigma, S, sigma=sigma, n=1, method="exact")  # alone: only Δ
    assert one == pytest.approx(norm.cdf(x), rel=1e-10)


def test_init_exact_without_sink_is_the_sink_free_law():
    # Δ far below every score: the seed never wins and the walk is pcast.theory's with no sink.
    for order, n, block_n, S in [("forward", 1024, 64, 1.0), ("reverse", 1000, 32, 4.0)]:
        got = underflow_fraction_init(-60.0, S, n=n, block_n=block_n, order=order, method="exact")
        free = underflow_fraction(0.0, S, k=0, n=n, block_n=block_n, order=order, method="exact")
        assert got == pytest.approx(free, rel=1e-7)


def test_init_limits_and_shape():
    deltas = np.linspace(-5, 25, 13)
    fw = underflow_fraction_init(deltas, 1.0, method="exact")
    assert fw.shape == deltas.shape and np.all(np.diff(fw) >= -1e-15) and fw[-1] > 1 - 1e-9
    assert np.all(np.diff(fw[3:8]) > 0)  # strictly increasing where the seed decides (Δ near c)
    # the seed acts in both orders; with whole blocks both walks meet the same multiset of maxima
    rv = underflow_fraction_init(deltas, 1.0, order="reverse", method="exact")
    assert np.allclose(fw, rv, rtol=1e-9, atol=0)
    assert underflow_fraction_init(3.0, 2.0**-11) == 1.0 == underflow_fraction_init(3.0, 2.0**-11, method="exact")


INIT_MC = [  # (delta, S, fmt, sigma, n, block_n, order)
    (6.0, 1.0, "e4m3fn", 1.0, 1024, 64, "forward"),
    (3.0, 1.0, "e4m3fn", 1.0, 1024, 64, "reverse"),  # the keys' own maxima matter: exact > leading
    (12.0, 256.0, "e4m3fn", 1.0, 1024, 64, "reverse"),
    (9.0, 16.0, "e4m3fn", 1.5, 1000, 32, "reverse"),  # ragged last block
    (14.0, 1.0, "e5m2", 1.0, 512, 128, "forward"),
]


@pytest.mark.parametrize("case", INIT_MC, ids=lambda c: f"{c[6]}-d{c[0]}-S{c[1]:g}-{c[2]}-s{c[3]}-n{c[4]}")
def test_init_exact_matches_monte_carlo(case):
    delta, S, fmt, sigma, n, block_n, order = case
    ex = underflow_fraction_init(delta, S, fmt, sigma, n=n, block_n=block_n, order=order, method="exact")
    se = check_mc(ex, simulate_init(delta, S, fmt, sigma, n, block_n, order, seed=11), n)
    assert se < 0.01


# ---------------------------------------------------------------------------------------------
# saturation_fraction


def simulate_saturation(tau, S, sigma=1.0, n=1024, block_n=64, order="forward", delta=None, kind="keys", k=4,
                        rows=3000, seed=0):
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((rows, n)) * sigma
    if delta is not None and kind == "keys":
        s[:, :k] += delta
    m0 = np.full(rows, float(delta) if delta is not None and kind == "logit" else -np.inf)
    top = get_format("e4m3fn").max_finite
    return walk(s, block_n, order, m0, tau, lambda blk, m: (S * np.exp(blk - m[:, None]) > top).sum(1))


SAT_MC = [  # (tau, S, sigma, n, block_n, order, delta, kind, k)
    (8.0, 256.0, 1.0, 1024, 64, "forward", None, "keys", 4),  # FA4's τ with S = 256
    (1.0, 256.0, 1.0, 1024, 64, "forward", None, "keys", 4),  # frequent moves
    (2.0, 256.0, 2.0, 1000, 32, "reverse", None, "keys", 4),
    (8.0, 256.0, 1.0, 1024, 64, "reverse", 3.0, "keys", 4),  # stale sink block saturates its sinks
    (8.0, 256.0, 1.0, 1024, 64, "forward", 2.0, "logit", 0),
    (1.0, 256.0, 1.0, 1024, 64, "reverse", 2.5, "logit", 0),
    (0.5, 600.0, 1.0, 1024, 64, "forward", None, "keys", 4),  # S > max_finite: the max's neighbours too
    (0.0, 600.0, 1.0, 200, 16, "reverse", 1.0, "keys", 2),
]


@pytest.mark.parametrize("case", SAT_MC, ids=lambda c: f"t{c[0]}-S{c[1]:g}-s{c[2]}-{c[5]}-{c[7]}{c[6]}")
def test_saturation_matches_monte_carlo(case):
    tau, S, sigma, n, block_n, order, delta, kind, k = case
    th = saturation_fraction(tau, S, sigma=sigma, n=n, block_n=block_n, order=order, delta=delta,
                             sink_kind=kind, ksink=max(k, 1))
    se = check_mc(th, simulate_saturation(tau, S, sigma, n, block_n, order, delta, kind, k, seed=5), n)
    assert th > 5 * se  # the check has teeth: eager rescaling (0 saturation) would fail it


def test_saturation_never_moving_max_closed_forms():
    # τ huge: the max never moves after the first block. No sink, forward: every later key meets
    # the max M0 of block 0, so the fraction is (n - b)/n · E[Phi(-(M0 + h))], M0 ~ max of b normals.
    h = math.log(448 / 256)
    b, n = 64, 1024
    dens = lambda m: b * norm.pdf(m) * norm.cdf(m) ** (b - 1) * norm.sf(m + h)  # noqa: E731
    want = (n - b) / n * integrate.quad(dens, -12, 12, limit=200)[0]
    assert saturation_fraction(100.0, 256.0) == pytest.approx(want, rel=1e-4)
    # a seeding logit Δ never left: every key saturates iff s > Δ + h
    for delta in (0.5, 2.0):
        got = saturation_fraction(100.0, 256.0, delta=delta, sink_kind="logit", order="reverse")
        assert got == pytest.approx(norm.sf(delta + h), rel=1e-4)


def test_saturation_zero_where_no_key_can_exceed_max():
    for tau in (0.0, 0.5, 8.0, 11.3):
        S = best_lazy_scale(tau)
        assert saturation_fraction(tau, S) == 0.0 and saturation_fraction(tau, S, delta=2.0) == 0.0
        assert saturation_fraction(tau + 1.0, S) > 0.0  # one more octave of staleness saturates
    assert saturation_fraction(0.0, 448.0) == 0.0  # eager: x <= S = max_finite
    # exp2_offset with S = 448 applies 448.0000016, 448.0 in float32: no saturation either, but for the
    # float32 overshoot of a max above 17.19 (test_exp2_offset_overshoot_*): a 1e-14 event for N(0, 1)
    # scores without a sink
    assert 0.0 < saturation_fraction(0.0, 448.0, scale_mode="exp2_offset") < 1e-12
    assert saturation_fraction(8.0, 256.0, scale_mode="exp2_offset") == saturation_fraction(8.0, 256.0)


def test_saturation_grid_is_converged(monkeypatch):
    cases = [dict(tau=8.0, scale=256.0, delta=3.0, order="reverse"), dict(tau=0.5, scale=600.0),
             dict(tau=1.0, scale=256.0, delta=2.5, sink_kind="logit")]
    coarse = [saturation_fraction(**c) for c in cases]
    monkeypatch.setattr(lazy_theory, "_STEP", lazy_theory._STEP / 4)
    fine = [saturation_fraction(**c) for c in cases]
    assert np.allclose(coarse, fine, rtol=1e-4, atol=0)
    assert saturation_fraction(1.0, 256.0, delta=[2.0, 3.0]).shape == (2,)


# ---------------------------------------------------------------------------------------------
# scales


@pytest.mark.parametrize("name", list(FORMATS))
def test_best_lazy_scale_and_max_safe_tau(name):
    top = get_format(name).max_finite
    assert best_lazy_scale(0.0, name) == optimal_scale(name)
    for tau in np.linspace(0.0, 20.0, 401):
        S = best_lazy_scale(float(tau), name)
        assert math.frexp(S)[0] == 0.5  # a power of two
        assert S * 2.0**tau <= top < 2 * S * 2.0**tau
        assert max_safe_tau(S, name) >= tau
    for e in range(-3, 9):
        S = 2.0**e
        if S <= top:
            assert best_lazy_scale(max_safe_tau(S, name), name) == S  # the boundary τ keeps its S


def test_scale_values():
    assert best_lazy_scale(8.0) == 1.0  # FA4: 256·2^8 = 65536 > 448, 1·2^8 = 256 <= 448
    assert best_lazy_scale(9.0) == 0.5 and best_lazy_scale(0.807) == 256.0 and best_lazy_scale(0.808) == 128.0
    assert max_safe_tau(256.0) == pytest.approx(math.log2(1.75), abs=1e-15)
    assert max_safe_tau(1.0) == pytest.approx(math.log2(448), abs=1e-15)
    assert max_safe_tau(896.0) == pytest.approx(-1.0, abs=1e-15)


def test_exp2_offset_scale():
    for e in range(-20, 30):
        assert exp2_offset_scale(2.0**e) == 2.0**e
    # 448: the float32 exponent, computed here with numpy's float32
    e32 = float(np.float32(np.log2(448.0)))
    assert exp2_offset_scale(448.0) == 2.0**e32 == 448.0000015543216
    assert (exp2_offset_scale(448.0) - 448) / 448 == pytest.approx(3.4694678875877928e-09, rel=1e-6)
    # the float32 x the kernel gets at s = m: torch's exp2 of the float32 offset, within one ulp
    S = np.array([448.0, 300.0, 240.0, 100.0, 3.0, 1e4])
    x = torch.exp2(torch.tensor([log2_scale(float(s)) for s in S], dtype=torch.float32)).double().numpy()
    applied = exp2_offset_scale(S)
    assert np.all(np.abs(x - applied) <= np.spacing(applied.astype(np.float32)).astype(float))
    assert np.all(np.abs(applied - S) / S <= 2.0**-24 * np.log2(S) * LN2)


# ---------------------------------------------------------------------------------------------
# v_cast_floor


def cast_v(v, fmt, v_scale="tensor"):
    """The operand cast written here: s = float32 amax / max per (batch, head); pcast.quantize."""
    top = get_format(fmt).max_finite
    if v_scale == "tensor":
        s = (v.abs().amax(dim=(-2, -1), keepdim=True) / torch.tensor(top, dtype=torch.float32))
    else:
        s = torch.tensor(v_scale, dtype=torch.float32)
    return pcast.quantize(v / s, fmt) * s


@pytest.mark.parametrize("fmt,n,d,v_scale", [("e4m3fn", 512, 64, "tensor"), ("e5m2", 256, 32, "tensor"),
                                             ("e4m3fn", 256, 16, 0.008), ("e4m3fnuz", 128, 64, 0.02)])
def test_v_rounding_mse_matches_monte_carlo(fmt, n, d, v_scale):
    # Heads are independent: SE = sd(per-head mean e^2) / sqrt(heads). 0.008·448 = 3.6: some saturate.
    g = torch.Generator().manual_seed(3)
    v = torch.randn(96, 1, n, d, generator=g, dtype=torch.float64).float()
    e2 = (cast_v(v, fmt, v_scale).double() - v.double()).square().mean(dim=(1, 2, 3)).numpy()
    se = e2.std(ddof=1) / math.sqrt(e2.size)
    th = v_rounding_mse(fmt, n=n, d=d, v_scale=v_scale)
    assert abs(e2.mean() - th) <= Z * se, (e2.mean(), th, se)
    assert se < 0.01 * th


def test_v_cast_floor_of_the_attention_output():
    # Weights from a softmax with a strong sink column; out error = W e. Independent heads.
    g = torch.Generator().manual_seed(4)
    H, nq, n, d = 48, 64, 256, 64
    s = torch.randn(H, 1, nq, n, generator=g, dtype=torch.float64)
    s[..., :2] += 6.0
    w = torch.softmax(s, -1)
    v = torch.randn(H, 1, n, d, generator=g, dtype=torch.float64).float()
    ref = w @ v.double()
    err = w @ (cast_v(v, "e4m3fn").double() - v.double())
    mse, ref2 = err.square().mean(dim=(1, 2, 3)).numpy(), ref.square().mean(dim=(1, 2, 3)).numpy()
    w2 = w.square().sum(-1).numpy()
    absolute = np.array([v_cast_floor(w2[h], n=n, d=d, relative=False) for h in range(H)])
    ratio = mse / absolute  # 1 in expectation, per head
    assert abs(ratio.mean() - 1) <= Z * ratio.std(ddof=1) / math.sqrt(H)
    rel = mse.mean() / ref2.mean()  # the pipeline's rel_mse over all heads
    assert rel == pytest.approx(v_cast_floor(w2, n=n, d=d), rel=Z * ratio.std(ddof=1) / math.sqrt(H))
    assert v_cast_floor(0.3) == v_cast_floor(0.01) == v_rounding_mse()  # relative: weight-free


# ---------------------------------------------------------------------------------------------
# argument checks


@pytest.mark.parametrize("call,argname", [
    (lambda: underflow_fraction_init(6.0, 1.0, method="mean"), "method"),
    (lambda: underflow_fraction_init(6.0, 1.0, order="backward"), "order"),
    (lambda: underflow_fraction_init(6.0, 0.0), "scale"),
    (lambda: underflow_fraction_init(6.0, 1.0, "e3m4"), "fmt"),
    (lambda: underflow_fraction_init(6.0, 1.0, sigma=-1.0), "sigma"),
    (lambda: underflow_fraction_init(6.0, 1.0, n=0), "n"),
    (lambda: underflow_fraction_init(6.0, 1.0, block_n=2.5), "block_n"),
    (lambda: underflow_fraction_init([6.0, math.nan], 1.0), "delta"),
    (lambda: saturation_fraction(-1.0, 256.0), "tau"),
    (lambda: saturation_fraction(math.inf, 256.0), "tau"),
    (lambda: saturation_fraction(True, 256.0), "tau"),
    (lambda: saturation_fraction(8.0, -2.0), "scale"),
    (lambda: saturation_fraction(8.0, 256.0, "fp8"), "fmt"),
    (lambda: saturation_fraction(8.0, 256.0, order="sideways"), "order"),
    (lambda: saturation_fraction(8.0, 256.0, scale_mode="add"), "scale_mode"),
    (lambda: saturation_fraction(8.0, 256.0, sink_kind="value"), "sink_kind"),
    (lambda: saturation_fraction(8.0, 256.0, delta=3.0, ksink=0), "ksink"),
    (lambda: saturation_fraction(8.0, 256.0, delta=3.0, ksink=65), "ksink"),
    (lambda: saturation_fraction(8.0, 256.0, delta="x"), "delta"),
    (lambda: saturation_fraction(8.0, 256.0, n=0), "n"),
    (lambda: best_lazy_scale(-0.5), "tau"),
    (lambda: best_lazy_scale(1.0, "e4m3"), "fmt"),
    (lambda: max_safe_tau(0.0), "scale"),
    (lambda: exp2_offset_scale(-1.0), "scale"),
    (lambda: exp2_offset_scale([1.0, math.inf]), "scale"),
    (lambda: v_rounding_mse("bf16"), "v_fmt"),
    (lambda: v_rounding_mse(n=0), "n"),
    (lambda: v_rounding_mse(v_scale="row"), "v_scale"),
    (lambda: v_rounding_mse(v_scale=0.0), "v_scale"),
    (lambda: v_cast_floor(0.0), "weights_sq_sum"),
    (lambda: v_cast_floor([0.1, math.nan]), "weights_sq_sum"),
    (lambda: v_cast_floor(0.1, relative="yes"), "relative"),
])
def test_value_errors(call, argname):
    with pytest.raises(ValueError, match=argname):
        call()


# ---------------------------------------------------------------------------------------------
# the emulator of pcast.attention: each law against the kernel contract's semantics


def t_crit(U):
    return stats.t.ppf(1 - 1e-4 / 2, U - 1)


def emulator_units(inputs, seeds, heads, what, float32_decisions=False, **kw):
    """Per (seed, head) fraction ``what`` of the emulator's diagnostics, over all query rows; with
    ``float32_decisions``, of the loop oracle's (a kernel's float32 decisions, not the exact ones)."""
    units = []
    for seed in seeds:
        q, k, v = inputs(seed)
        if float32_decisions:
            r = SimpleNamespace(**loop_attention(q, k, v, **kw)[1])
        else:
            r = pcast.attention(q, k, v, backend="emulator", **kw)
            assert r.backend == "emulator"
        num = getattr(r, what)[0].sum(-1).double()
        den = (r.terms[0] + r.terms_sink[0]).sum(-1).double()
        assert torch.all(den == q.shape[2] * k.shape[2])  # every key has a positive unrounded value
        units.extend((num / den).tolist())
    return np.array(units)


@pytest.mark.parametrize("delta,S,order", [(4.0, 1.0, "forward"), (7.0, 1.0, "reverse"), (12.0, 256.0, "reverse")])
def test_emulator_init_mode_matches_law(delta, S, order, one_thread):
    seeds, heads, n = (0, 1), 8, 1024
    sink = learned_sink(delta, heads=heads)
    units = emulator_units(lambda s: make_base(s, heads=heads, n=n), seeds, heads, "underflow", order=order,
                           scale=S, sink_logit=sink, sink_mode="init")
    U, measured = units.size, units.mean()
    tol = t_crit(U) * max(units.std(ddof=1), 1e-12) / math.sqrt(U)
    ex = underflow_fraction_init(delta, S, order=order, method="exact")
    assert abs(measured - ex) <= tol, (measured, ex, tol)
    # teeth: a final-mode sink (the keys never meet it) predicts the sink-free rate, far away
    free = underflow_fraction(0.0, S, k=0, order=order, method="exact")
    assert abs(ex - free) > 20 * tol


@pytest.mark.parametrize("tau,order,delta,kind", [(8.0, "forward", None, "keys"), (1.0, "reverse", None, "keys"),
                                                  (8.0, "reverse", 3.0, "keys"), (8.0, "forward", 2.0, "logit")])
def test_emulator_lazy_saturation_matches_law(tau, order, delta, kind, one_thread):
    seeds, heads, n, S = (0, 1), 8, 1024, 256.0
    kw = dict(order=order, scale=S, rescale_threshold=tau)
    if kind == "logit":
        kw.update(sink_logit=learned_sink(delta, heads=heads), sink_mode="init")
    ksink = 4 if (kind == "keys" and delta is not None) else 0
    units = emulator_units(lambda s: make_inputs(s, heads=heads, n=n, ksink=ksink, delta=delta or 0.0), seeds,
                           heads, "saturated", ksink=ksink, **kw)
    U, measured = units.size, units.mean()
    tol = t_crit(U) * max(units.std(ddof=1), 1e-12) / math.sqrt(U)
    th = saturation_fraction(tau, S, n=n, order=order, delta=delta, sink_kind=kind)
    assert abs(measured - th) <= tol, (measured, th, tol)
    assert th > 5 * tol  # eager rescaling saturates nothing at S = 256: it would fail
    if tau == 1.0:  # τ read in natural units instead of log2 units would fail too
        assert abs(saturation_fraction(tau / LN2, S, n=n, order=order) - th) > 5 * tol


def test_emulator_v_cast_floor_matches_law(one_thread):
    # fmt=None: P unrounded, so the whole error is the V cast; units (seed, head), rel_mse per unit
    # as the pipeline computes it (mse / mean(reference^2)).
    from pcast.reference import reference_attention

    units = []
    for seed in (0, 1):
        q, k, v = make_base(seed, heads=8, n=1024)
        r = pcast.attention(q, k, v, backend="emulator", fmt=None, v_fmt="e4m3fn")
        ref = reference_attention(q, k, v)
        units += ((r.out.double() - ref).square().mean(dim=(2, 3)) / ref.square().mean(dim=(2, 3)))[0].tolist()
    units = np.array(units)
    tol = t_crit(units.size) * units.std(ddof=1) / math.sqrt(units.size)
    th = v_cast_floor(1.0, n=1024, d=64)
    assert abs(units.mean() - th) <= tol, (units.mean(), th, tol)
    assert th > 5 * tol and abs(v_cast_floor(1.0, "e5m2", n=1024, d=64) - th) > 10 * tol  # teeth: no cast, e5m2


# ----------------------------------------------------------------------------- exp2_offset's float32 overshoot


def test_exp2_offset_overshoot_rule_is_the_emulators_arithmetic():
    """lazy_theory.offset_overshoot (numpy float32) against the same three steps in torch float32,
    the emulator's library, on a million random maxima over the scores' range and beyond."""
    g = np.random.default_rng(5)
    m = np.concatenate([g.uniform(-40, 40, 500_000), g.uniform(16.5, 26, 500_000)]).astype(np.float32)
    for S in (448.0, 300.0, 100.0, 256.0, 1.0):
        t = torch.from_numpy(m)
        a = t * pcast.contract.LOG2E
        x = torch.exp2(a - (a - log2_scale(S)))
        assert np.array_equal(lazy_theory.offset_overshoot(m, S), (x > 448.0).numpy()), S


@pytest.mark.parametrize("S", [2.0 ** e for e in range(0, 9)])
def test_exp2_offset_overshoot_never_for_a_power_of_two(S):
    """An integer log2 S makes a - (a - c) exact: x at the max is S, never above it (S <= 256 here)."""
    bits = np.arange(np.float32(-60).view(np.int32), np.float32(-0.01).view(np.int32), 97, dtype=np.int32)
    pos = np.arange(np.float32(0.01).view(np.int32), np.float32(60).view(np.int32), 97, dtype=np.int32)
    m = np.concatenate([bits, pos]).view(np.float32)
    assert not lazy_theory.offset_overshoot(m, S).any()
    assert not lazy_theory.overshoot_rate(np.linspace(-60, 60, 2001), S).any()


def test_exp2_offset_overshoot_rate_for_448():
    """c = log2_scale(448) is an odd multiple of 2^-20. For a = m·LOG2E in [16, 32) (grid 2^-19) with
    a - c < 16, a - c lies on its own 2^-20 grid: exact, x = 448, so maxima from 3 (any row of 1024
    N(0, 1) scores) up to (16 + c)/LOG2E = 17.19 never overshoot; from there to 32/LOG2E = 22.18
    (where a's own grid becomes 2^-18), a - c falls on the 2^-19 grid's midpoints: a tie, rounded
    to even, down half the time, and then a - (a - c) = c + 2^-20: rate 1/2. (Small and negative
    maxima overshoot at other rates; offset_overshoot computes them all.)"""
    c = log2_scale(448.0)
    assert (c * 2 ** 20) % 2 == 1  # an odd multiple of 2^-20
    edge = (16 + c) / pcast.contract.LOG2E
    below = np.linspace(3.0, edge - 0.06, 500)
    above = np.linspace(edge + 0.06, 32 / pcast.contract.LOG2E - 0.06, 500)
    assert not lazy_theory.overshoot_rate(below, 448.0).any()
    assert np.abs(lazy_theory.overshoot_rate(above, 448.0) - 0.5).max() < 0.02  # 4096 floats a point


@pytest.mark.parametrize("delta", [15.5, 16.0])
def test_float32_sage2_overshoot_matches_law(delta, one_thread):
    """SageAttention2's P path (forward, S = 448, exp2_offset) with 4 sink keys at Δ: in float32 the row's max
    (a sink key near Δ) saturates when it lies above 17.19 and the tie rounds down. The law (the walk
    with the overshoot rate) against the loop oracle's float32 decisions (a kernel's); teeth: the law without
    the overshoot is 0, and at S = 256 (integer offset) nothing saturates. The emulator decides on the exact
    x (448 for the max key) and counts no saturation at either scale."""
    seeds, heads, n = (0, 1), 8, 1024
    kw = dict(order="forward", scale=448.0, scale_mode="exp2_offset", block_n=64, ksink=4)
    inputs = lambda s: make_inputs(s, heads=heads, n=n, ksink=4, delta=delta)  # noqa: E731
    assert not emulator_units(inputs, seeds[:1], heads, "saturated", **kw).any()
    units = emulator_units(inputs, seeds, heads, "saturated", float32_decisions=True, **kw)
    U, measured = units.size, units.mean()
    tol = t_crit(U) * max(units.std(ddof=1), 1e-12) / math.sqrt(U)
    th = saturation_fraction(0.0, 448.0, n=n, block_n=64, order="forward", delta=delta, scale_mode="exp2_offset")
    assert abs(measured - th) <= tol, (measured, th, tol)
    assert measured > tol  # a law without the overshoot (0) would fail
    at256 = emulator_units(inputs, seeds[:1], heads, "saturated", float32_decisions=True, **{**kw, "scale": 256.0})
    assert not at256.any()
