"""Microscaled FP4 P (docs/interfaces.md, "P in FP4 with microscaling") in all three implementations.

The interpreted Triton kernel, the emulator and the plain loop of tests/support/loop_contract.py agree on nvfp4
and mxfp4 (static S and per_row), both orders, causal or not, odd shapes, with and without sink keys:
identical diagnostics, or each difference explained by :func:`pcast.conformance.explain`, whose float64
model marks the elements at an E2M1 rounding boundary or in a group whose scale sits at an E4M3 /
power-of-two boundary (the flush threshold included). Then: ``explain`` rejects real differences and
marks exactly the boundary cases, and the bad arguments are refused naming them. Shapes are small: the
interpreter is slow.
"""

import math

import pytest
import torch

import pcast
from pcast.conformance import compare, explain, fragile_elements
from pcast.contract import DIAGNOSTICS
from pcast.models.sinks import make_inputs

import three_way
from three_way import copy_result

pytestmark = pytest.mark.usefixtures("one_thread")

def check_three(q, k, v, *, block_m=32, **kw):
    """The three implementations on one call (tests/support/three_way.py), kernel block_m 32."""
    return three_way.check_three(q, k, v, block_m=block_m, **kw)


# (n, d, block_n, Δ, ksink, keywords): N not a multiple of the group or the block, Δ large enough to flush
CASES = [
    (72, 16, 32, 12.0, 4, dict(fmt="nvfp4", scale=1.0)),
    (100, 32, 64, 9.0, 4, dict(fmt="nvfp4", scale=256.0, order="reverse", causal=True)),
    (200, 16, 64, 12.0, 4, dict(fmt="nvfp4", scale=2048.0, rowsum="rounded")),
    (72, 64, 32, 6.0, 0, dict(fmt="nvfp4", scale=256.0, causal=True)),
    (100, 16, 32, 10.0, 4, dict(fmt="nvfp4", scale_mode="per_row")),
    (200, 32, 64, 12.0, 4, dict(fmt="nvfp4", scale_mode="per_row", order="reverse", causal=True, rowsum="rounded")),
    (72, 32, 32, 12.0, 4, dict(fmt="mxfp4", scale=1.0, order="reverse")),
    (100, 16, 64, 8.0, 4, dict(fmt="mxfp4", scale=256.0, causal=True)),
    (200, 16, 32, 6.0, 0, dict(fmt="mxfp4", scale=2048.0, order="reverse", rowsum="rounded")),
]


@pytest.mark.parametrize("n,d,block_n,delta,ksink,kw", CASES,
                         ids=[f"n{c[0]}-d{c[1]}-bn{c[2]}-D{c[3]:g}-k{c[4]}-" + "-".join(f"{v}" for v in c[5].values())
                              for c in CASES])
def test_three_implementations_agree(n, d, block_n, delta, ksink, kw):
    q, k, v = make_inputs(n + d + block_n, heads=2, n=n, d=d, ksink=ksink, delta=delta)
    tri, emu, loop, _ = check_three(q, k, v, block_n=block_n, ksink=ksink, **kw)
    assert int(tri.underflow.sum()) > 0 and int(tri.terms.sum()) > 0
    if kw["fmt"] == "mxfp4":  # E8M0 never flushes
        assert int(tri.groups_flushed.sum()) == 0 == int(loop.underflow_scale.sum())


def test_the_cases_cover_flushes_saturation_and_sinks():
    """The flush and saturation counts the comparison above covered are not all zero (the same cases, kernel
    skipped: the emulator's counts equal the kernel's there)."""
    seen = {n: 0 for n in DIAGNOSTICS}
    for n, d, block_n, delta, ksink, kw in CASES:
        q, k, v = make_inputs(n + d + block_n, heads=2, n=n, d=d, ksink=ksink, delta=delta)
        r = pcast.attention(q, k, v, backend="emulator", block_n=block_n, ksink=ksink, **kw)
        for name in DIAGNOSTICS:
            seen[name] += int(getattr(r, name).sum())
    assert all(seen[n] > 0 for n in DIAGNOSTICS), seen


def test_fp8_leaves_the_new_planes_zero_and_compare_takes_fp4():
    q, k, v = make_inputs(5, heads=1, n=40, d=16, ksink=4, delta=10.0)
    r = pcast.attention(q, k, v, backend="triton", fmt="e4m3fn", block_n=16, block_m=16, ksink=4)
    assert int(r.underflow_scale.abs().sum()) == 0 == int(r.groups_flushed.abs().sum())
    assert int(r.underflow.sum()) > 0
    rep = compare(q, k, v, fmt="nvfp4", scale=1.0, block_n=32, block_m=16, ksink=4)
    assert rep["kernel_backend"] == "triton-interpreted" and rep["explained"], rep["why"]


# ------------------------------------------------------------------------- explain is no rubber stamp

@pytest.fixture(scope="module")
def flush_case():
    """An nvfp4 call with flushed groups, its emulator result and its fragile elements."""
    q, k, v = make_inputs(7, heads=1, n=72, d=16, ksink=4, delta=12.0)
    kw = dict(fmt="nvfp4", scale=1.0, block_n=32, ksink=4)
    emu = pcast.attention(q, k, v, backend="emulator", **kw)
    fr = fragile_elements(q, k, fmt="nvfp4", scale=1.0, block_n=32)
    assert int(emu.groups_flushed.sum()) > 0
    return q, k, v, kw, emu, fr


@pytest.mark.parametrize("name", ["groups_flushed", "underflow_scale", "underflow", "saturated"])
def test_explain_rejects_a_count_off_by_one(flush_case, name):
    q, k, v, kw, emu, fr = flush_case
    quiet = ~(fr["fragile"] | fr["fragile_flush"] | fr["fragile_saturation"]).any(-1)  # rows with no boundary case
    assert bool(quiet.any())
    row = tuple(int(i) for i in quiet.nonzero()[0])
    assert explain(copy_result(emu), emu, q, k, v, fragile=fr, **kw)["explained"]
    bad = copy_result(emu)
    getattr(bad, name)[row] += 1
    rep = explain(bad, emu, q, k, v, fragile=fr, **kw)
    assert not rep["explained"] and name in rep["why"]


def test_explain_rejects_an_output_change_of_one_fp4_step(flush_case):
    q, k, v, kw, emu, fr = flush_case
    quiet = ~fr["fragile"].any(-1)
    row = tuple(int(i) for i in quiet.nonzero()[0])
    bad = copy_result(emu)
    bad.out[row] += 1e-4 * float(emu.out.abs().max())
    rep = explain(bad, emu, q, k, v, fragile=fr, **kw)
    assert not rep["explained"] and "differ" in rep["why"]


def _exact_scores(scores, d=16):
    """One query row whose scores against the keys are exactly ``scores`` (float32, sm_scale=1)."""
    q = torch.zeros(1, 1, 1, d)
    q[..., 0] = 1.0
    k = torch.zeros(1, 1, len(scores), d)
    k[0, 0, :, 0] = torch.tensor(scores, dtype=torch.float32)
    return q, k


def test_model_marks_an_e2m1_tie_and_not_its_neighbours():
    """nvfp4, S = 6: the key scoring 0 makes amax = 6 and the scale 1, so x / s = 6p. p = 1/24 (x / s = 0.25, the
    tie of 0 and 0.5, within an ulp) and p = 1/8 (0.75, the tie of 0.5 and 1) may round either way, the first
    to 0 or not; p = e^-1 (2.21) and e^-2 (0.81) may not."""
    q, k = _exact_scores([0.0, math.log(1 / 24), math.log(1 / 8), -1.0, -2.0] + [-30.0] * 11)
    fr = fragile_elements(q, k, fmt="nvfp4", scale=6.0, block_n=16, sm_scale=1.0)
    assert fr["fragile"][0, 0, 0, :5].tolist() == [False, True, True, False, False]
    assert fr["fragile_underflow"][0, 0, 0, :5].tolist() == [False, True, False, False, False]
    assert int(fr["fragile_groups"].sum()) == 0


def test_model_marks_a_group_scale_at_the_flush_threshold():
    """nvfp4, S = 1: a group whose amax / 6 is 2^-10 (half E4M3's smallest subnormal) may flush on one side only;
    a group whose amax / 6 is 2^-8 may not."""
    thr = math.log(6 * 2.0**-10)
    q, k = _exact_scores([0.0] + [-40.0] * 15 + [thr] + [thr - 0.5] * 15 + [math.log(6 * 2.0**-8)] + [-40.0] * 15)
    fr = fragile_elements(q, k, fmt="nvfp4", scale=1.0, block_n=16, sm_scale=1.0)
    assert int(fr["fragile_groups"].sum()) == 1
    assert fr["fragile_flush"][0, 0, 0, 16:32].all() and not fr["fragile_flush"][0, 0, 0, 32:].any()


def test_model_marks_an_mxfp4_amax_at_a_power_of_two():
    """mxfp4, S = 1: an amax within an ulp of 2^-3 may get the scale 2^-6 or 2^-5; an amax of 0.1 may not."""
    q, k = _exact_scores([0.0] + [-40.0] * 31 + [math.log(0.125)] + [math.log(0.03)] * 31
                         + [math.log(0.1)] + [math.log(0.03)] * 31)
    fr = fragile_elements(q, k, fmt="mxfp4", scale=1.0, block_n=32, sm_scale=1.0)
    assert fr["fragile"][0, 0, 0, 32:64].any() and not fr["fragile"][0, 0, 0, 64:].any()


# ------------------------------------------------------------------------- bad arguments

@pytest.mark.parametrize("kw,match", [
    (dict(fmt="mxfp4", block_n=16), "block_n=16"),
    (dict(fmt="nvfp4", block_n=16, scale_mode="exp2_offset"), "scale_mode='exp2_offset'"),
    (dict(fmt="mxfp4", scale_mode="per_row"), "scale_mode='per_row'"),
    (dict(fmt="nvfp4", scale_mode="per_row", scale=2.0), "scale=2.0"),
])
@pytest.mark.parametrize("backend", ["triton", "emulator"])
def test_bad_fp4_arguments_are_refused_naming_them(kw, match, backend):
    q = torch.randn(1, 1, 8, 16)
    with pytest.raises(ValueError, match=match.replace("(", r"\(")):
        pcast.attention(q, q, q, backend=backend, **kw)
