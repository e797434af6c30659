"""The V-leak case of T9 (:mod:`pcast.probes.cases_vleak`): the report's fixture by the loop oracle (an
implementation of the contract that shares no code with the emulator) bit for bit, the outputs against a float64
hand computation of the report's formula, and a static V scale as the control that holds the property."""

import math

import pytest
import torch

import pcast
from pcast.probes import cases_vleak as cv
from pcast.probes.cases import CASES, t9_rows

from loop_contract import loop_attention

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

F = cv.VLEAK_FIXTURE
E4M3_MAX = 448.0
VARIANTS = [("mx", None), ("mx", "same"), ("mx", "next"), ("current", None), ("current", "future")]


def _v(scaling, variant):
    first, variants = F[scaling]
    v = torch.zeros(1, 1, F["S"], F["D"])
    v[0, 0, 0, 0] = first
    if variant is not None:
        j, x = variants[variant]
        v[0, 0, j, 0] = x
    return v


def _e4m3(x: float) -> float:
    """E4M3 round to nearest even, written from the format (3 fraction bits, subnormal step 2^-9), for x >= 0."""
    if x == 0.0:
        return 0.0
    e = max(math.floor(math.log2(x)), -6)
    step = 2.0 ** (e - 3)
    return min(round(x / step) * step, E4M3_MAX)  # Python's round is half to even


def _hand_first(scaling, variant) -> float:
    """V'[0, channel 0] by the report's formulas in float64: MX, D = 2^ceil(log2(amax of keys 0-31 / 448));
    current scaling, s = amax of all V / 448; V' = e4m3(V / s)·s."""
    v = _v(scaling, variant)[0, 0, :, 0].double()
    if scaling == "mx":
        s = 2.0 ** math.ceil(math.log2(float(v[:32].abs().max()) / E4M3_MAX))
    else:
        s = float(v.abs().max()) / E4M3_MAX
    return _e4m3(float(v[0]) / s) * s


@pytest.mark.parametrize("scaling,variant", VARIANTS)
def test_the_case_is_the_loop_oracles_and_the_hand_computation(scaling, variant):
    out = cv.leak_outputs(scaling, variant)
    v = _v(scaling, variant)
    q = torch.ones(1, 1, F["S"], F["D"])
    loop, _ = loop_attention(q, q.clone(), v, causal=True, fmt="e4m3fn", v_fmt="e4m3fn",
                             v_scale=cv._V_SCALE[scaling])
    assert torch.equal(out, loop[0, 0, :F["T"] + 1])
    first = _hand_first(scaling, variant)  # row t averages keys 0..t, of which only key 0 is not zero
    want = torch.tensor([first / (t + 1) for t in range(F["T"] + 1)], dtype=torch.float32)
    assert torch.allclose(out[:, 0], want, rtol=1e-6, atol=0.0) and out[:, 1:].eq(0).all()


def test_the_report_variants_break_and_hold_and_the_remedy_holds():
    assert _hand_first("mx", "same") == 0.0 and _hand_first("current", "future") == 0.0
    assert _hand_first("mx", "next") == _hand_first("mx", None) == 2.0 ** -20
    assert cv.V_LEAK in CASES
    rows = t9_rows((cv.V_LEAK,))
    assert len(rows) == len(cv.V_LEAK.measurements) and all(r["status"] == "PASS" for r in rows), rows


def test_a_static_v_scale_holds_the_property_so_the_check_can_fail():
    """The control: V cast with a fixed scale (no amax) reads no future value; every variant keeps rows 0..T."""
    q = torch.ones(1, 1, F["S"], F["D"], dtype=torch.bfloat16)
    for scaling, variant in VARIANTS[1:3] + VARIANTS[4:]:
        a, b = (pcast.attention(q, q, _v(scaling, w).to(torch.bfloat16), causal=True, backend="emulator",
                                v_fmt="e4m3fn", v_scale=2.0 ** -24).out[0, 0, :F["T"] + 1] for w in (None, variant))
        assert torch.equal(a, b), (scaling, variant)
