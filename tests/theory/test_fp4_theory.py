"""Tests of :mod:`pcast.theory.fp4`: a Monte Carlo of the model (numpy, no project quantizer), the
emulator backend of :func:`pcast.attention` on :func:`pcast.models.sinks.make_inputs`, the measured group-flush
Δc, the first-level scale criteria by an independent scan, and argument checks.

Seeds are fixed. Statistical tolerances come from the sample: the Monte Carlo draws independent rows
(SE = sd of the row fractions / sqrt(rows)); in the emulator the rows of one head share its keys, so
the independent unit is the head (SE = sd of the head means / sqrt(heads)). Each check allows 4-5 SE
plus the theory's quadrature error (1e-4, far above its ~1e-6).
"""

import functools
import math

import numpy as np
import pytest
import torch

import pcast
from pcast.theory import fp4 as ft
from pcast.formats.microscaling import MX_FORMATS, PER_ROW_TARGET, group_scale
from pcast.models.sinks import make_inputs

QUAD = 1e-4


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # the emulator's small matmuls run far faster on one thread than on contended ones
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)

# ---------------------------------------------------------------------------------------------
# independent grids: E4M3 decoded from its codes (0x00..0x7E; 0x7F is NaN), E2M1 listed


def _e4m3_table() -> np.ndarray:
    codes = np.arange(0x7F)
    e, m = codes >> 3, codes & 7
    return np.where(e == 0, m * 2.0 ** -9, (1 + m / 8) * 2.0 ** (e - 7.0))


E4M3 = _e4m3_table()
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def round_to(y, table):
    """Nearest table entry (index = code; a tie goes to the even code), saturating at the largest."""
    y = np.minimum(y, table[-1])
    i = np.clip(np.searchsorted(table, y), 1, table.size - 1)
    lo, hi = table[i - 1], table[i]
    up = (hi - y < y - lo) | ((hi - y == y - lo) & (i % 2 == 0))
    return np.where(up, hi, lo)


def test_tables():
    assert E4M3.size == 127 and E4M3[-1] == 448 and E4M3[1] == 2.0 ** -9 and np.all(np.diff(E4M3) > 0)
    assert np.array_equal(round_to(np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0]), E2M1),
                          [0, 1, 1, 2, 2, 4, 4, 6])  # the contract's E2M1 ties (docs/interfaces.md)
    assert round_to(np.array([2.0 ** -10, 2.0 ** -10 * 1.0001, 500.0]), E4M3).tolist() == [0, 2.0 ** -9, 448]


# ---------------------------------------------------------------------------------------------
# (a) Monte Carlo of the model


def simulate(delta, S1, k=4, sigma=1.0, n=1024, block_n=64, group=16, order="forward", fmt="nvfp4",
             rows=2000, seed=0):
    """Independent rows of the model: returns ((flush mean, SE), (element mean, SE)) of the row fractions."""
    rng = np.random.default_rng(seed)
    npad = -(-n // block_n) * block_n
    s = np.full((rows, npad), -np.inf)
    s[:, :n] = rng.standard_normal((rows, n)) * sigma
    s[:, :k] += delta
    blk = s.reshape(rows, -1, block_n)
    bmax = blk.max(-1)
    if order == "forward":
        m = np.maximum.accumulate(bmax, axis=1)
    else:
        m = np.maximum.accumulate(bmax[:, ::-1], axis=1)[:, ::-1]
    xg = (S1 * np.exp(blk - m[..., None])).reshape(rows, -1, group)
    amax = xg.max(-1)
    if fmt == "nvfp4":
        q = round_to(amax / 6.0, E4M3)
    else:
        with np.errstate(divide="ignore"):
            q = np.where(amax > 0, 2.0 ** (np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - 2), 0.0)
    flushed = (amax > 0) & (q == 0)
    elem = round_to(xg / np.where(q > 0, q, 1.0)[..., None], E2M1)
    lost = ((elem == 0) & (q > 0)[..., None]).reshape(rows, npad)[:, k:n]
    flush_frac, elem_frac = flushed.sum(1) / (n / group), lost.sum(1) / (n - k)
    return tuple((float(f.mean()), float(f.std(ddof=1)) / math.sqrt(rows)) for f in (flush_frac, elem_frac))


MC_CASES = [  # (delta, S1, sigma, n, order, fmt)
    (6.0, 1.0, 1.0, 1024, "forward", "nvfp4"),  # at the flush crossing
    (12.0, 256.0, 1.0, 1024, "forward", "nvfp4"),
    (3.0, 2.0 ** -6, 1.0, 1024, "forward", "nvfp4"),  # c_g = 0.98: non-sink flushes, subnormal scales
    (8.0, 4096.0, 1.0, 1024, "forward", "nvfp4"),  # the top scale saturates at 448
    (10.0, 3.0, 2.0, 1024, "forward", "nvfp4"),  # sigma = 2, S1 not a power of two
    (10.0, 1.0, 1.0, 1000, "reverse", "nvfp4"),  # partial last block and group
    (8.0, 1.0, 1.0, 1024, "forward", "mxfp4"),
    (6.0, 3.0, 1.0, 1024, "reverse", "mxfp4"),
]


@pytest.mark.parametrize("delta,S1,sigma,n,order,fmt", MC_CASES)
def test_model_monte_carlo(delta, S1, sigma, n, order, fmt):
    group = MX_FORMATS[fmt].group
    (fl, fl_se), (el, el_se) = simulate(delta, S1, sigma=sigma, n=n, group=group, order=order, fmt=fmt)
    kw = dict(sigma=sigma, n=n, group=group, order=order)
    th_el = ft.element_underflow_fraction(delta, S1, fmt=fmt, **kw)
    assert abs(el - th_el) <= 4 * el_se + QUAD, (el, el_se, th_el)
    if fmt == "nvfp4":
        th_fl = ft.group_flush_fraction(delta, S1, **kw)
        assert abs(fl - th_fl) <= 4 * fl_se + QUAD, (fl, fl_se, th_fl)
    else:
        assert fl == 0.0


def test_flush_counts_all_group_keys():
    # At the crossing, 16 keys per group against 15 moves the fraction by ~0.024: 16000 rows resolve it.
    runs = [simulate(5.9, 1.0, rows=4000, seed=10 + i)[0] for i in range(4)]
    mean = float(np.mean([m for m, _ in runs]))
    se = math.sqrt(sum(e ** 2 for _, e in runs)) / len(runs)
    th = ft.group_flush_fraction(5.9, 1.0)
    assert abs(mean - th) <= 4 * se + QUAD and 4 * se < 0.012, (mean, se, th)


# ---------------------------------------------------------------------------------------------
# (b) the emulator


@functools.lru_cache(maxsize=None)
def emulate(delta, S1, order="forward", fmt="nvfp4", seeds=(0, 1, 2), heads=4, n=1024, scale_mode="multiply"):
    """Head means of groups_flushed/(n/group) and (underflow - underflow_scale)/terms: two arrays."""
    group = MX_FORMATS[fmt].group
    flush, elem = [], []
    for seed in seeds:
        q, k, v = make_inputs(seed, heads=heads, n=n, d=64, ksink=4, delta=delta)
        r = pcast.attention(q, k, v, fmt=fmt, scale=S1, order=order, backend="emulator", ksink=4,
                              scale_mode=scale_mode)
        flush.append((r.groups_flushed.double() / (n / group)).mean(-1).flatten())
        elem.append(((r.underflow - r.underflow_scale).double() / r.terms.double()).mean(-1).flatten())
    return torch.cat(flush).numpy(), torch.cat(elem).numpy()


def _mean_se(x):
    return float(x.mean()), float(x.std(ddof=1)) / math.sqrt(x.size)


@pytest.mark.parametrize("delta,S1,order,fmt", [(6.0, 1.0, "forward", "nvfp4"), (12.0, 256.0, "forward", "nvfp4"),
                                                (10.0, 1.0, "reverse", "nvfp4"), (13.5, 2048.0, "forward", "nvfp4"),
                                                (8.0, 1.0, "forward", "mxfp4")])
def test_emulator_matches_theory(delta, S1, order, fmt):
    flush, elem = emulate(delta, S1, order, fmt)
    group = MX_FORMATS[fmt].group
    m, se = _mean_se(elem)
    th = ft.element_underflow_fraction(delta, S1, order=order, fmt=fmt, group=group)
    assert abs(m - th) <= 5 * se + QUAD, (m, se, th)
    m, se = _mean_se(flush)
    th = ft.group_flush_fraction(delta, S1, order=order) if fmt == "nvfp4" else 0.0
    assert abs(m - th) <= 5 * se + QUAD, (m, se, th)


def test_per_row_removes_forward_collapse():
    # per_row: only block 0's three sink-free groups can flush, each against S_r-scaled depth 13.04 =
    # the static model of one 64-key block at S1 = 2688 (c_g(2688) = ln(448·2^10)).
    c_r = ft.per_row_flush_threshold()
    assert c_r == pytest.approx(math.log(448 * 2 ** 10), abs=1e-12)
    assert c_r == pytest.approx(ft.flush_threshold(PER_ROW_TARGET), abs=1e-12)
    for delta in (12.0, 14.0, 20.0):
        flush, _ = emulate(delta, 1.0, "forward", "nvfp4", seeds=(0,), scale_mode="per_row")
        m, se = _mean_se(flush)
        th = ft.group_flush_fraction(delta, PER_ROW_TARGET, n=64, block_n=64) * 64 / 1024
        assert abs(m - th) <= 5 * se + QUAD, (delta, m, se, th)
        assert m <= 3 / 64 + 1e-12
    assert ft.group_flush_fraction(12.0, 1.0) > 0.98  # the static S1 = 1 cast has collapsed there


def test_reverse_order_bounded_by_the_sink_block():
    # reverse: only block 0's 3 of 64 groups can meet the sink
    f = ft.group_flush_fraction(np.array([5.0, 10.0, 30.0]), 1.0, order="reverse")
    assert np.all(f <= 3 / 64 + 1e-6) and f[-1] == pytest.approx(3 / 64, abs=1e-6)


# ---------------------------------------------------------------------------------------------
# (c) the group-flush Δc against the emulator


@pytest.mark.parametrize("S1,seeds", [(1.0, (0, 1)), (256.0, (2, 3)), (2048.0, (4, 5))])
def test_critical_delta_flush_measured(S1, seeds):
    # (the flush pattern depends on Δ - ln S1 only, so each S1 gets seeds of its own: three measurements)
    dc = ft.critical_delta_flush(S1)
    lead = ft.critical_delta_flush(S1, method="leading")
    mean = {d: float(emulate(d, S1, seeds=seeds)[0].mean()) for d in (dc - 0.5, dc, dc + 0.5)}
    assert mean[dc - 0.5] < 0.5 < mean[dc + 0.5]  # so the measured crossing lies within 0.5 of dc
    slope = (ft.group_flush_fraction(dc + 1e-3, S1) - ft.group_flush_fraction(dc - 1e-3, S1)) / 2e-3
    measured = dc - (mean[dc] - 0.5) / slope  # local linearisation at dc
    assert abs(measured - dc) < 0.1, (measured, dc)
    assert abs(measured - lead) < 0.5, (measured, lead)  # within 0.5 of the closed form
    assert lead == pytest.approx(ft.flush_threshold(S1) - 1.029375 + 1.734060, abs=1e-4)


# ---------------------------------------------------------------------------------------------
# thresholds against the quantizer


def test_flush_threshold_is_the_quantizers_boundary():
    assert ft.flush_threshold(1.0) == pytest.approx(10 * math.log(2) - math.log(6), abs=1e-12)
    assert ft.flush_threshold(2048.0) == pytest.approx(ft.flush_threshold(1.0) + 11 * math.log(2), abs=1e-12)
    edge = torch.tensor([6 * 2.0 ** -10], dtype=torch.float32)  # amax/6 = 2^-10 exactly: the tie, to 0
    above = torch.nextafter(edge, torch.tensor([1.0]))
    assert group_scale(edge, "nvfp4").item() == 0 and group_scale(above, "nvfp4").item() == 2.0 ** -9
    for S1 in (1.0, 256.0):  # amax = S1·e^-t flushes iff t >= c_g
        c = ft.flush_threshold(S1)
        amax = torch.tensor([S1 * math.exp(-(c - 1e-5)), S1 * math.exp(-(c + 1e-5))], dtype=torch.float32)
        assert group_scale(amax, "nvfp4").tolist()[0] > 0 and group_scale(amax, "nvfp4").tolist()[1] == 0


# ---------------------------------------------------------------------------------------------
# (d) the first-level scale, by an independent scan


def test_optimal_first_level_scale_by_scan():
    flush_edge = E4M3[1] / 2  # an E4M3 scale <= half its smallest subnormal rounds to 0
    admissible = {}
    for j in range(15):
        S1 = 2.0 ** j
        saturates = S1 / 6 > E4M3[-1]
        coverage = math.log(S1 / (6 * flush_edge))
        step_top = max(2 * round_to(S1 / 6, E4M3) / S1, 1 - 6 * E4M3[-1] / S1 if saturates else 0.0)
        crit = ft.first_level_criteria(S1)
        assert crit["bit_exact"] and crit["saturates"] == saturates
        assert crit["coverage"] == pytest.approx(coverage, abs=1e-12)
        assert crit["step_top"] == pytest.approx(step_top, abs=1e-12)
        if not saturates:
            admissible[S1] = coverage
    best = max(admissible, key=admissible.get)
    assert best == 2048.0 == ft.optimal_first_level_scale("nvfp4")
    assert ft.first_level_criteria(2048.0)["step_top"] == 0.34375  # (1/3)(33/32), every power of two
    assert not ft.first_level_criteria(3.0)["bit_exact"]
    assert ft.first_level_criteria(2688.0)["step_top"] == pytest.approx(1 / 3)  # S1/6 = 448 exactly
    assert ft.critical_delta_flush(2048.0) == pytest.approx(13.522, abs=2e-3)


def test_mxfp4_first_level_scale_is_irrelevant():
    # E8M0 follows amax by powers of two: S1 = 2048 gives bit for bit the S1 = 1 result
    q, k, v = make_inputs(3, n=256, d=64, ksink=4, delta=8.0)
    a, b = (pcast.attention(q, k, v, fmt="mxfp4", scale=s, backend="emulator", ksink=4) for s in (1.0, 2048.0))
    assert torch.equal(a.out, b.out) and torch.equal(a.underflow, b.underflow)
    assert ft.optimal_first_level_scale("mxfp4") == 1.0


# ---------------------------------------------------------------------------------------------
# (e) bad arguments


@pytest.mark.parametrize("call,name", [
    (lambda: ft.flush_threshold(0.0), "S1"),
    (lambda: ft.group_flush_fraction("x", 1.0), "delta"),
    (lambda: ft.group_flush_fraction(1.0, -2.0), "S1"),
    (lambda: ft.group_flush_fraction(1.0, 1.0, k=-1), "k"),
    (lambda: ft.group_flush_fraction(1.0, 1.0, k=64, n=64), "k"),
    (lambda: ft.group_flush_fraction(1.0, 1.0, sigma=0.0), "sigma"),
    (lambda: ft.group_flush_fraction(1.0, 1.0, n=1), "n"),
    (lambda: ft.group_flush_fraction(1.0, 1.0, block_n=0), "block_n"),
    (lambda: ft.group_flush_fraction(1.0, 1.0, group=24), "group"),
    (lambda: ft.group_flush_fraction(1.0, 1.0, order="sideways"), "order"),
    (lambda: ft.element_underflow_fraction(1.0, 1.0, fmt="e4m3fn"), "fmt"),
    (lambda: ft.element_underflow_fraction(1.0, 1.0, group=2.5), "group"),
    (lambda: ft.critical_delta_flush(1.0, k=0), "k"),
    (lambda: ft.critical_delta_flush(2.0 ** -10), "S1"),
    (lambda: ft.critical_delta_flush(1.0, method="best"), "method"),
    (lambda: ft.critical_delta_flush(1.0, n=32, block_n=32), "n"),
    (lambda: ft.first_level_criteria(float("nan")), "S1"),
    (lambda: ft.optimal_first_level_scale("e4m3fn"), "fmt"),
])
def test_bad_arguments(call, name):
    with pytest.raises(ValueError, match=rf"^{name}="):
        call()


def test_vectorised_and_scalar():
    d = np.array([[4.0, 6.0], [8.0, 10.0]])
    f = ft.group_flush_fraction(d, 1.0)
    assert f.shape == (2, 2) and isinstance(ft.group_flush_fraction(6.0, 1.0), float)
    assert f[0, 1] == ft.group_flush_fraction(6.0, 1.0) and np.all(np.diff(f.ravel()) > 0)
    e = ft.element_underflow_fraction([4.0, 8.0], 1.0)
    assert e.shape == (2,) and e[0] == pytest.approx(ft.element_underflow_fraction(4.0, 1.0), abs=0)
