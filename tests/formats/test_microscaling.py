"""The microscaled FP4 quantizers against an independent, first-principles oracle.

The oracle below shares nothing with :mod:`pcast.formats.rounding` or :mod:`pcast.formats.microscaling`:

* E2M1, E4M3FN and E8M0 are enumerated from their bit codes (E2M1: sign, 2 exponent bits, bias 1,
  1 mantissa bit; E4M3FN: bias 7, 0x7F/0xFF NaN; E8M0: ``2^(code - 127)``, codes 0..254);
* rounding is a nearest-value search in Python floats, the distance compared exactly against the
  midpoint of the two neighbours (checked exact with ``Fraction``), ties to the value whose code is
  even (mantissa bit 0), saturating at the largest value;
* the group rules are docs/interfaces.md's ("P in FP4 with microscaling"), with the contract's
  float32 steps done in ``numpy.float32``: nvfp4 ``s = E4M3(float32(amax / 6))``, 0 flushes the
  group, elements ``E2M1(float32(x / s)) * s``; mxfp4 ``s = 2^clamp(floor(log2 amax) - 2, -127, 127)``
  (``amax = 0``: ``2^-127``), elements ``E2M1(x / s) * s``, the division exact.

Cases: every E2M1 value, midpoint and the midpoints' float32 neighbours, times every scale of each
format; and groups whose amax sits on, at the midpoints of and around the scale grids' edges
(E4M3's flush tie 2^-10, its subnormals, every value and midpoint, 448 and above; E8M0's powers of
two from float32's smallest subnormal to 2^127). Acceptance: 0 mismatches, bit for bit.
"""

import bisect
import math
from fractions import Fraction
from functools import lru_cache

import numpy as np
import pytest
import torch

import pcast
from pcast.formats.microscaling import group_scale, quantize_mx, quantize_mx_fast

F32 = np.float32
GROUP = {"nvfp4": 16, "mxfp4": 32}
ROW_GROUPS = 4  # groups per row of the tensors under test


# ---------------------------------------------------------------- the oracle: formats from their codes

class Grid:
    """The non-negative values of a format, from (value, code) pairs; RNE by nearest-value search."""

    def __init__(self, pairs):
        pairs = sorted(pairs)
        self.values = [v for v, _ in pairs]
        self.codes = [c for _, c in pairs]
        self.mids = [(a + b) / 2 for a, b in zip(self.values, self.values[1:])]
        for a, b, m in zip(self.values, self.values[1:], self.mids):
            assert Fraction(a) + Fraction(b) == 2 * Fraction(m), "midpoints must be exact floats"

    def round(self, v: float) -> float:
        """Nearest value to ``v >= 0``; ties to the even code; at or above the max: the max."""
        if v >= self.values[-1]:
            return self.values[-1]
        hi = bisect.bisect_left(self.values, v)
        if self.values[hi] == v:
            return v
        lo = hi - 1
        d_lo, d_hi = v - self.values[lo], self.values[hi] - v  # compared via the exact midpoint:
        if v != self.mids[lo]:
            return self.values[lo] if v < self.mids[lo] else self.values[hi]
        assert Fraction(d_lo) == Fraction(d_hi)
        return self.values[lo] if self.codes[lo] % 2 == 0 else self.values[hi]


def decode_e2m1():
    out = []
    for code in range(8):  # the 3 magnitude bits: 2 exponent bits, 1 mantissa bit, bias 1
        e, m = code >> 1, code & 1
        out.append((m * 2.0**-1 if e == 0 else (1 + m / 2) * 2.0 ** (e - 1), code))
    return out


def decode_e4m3fn():
    out = []
    for code in range(0x7F):  # 0x7F (S.1111.111) is NaN; the sign bit is off
        e, m = code >> 3, code & 7
        out.append((m * 2.0**-9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7), code))
    return out


E2M1 = Grid(decode_e2m1())
E4M3 = Grid(decode_e4m3fn())
E8M0 = [2.0 ** (code - 127) for code in range(255)]  # code 255 is NaN


def floor_log2(a: float) -> int:
    """floor(log2 a) of a positive float, exactly (frexp: a = m * 2^e with m in [0.5, 1))."""
    return math.frexp(a)[1] - 1


def ref_group(xs, name):
    """One group by the docs' rule: (values, scale, flushed, saturated count); xs float32 numbers."""
    amax = max(abs(float(x)) for x in xs)
    if name == "nvfp4":
        s = E4M3.round(float(F32(amax) / F32(6.0)))
        quotient = lambda a: float(F32(a) / F32(s))  # noqa: E731 (one float32 division)
    else:
        x_exp = -127 if amax == 0 else min(max(floor_log2(amax) - 2, -127), 127)
        s = E8M0[x_exp + 127]
        quotient = lambda a: a / s  # noqa: E731 (exact: a power of two, in float64)
    if s == 0:
        return [0.0] * len(xs), 0.0, amax > 0, 0
    out, sat = [], 0
    for x in xs:
        q = quotient(abs(float(x)))
        sat += q > 6
        v = E2M1.round(q) * s
        assert float(F32(v)) == v, "element times scale must be a float32"
        out.append(math.copysign(v, float(x)))
    return out, s, False, sat


# ---------------------------------------------------------------- the cases

def f32_next(v, toward, k=1):
    x = F32(v)
    for _ in range(k):
        x = np.nextafter(x, F32(toward))
    return float(x)


def e2m1_members():
    """Every E2M1 value, every midpoint, both float32 neighbours of each midpoint (29 numbers)."""
    out = list(E2M1.values) + list(E2M1.mids)
    for m in E2M1.mids:
        out += [f32_next(m, 0.0), f32_next(m, np.inf)]
    return out


def element_groups(name):
    """amax = 6 s for every scale s, so s is exact; the other keys are the 29 members times s and,
    for nvfp4, the float32 neighbours of each midpoint times s (where float32(x / s) would land on
    the tie if the real quotient's distance from it were below half a float32 step)."""
    mem = e2m1_members()
    scales = E4M3.values[1:] if name == "nvfp4" else E8M0[:-2]  # E8M0 up to 2^125: 6 s stays finite
    groups = []
    for s in scales:
        amax = 6 * s
        xs = [float(F32(t * s)) for t in mem]
        if name == "nvfp4":
            xs += [f32_next(m * s, d) for m in E2M1.mids for d in (0.0, np.inf)]
        per = GROUP[name] - 1
        for i in range(0, len(xs), per):
            chunk = xs[i:i + per]
            groups.append([amax] + chunk + [0.0] * (per - len(chunk)))
    return groups


def nvfp4_edge_amaxes():
    """amax / 6 on every E4M3 value and midpoint (and above 448), and 2 float32 ulps either side."""
    targets = set(E4M3.values) | set(E4M3.mids) | {464.0, 480.0, 1000.0}
    out = {float(F32(3.4e38)), 1e30, 0.0}
    for t in targets:
        c = 6 * t
        assert float(F32(c)) == c
        out |= {f32_next(c, d, k) for d in (0.0, np.inf) for k in (0, 1, 2)}
    out |= {f32_next(6 * 2.0**-10, d, k) for d in (0.0, np.inf) for k in range(3, 9)}  # the flush tie
    return sorted(float(F32(a)) for a in out)


def mxfp4_edge_amaxes():
    """amax on every power of two float32 holds (subnormals included), its neighbours, 1.5x, 1.75x."""
    out = {0.0, float(np.finfo(np.float32).max)}
    for k in range(-149, 128):
        p = 2.0**k
        for v in (p, 1.5 * p, 1.75 * p, f32_next(p, 0.0), f32_next(p, np.inf)):
            if 0 < v < math.inf and float(F32(v)) == v:
                out.add(v)
    return sorted(out)


def edge_groups(name):
    """Each amax leads its group; then 0.75 amax and a window of the members times its scale."""
    mem = e2m1_members()
    amaxes = nvfp4_edge_amaxes() if name == "nvfp4" else mxfp4_edge_amaxes()
    width = GROUP[name] - 2
    groups = []
    for i, amax in enumerate(amaxes):
        s = ref_group([amax], name)[1]
        unit = s if s > 0 else float(F32(amax) / F32(6.0))
        window = [mem[(i * width + j) % len(mem)] for j in range(width)]
        groups.append([amax, float(F32(0.75 * amax))] + [min(float(F32(t * unit)), amax) for t in window])
    return groups


@lru_cache(maxsize=None)
def cases(name):
    """x float32 [rows, ROW_GROUPS * group] and the oracle's values, scales, flushed, saturated."""
    groups = element_groups(name) + edge_groups(name)
    groups += [[0.0] * GROUP[name]] * (-len(groups) % (2 * ROW_GROUPS))  # whole rows, an even count
    refs = [ref_group(g, name) for g in groups]
    rows = len(groups) // ROW_GROUPS
    x = np.array(groups, dtype=np.float32)
    assert np.array_equal(x.astype(np.float64), np.array(groups)), "every case is a float32"
    return {
        "x": torch.from_numpy(x.reshape(rows, -1)),
        "values": torch.tensor([r[0] for r in refs], dtype=torch.float32).reshape(rows, -1),
        "scales": torch.tensor([r[1] for r in refs], dtype=torch.float32).reshape(rows, -1),
        "flushed": torch.tensor([r[2] for r in refs]).reshape(rows, -1),
        "sat": torch.tensor([r[3] for r in refs], dtype=torch.int64).reshape(rows, -1).sum(-1),
        "groups": groups,
    }


def assert_bits(got, want, x, what):
    assert got.shape == want.shape and got.dtype == want.dtype, what
    bad = got.contiguous().view(torch.int32) != want.contiguous().view(torch.int32)
    if bool(bad.any()):
        i = tuple(int(j) for j in bad.nonzero()[0])
        raise AssertionError(f"{what}: {int(bad.sum())} mismatches; first at {i}: got {got[i].item()!r}, "
                             f"want {want[i].item()!r}")
    return int(want.numel())


# ---------------------------------------------------------------- the oracle itself

def test_oracle_grids():
    assert E2M1.values == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    ties = {0.25: 0, 0.75: 1, 1.25: 1, 1.75: 2, 2.5: 2, 3.5: 4, 5: 4}  # docs/interfaces.md
    assert {m: E2M1.round(m) for m in E2M1.mids} == ties
    assert E2M1.round(6.5) == 6 and E2M1.round(1e30) == 6 and E2M1.round(0.2) == 0
    assert len(E4M3.values) == 127 and E4M3.values[1] == 2.0**-9 and E4M3.values[-1] == 448
    assert E4M3.round(2.0**-10) == 0 and E4M3.round(f32_next(2.0**-10, 1.0)) == 2.0**-9
    assert E4M3.round(464.0) == 448 and E4M3.round(1e9) == 448
    # E4M3's codes decoded by torch's own float8 type, an independent second reading
    codes = torch.arange(0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).float().tolist()
    assert sorted(codes) == E4M3.values
    assert (E8M0[0], E8M0[127], E8M0[254]) == (2.0**-127, 1.0, 2.0**127)
    assert ref_group([6 * 2.0**-10], "nvfp4")[1:3] == (0.0, True)  # the flush tie
    assert ref_group([0.0], "mxfp4")[1:3] == (2.0**-127, False)


# ---------------------------------------------------------------- the acceptance: 0 mismatches

@pytest.mark.parametrize("name", list(GROUP))
def test_quantize_mx_bitwise(name):
    c = cases(name)
    pq, scales, flushed = quantize_mx(c["x"].clone(), name)
    n = assert_bits(pq, c["values"], c["x"], f"{name} values")
    assert_bits(scales, c["scales"], c["x"], f"{name} scales")
    assert torch.equal(flushed, c["flushed"]), f"{name} flushed: {int((flushed != c['flushed']).sum())} mismatches"
    assert_bits(group_scale(c["x"].reshape(-1, GROUP[name]).amax(-1), name), c["scales"].reshape(-1),
                c["x"], f"{name} group_scale")
    assert n == c["x"].numel() > 0


@pytest.mark.parametrize("name", list(GROUP))
def test_quantize_mx_fast_bitwise_and_saturated(name):
    c = cases(name)
    x = c["x"].clone()
    sat = torch.zeros(x.shape[0], dtype=torch.int64)
    pq, flushed = quantize_mx_fast(x, name, sat=sat)
    assert_bits(pq, c["values"], c["x"], f"{name} fast values")
    assert torch.equal(flushed, c["flushed"]), f"{name} fast flushed"
    assert torch.equal(sat, c["sat"]), f"{name} saturated: got {sat.sum().item()}, want {c['sat'].sum().item()}"


@pytest.mark.parametrize("name", list(GROUP))
def test_kernels_quantize_dispatch_bitwise(name):
    c = cases(name)
    x3 = c["x"].reshape(2, -1, c["x"].shape[-1])  # any leading shape; groups along the last axis
    assert_bits(pcast.quantize(x3.clone(), name), c["values"].reshape(x3.shape), x3, f"{name} pcast.quantize")


@pytest.mark.parametrize("name", list(GROUP))
def test_signed_inputs(name):
    """Negative keys: |p_q| and the scales as for |x|, the sign of x on every nonzero value."""
    c = cases(name)
    flip = torch.where(torch.arange(c["x"].numel()).reshape(c["x"].shape) % 3 == 1, -1.0, 1.0)
    x = c["x"] * flip
    pq, scales, flushed = quantize_mx(x, name)
    want = c["values"] * flip
    assert bool((pq == want).all()), f"{name}: {int((pq != want).sum())} mismatches"
    nz = want != 0
    assert torch.equal(torch.signbit(pq[nz]), torch.signbit(x[nz]))
    assert_bits(scales, c["scales"], x, f"{name} signed scales")
    assert torch.equal(flushed, c["flushed"])


# ---------------------------------------------------------------- what was covered

def coverage(name):
    """Counts of the interesting cases, by the oracle alone."""
    c = cases(name)
    groups, scales = c["groups"], c["scales"].reshape(-1).tolist()
    mids = set(E2M1.mids)
    ties = f32_ties = 0
    for g, s in zip(groups, scales):
        if s > 0:
            q = [(float(F32(x) / F32(s)) if name == "nvfp4" else x / s, x) for x in g]
            ties += sum(v in mids for v, _ in q)
            f32_ties += sum(v in mids and Fraction(x) / Fraction(s) != v for v, x in q)
    scale_ties = sum(float(F32(max(g)) / F32(6.0)) in set(E4M3.mids) for g in groups) if name == "nvfp4" else 0
    return {"groups": len(groups), "keys": len(groups) * GROUP[name], "element_ties": ties, "float32_ties": f32_ties,
            "scale_ties": scale_ties, "flushed": int(c["flushed"].sum()), "saturated": int(c["sat"].sum()),
            "distinct_scales": len(set(scales))}


@pytest.mark.parametrize("name", list(GROUP))
def test_case_counts(name):
    n = coverage(name)
    if name == "nvfp4":
        n_scales = len(E4M3.values)  # every E4M3 value is some group's scale, 0 included
        assert n["scale_ties"] >= len(E4M3.mids) and n["flushed"] >= 3
        min_groups = 3 * (n_scales - 1) + 5 * (n_scales + len(E4M3.mids))
        # float32(x / s) never lands on an E2M1 tie unless x / s is one: a float32 x next to m s lies
        # ulp(m s) >= s ulp(m) / 2 away (s's significand < 2), so the float32 step equals the real one
        assert n["float32_ties"] == 0
    else:
        n_scales = 253  # 2^-127 .. 2^125 (amax = 6 s stays below float32's max)
        assert n["flushed"] == 0
        min_groups = n_scales + 3 * 277
    assert n["distinct_scales"] >= n_scales
    assert n["groups"] >= min_groups
    assert n["element_ties"] >= 7 * (n_scales - 1)  # each E2M1 midpoint, exactly, under every scale
    assert n["saturated"] >= n_scales


# ---------------------------------------------------------------- errors

@pytest.mark.parametrize("name,n", [("nvfp4", 24), ("nvfp4", 8), ("mxfp4", 48), ("mxfp4", 16)])
def test_last_axis_not_a_multiple_of_the_group(name, n):
    msg = rf"\({n}\).*{name}.*multiple of {GROUP[name]}"
    for call in (lambda x: quantize_mx(x, name), lambda x: quantize_mx_fast(x, name),
                 lambda x: pcast.quantize(x, name)):
        with pytest.raises(ValueError, match=msg):
            call(torch.ones(3, n))


def test_unknown_format_name():
    x = torch.ones(2, 32)
    for call in (lambda: quantize_mx(x, "nvfp8"), lambda: quantize_mx_fast(x, "nvfp8"),
                 lambda: group_scale(torch.ones(2), "nvfp8")):
        with pytest.raises(ValueError, match=r"fmt='nvfp8' is not a microscaled format; allowed: nvfp4, mxfp4"):
            call()
    with pytest.raises(ValueError, match=r"fmt='fp4'"):
        pcast.quantize(x, "fp4")
    with pytest.raises(ValueError, match="float32"):
        quantize_mx(x.double(), "nvfp4")
