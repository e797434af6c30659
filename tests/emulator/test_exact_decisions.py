"""The P path's counts against the exact computation's (docs/interfaces.md, "Exact decisions").

Independent float64 implementations in numpy of the decisions: float64 scores of the float32 inputs, the walk
over KV blocks in the visiting order (the cumulative max, or the lazy rule against τ, seeded or not by a sink
logit), ``x = exp(s - m)·S`` or ``2^((s - m)·LOG2E)·S``, each key's rounding of x on the format's grid (round
half to even) and its float32 underflow. Float64 is exact for these decisions unless a value lies within about
1e-15 of its boundary, which none of these stacks' values does. Counts that equal these are the same on every
CPU, whatever its exp and sgemm; the last test moves every score and exp by two ulps and checks just that.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pcast import attention
from pcast.contract import COMBOS
from pcast.emulator import compiled
from pcast.formats.rounding import quantize_fp8
from pcast.models.sinks import make_inputs

from random_sinks import random_sink_inputs

_MAX_FINITE = 448.0  # e4m3fn
_F32_TINY = float(torch.finfo(torch.float32).tiny)  # float32's smallest normal


def round_e4m3(x: np.ndarray) -> np.ndarray:
    """Float64 ``x >= 0`` rounded to e4m3fn's grid (3 mantissa bits, emin -6) half to even, saturating at 448."""
    man, emin = 3, -6
    _, e = np.frexp(x)  # x = f·2^e, f in [0.5, 1): the binade's exponent is e - 1
    step = np.ldexp(1.0, np.maximum(e - 1, emin) - man)
    return np.minimum(np.round(x / step) * step, _MAX_FINITE)  # np.round: half to even; x / step is exact


def exact_counts(q, k, *, order: str, scale: float, ksink: int, block_n: int = 64) -> dict:
    """The exact computation's counts of one head (e4m3fn)."""
    q64, k64 = q[0, 0].double().numpy(), k[0, 0].double().numpy()
    s = q64 @ k64.T / np.sqrt(q64.shape[-1])
    n = s.shape[1]
    nb = -(-n // block_n)
    bm = np.stack([s[:, j * block_n:(j + 1) * block_n].max(1) for j in range(nb)], 1)
    m = np.maximum.accumulate(bm[:, ::-1], 1)[:, ::-1] if order == "reverse" else np.maximum.accumulate(bm, 1)
    p = np.exp(s - np.repeat(m, block_n, 1)[:, :n])
    pos = p.astype(np.float32) > 0  # the unrounded p's float32 value, correctly rounded, is positive
    x = p * scale
    kept = round_e4m3(x) > 0
    return {"terms": int(pos[:, ksink:].sum()), "terms_sink": int(pos[:, :ksink].sum()),
            "underflow": int((pos & ~kept)[:, ksink:].sum()), "underflow_sink": int((pos & ~kept)[:, :ksink].sum()),
            "saturated": int((x > _MAX_FINITE).sum())}


def _differing(deltas, n: int = 1024, d: int = 64, ksink: int = 4) -> list[str]:
    diff = []
    for delta in deltas:
        q, k, v = make_inputs(0, n=n, d=d, ksink=ksink, delta=float(delta))
        for order, scale in COMBOS:
            r = attention(q, k, v, order=order, scale=scale, ksink=ksink, backend="emulator")
            for name, want in exact_counts(q, k, order=order, scale=scale, ksink=ksink).items():
                got = int(getattr(r, name).sum())
                if got != want:
                    diff.append(f"Δ={delta} {order} S={scale:g} {name}: {got}, exact {want}")
    return diff


def test_round_e4m3_matches_the_bit_exact_rounding():
    """The reference's float64 rounding against pcast's float32 bit manipulation, on float32 values over every
    binade of the grid, its subnormals, ties and values past the max."""
    rng = np.random.default_rng(0)
    x = np.concatenate([np.exp2(rng.uniform(-12, 10, 20000)),
                        np.arange(1, 2 ** 13) * 2.0 ** -13,  # ties and exact grid points among them
                        [0.0, 2.0 ** -10, 2.0 ** -10 * 1.0000001, 448.0, 464.0, 480.0, 1e6]]).astype(np.float32)
    want = quantize_fp8(torch.from_numpy(x), "e4m3fn").numpy()
    assert np.array_equal(round_e4m3(x.astype(np.float64)), want.astype(np.float64))


def test_exact_counts_reference_sees_the_sink():
    """The reference itself: a strong sink met first (forward) underflows most non-sink p at S=1, fewer at S=256
    and fewer still met last (reverse)."""
    q, k, _ = make_inputs(0, n=256, d=64, ksink=4, delta=12.0)
    f1, f256, r1 = (exact_counts(q, k, order=o, scale=s, ksink=4)
                    for o, s in (("forward", 1.0), ("forward", 256.0), ("reverse", 1.0)))
    assert f1["terms"] == 256 * 252 and f1["underflow"] > 0.9 * f1["terms"]
    assert f256["underflow"] < 0.8 * f1["underflow"] and r1["underflow"] < 0.5 * f1["underflow"]


def test_counts_equal_exact_computation():
    """Four Δ of the collapse range at N = 1,024, d = 64, 4 sink keys, the four combinations."""
    diff = _differing((5, 7, 10, 12))
    assert not diff, f"{len(diff)} counts differ from the exact computation's:\n" + "\n".join(diff)


@pytest.mark.slow
def test_counts_equal_exact_computation_stack():
    """The whole collapse-like stack: Δ = 0..15."""
    diff = _differing(range(16))
    assert not diff, f"{len(diff)} counts differ from the exact computation's:\n" + "\n".join(diff)


# The general reference: every option whose decisions the contract makes exactly (docs/interfaces.md). Its own
# format table (mantissa bits, emin, max finite), not pcast's.
_GRIDS = {"e4m3fn": (3, -6, 448.0), "e5m2": (2, -14, 57344.0), "bf16": (7, -126, 3.3895313892515355e38),
          "fp16": (10, -14, 65504.0)}
_L = float(np.float32(1.4426950408889634))  # LOG2E as the float32 every implementation multiplies by


def _round_grid(x: np.ndarray, fmt: str) -> np.ndarray:
    man, emin, top = _GRIDS[fmt]
    _, e = np.frexp(x)
    step = np.ldexp(1.0, np.maximum(e - 1, emin) - man)
    return np.minimum(np.round(x / step) * step, top)


def exact_rows(q, k, *, order="forward", scale=1.0, ksink=0, block_n=64, scale_mode="multiply", tau=0.0,
               sink=None, fmt="e4m3fn", causal=False) -> dict:
    """Per query row of one head, the exact computation's counts: float64 scores of the float32 inputs (d a
    power of four, so sm_scale = 1/sqrt(d) is a power of two), the walk over blocks of ``block_n`` keys in the
    visiting order (the max moves to a block's max when it is -inf or when (bm - m)·LOG2E > τ; ``sink``: the
    logit it starts from), x = exp(s - m)·S or 2^((s - m)·LOG2E)·S, its rounding on the format's grid."""
    q64, k64 = q[0, 0].double().numpy(), k[0, 0].double().numpy()
    s = q64 @ k64.T / np.sqrt(q64.shape[-1])
    nq, n = s.shape
    if causal:
        s[np.triu(np.ones((nq, n), dtype=bool), 1)] = -np.inf
    nb = -(-n // block_n)
    bm = np.stack([s[:, j * block_n:(j + 1) * block_n].max(1) for j in range(nb)], 1)
    m = np.full(nq, -np.inf if sink is None else float(np.float32(sink)))
    walk = np.empty_like(bm)
    for j in (range(nb - 1, -1, -1) if order == "reverse" else range(nb)):
        with np.errstate(invalid="ignore"):  # (-inf - -inf: a block with no visible key, where m stays -inf)
            move = np.isneginf(m) | ((bm[:, j] - m) * _L > float(np.float32(tau)))
        m = np.where(move, bm[:, j], m)
        walk[:, j] = m
    mk = np.repeat(walk, block_n, 1)[:, :n]
    with np.errstate(invalid="ignore"):
        arg = np.where(np.isneginf(s), -np.inf, s - mk)
    if scale_mode == "exp2_offset":
        x = np.exp2(arg * _L) * scale
        u = x
    else:
        u = np.exp(arg)
        x = u * scale
    pos = u.astype(np.float32) > 0
    kept = _round_grid(x, fmt) > 0 if fmt is not None else pos
    sat = x > _GRIDS[fmt][2] if fmt is not None else np.zeros_like(pos)
    return {"terms": pos[:, ksink:].sum(1), "terms_sink": pos[:, :ksink].sum(1),
            "underflow": (pos & ~kept)[:, ksink:].sum(1), "underflow_sink": (pos & ~kept)[:, :ksink].sum(1),
            "saturated": sat.sum(1)}


_OPTIONS = [
    dict(order="forward", scale=256.0, scale_mode="exp2_offset", block_n=160),
    dict(order="reverse", scale=448.0, scale_mode="exp2_offset", block_n=48),
    dict(order="forward", scale=1.0, tau=8.0, scale_mode="exp2_offset"),
    dict(order="reverse", scale=256.0, tau=2.0, block_n=32),
    dict(order="forward", scale=64.0, sink=11.0, tau=4.0, ksink=0),
    dict(order="reverse", scale=448.0, tau=8.0),  # a stale max lets x pass 448: saturations
    dict(order="forward", scale=1.0, fmt="e5m2"),
    dict(order="reverse", scale=1.0, fmt="bf16", causal=True),
    dict(order="forward", scale=16.0, fmt="fp16", block_n=96),
    dict(order="forward", scale=256.0, fmt=None),
]


@pytest.mark.parametrize("options", _OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_rows_equal_exact_computation_under_every_covered_option(options):
    """Per-row counts of the emulator against the exact computation's, over the options the contract covers
    (exp2_offset, lazy rescaling, a seeding sink logit, the 16-bit and other 8-bit formats, causal masks, tiles
    that are no power of two), at Δ across the collapse range (teeth: the counts are not all zero)."""
    kw = dict(options)
    tau, sink = kw.pop("tau", 0.0), kw.pop("sink", None)
    ksink = kw.setdefault("ksink", 4)
    total = {}
    for delta in (6.0, 9.0, 12.0):
        q, k, v = make_inputs(1, n=320, d=64, ksink=max(ksink, 1), delta=delta)
        r = attention(q, k, v, rescale_threshold=tau, backend="emulator",
                      sink_logit=None if sink is None else torch.full((1, 1), sink),
                      sink_mode="init", **{n: x for n, x in kw.items() if n != "sink_mode"})
        want = exact_rows(q, k, tau=tau, sink=sink, **kw)
        for name, rows in want.items():
            got = getattr(r, name)[0, 0].numpy()
            assert np.array_equal(got, rows), (name, delta, np.flatnonzero(got != rows)[:5])
            total[name] = total.get(name, 0) + int(rows.sum())
    assert total["terms"] > 0 and (total["underflow"] > 0 or kw.get("fmt", "e4m3fn") in ("bf16", "fp16", None))
    if tau and kw["scale"] == 448.0:
        assert total["saturated"] > 0


def _nudged(fn, seed: int, ulps: int = 2, tiny: float = 0.0):
    """``fn`` whose float32 result moves by up to ``ulps`` ulps per element, at random (infinities, zeros and
    values of magnitude below ``tiny`` kept): what another CPU's sgemm or exp may give."""
    gen = torch.Generator().manual_seed(seed)

    def nudged(*args, **kwargs):
        t = fn(*args, **kwargs)
        steps = torch.randint(-ulps, ulps + 1, t.shape, generator=gen)
        out = t.clone()
        for _ in range(ulps):
            out = torch.where(steps > 0, torch.nextafter(out, torch.full_like(out, float("inf"))), out)
            out = torch.where(steps < 0, torch.nextafter(out, torch.full_like(out, float("-inf"))), out)
            steps = steps - steps.sign()
        out = torch.where(torch.isinf(t) | (t.abs() <= tiny), t, out)
        if "out" in kwargs and kwargs["out"] is not None:
            return kwargs["out"].copy_(out)
        return out

    return nudged


def _sink_stack(stack: str):
    """(q, k, v) of each Δ of a stack: ``make_inputs``' sinks (one head, Δ 6 and 11), or sink keys in a random
    direction and of large norm (two heads, Δ 4, 9 and 12, tests/support/random_sinks.py)."""
    if stack == "sinks":
        return [make_inputs(2, n=1024, d=64, ksink=4, delta=delta) for delta in (6.0, 11.0)]
    q, ks, v = random_sink_inputs(3, (4, 9, 12))
    return [(q, k, v) for k in ks]


@pytest.mark.parametrize("stack", ["sinks", "random"])
@pytest.mark.parametrize("compiled_pass", [False, True], ids=["eager", "fused"])
def test_counts_do_not_move_with_the_last_bits_of_scores_and_exp(monkeypatch, compiled_pass, stack):
    """The same stack with every float32 score and every exp moved by up to two ulps at random (what another
    CPU's sgemm and exp give): every per-row count is the same, while the outputs move (the nudges took
    effect). Decisions made on the float32 values move with them. The compiled pass takes its exp inside
    numba, so there only the scores move. exp's subnormal results stay as they are: the bound on exp's error
    is relative (eight ulps), and an ulp of a subnormal is not (two of them move 2^-149 to 0, 0.7 above exp's
    underflow edge: a change no CPU gives, since the P path's exp is the contract's own, the same bits
    everywhere, tests/emulator/test_ieee.py). Both stacks at N = 1,024, d = 64, block_n 64, 4 sink keys, the
    four combinations; the random sinks' scores reach exp's underflow (s − m below −100)."""
    from pcast.emulator import core, fused
    monkeypatch.setattr(fused, "ENABLED", compiled_pass)
    runs, outs = [], []
    inputs = _sink_stack(stack)
    for nudge in (False, True):
        if nudge:
            monkeypatch.setattr(core, "_scores", _nudged(core._scores, 5))
            monkeypatch.setattr(core, "_unrounded", _nudged(core._unrounded, 6, tiny=_F32_TINY))
        counts = []
        for q, k, v in inputs:
            for order, scale in COMBOS:
                r = attention(q, k, v, order=order, scale=scale, ksink=4, block_n=64, backend="emulator")
                counts.append(torch.stack([getattr(r, n) for n in ("underflow", "underflow_sink", "terms")]))
                outs.append(r.out)
        runs.append(torch.stack(counts))
    assert torch.equal(runs[0], runs[1])
    assert int(runs[0][:, 0].sum()) > 0  # underflows to decide
    half = len(outs) // 2
    assert not torch.equal(torch.stack(outs[:half]), torch.stack(outs[half:]))


@pytest.mark.skipif(not compiled.AVAILABLE, reason="numba is not installed")
@pytest.mark.parametrize("options", [o for o in _OPTIONS if o.get("fmt", "e4m3fn") in ("e4m3fn", "e5m2")],
                         ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_the_compiled_cast_is_the_torch_passes_bit_for_bit(options, monkeypatch):
    """Step 3 compiled (pcast.emulator.compiled) against its torch passes: every output bit and every count."""
    kw = dict(options)
    tau, sink = kw.pop("tau", 0.0), kw.pop("sink", None)
    kw.setdefault("ksink", 4)
    q, k, v = make_inputs(3, n=320, d=64, ksink=4, delta=9.0)
    runs = []
    for on in (True, False):
        monkeypatch.setattr(compiled, "AVAILABLE", on)
        r = attention(q, k, v, rescale_threshold=tau, backend="emulator", sink_mode="init",
                      sink_logit=None if sink is None else torch.full((1, 1), sink), **kw)
        runs.append([r.out, *(getattr(r, n) for n in ("underflow", "underflow_sink", "terms", "saturated"))])
    assert all(torch.equal(a, b) for a, b in zip(*runs))
