"""The FP8 tensor core's P·V arithmetic (``pv_arith``; docs/interfaces.md, "The tensor core's P·V arithmetic").

Three independent statements of one arithmetic meet here: the definition written out with Python fractions
in this file (scalar, exact rationals), the emulator's vectorised torch (:mod:`pcast.emulator.tensorcore`),
and mmasim 2.1.1's models of Ada ``mma``, Hopper ``wgmma`` and Blackwell ``tcgen05.mma`` (Microsoft's PTX MMA
simulator, called directly; those tests skip without it). Hand-built dots pin the truncation: 32 products of
2^-14 vanish against an accumulator of 1 with 13 alignment bits and survive with 25.
"""

import math
import sys
import zlib
from fractions import Fraction

import pytest
import torch

import pcast
from pcast.contract import PV_ARITHS
from pcast.emulator import tensorcore as tc

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

# (chunk L, alignment bits F, result bits) of each target, as docs/interfaces.md states them
SPEC = {"mma-sm89": (16, 13, 13), "wgmma-sm90": (32, 13, 13), "tcgen05-sm100": (32, 25, 23)}
EMIN = {"e4m3fn": -6, "e5m2": -14, "f32": -126}
TORCH_FP8 = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def _exp(x: float, emin: int) -> int:
    """x = s·2^e with 1 <= |s| < 2, e at least emin (x != 0)."""
    return max(math.frexp(x)[1] - 1, emin)


def _trunc_to(x: Fraction, step: Fraction) -> Fraction:
    q = x / step
    return Fraction(math.trunc(q)) * step  # toward zero


def _fused_fraction(a, b, c: float, F: int, R: int, fa: str, fb: str) -> float:
    """The definition, one chunk: align to the largest exponent, truncate each term onto 2^(e_max - F), sum
    exactly, truncate the sum to R fraction bits at its exponent (at least -126)."""
    terms = [(Fraction(x) * Fraction(y), _exp(x, EMIN[fa]) + _exp(y, EMIN[fb])) for x, y in zip(a, b) if x * y != 0]
    if c != 0:
        terms.append((Fraction(c), _exp(c, EMIN["f32"])))
    if not terms:
        return 0.0
    e_max = max(e for _, e in terms)
    total = sum(_trunc_to(t, Fraction(2) ** (e_max - F)) for t, _ in terms)
    if total == 0:
        return 0.0
    e = math.floor(math.log2(abs(total)))
    while abs(total) >= Fraction(2) ** (e + 1):  # log2's float rounding near a power of two
        e += 1
    while abs(total) < Fraction(2) ** e:
        e -= 1
    return float(_trunc_to(total, Fraction(2) ** (max(e, -126) - R)))


def _dot_fraction(a, b, c, arith, fa="e4m3fn", fb="e4m3fn") -> float:
    L, F, R = SPEC[arith]
    for k0 in range(0, len(a), L):
        c = _fused_fraction(a[k0:k0 + L], b[k0:k0 + L], c, F, R, fa, fb)
    return c


def _random_fp8(shape, fmt, gen, lo=-12, hi=8):
    """Values spread over many binades (so the alignment truncates), some zeros and subnormals, on the grid."""
    x = torch.randn(shape, generator=gen) * torch.exp2(torch.randint(lo, hi, shape, generator=gen).float())
    x[torch.rand(shape, generator=gen) < 0.1] = 0.0
    return x.clamp(-400, 400).to(TORCH_FP8[fmt])


# ----------------------------------------------------------------------------- the definition, by hand

@pytest.mark.parametrize("arith", list(SPEC))
def test_small_products_vanish_against_the_accumulator_by_hand(arith):
    # c = 1 has exponent 0; 32 products 2^-6 · 2^-8 = 2^-14 have exponent -14. With F = 13 the grid is 2^-13
    # and each product truncates to 0, so the sum stays 1; with F = 25 they all survive: 1 + 32·2^-14 = 1 + 2^-9.
    a, b = torch.full((32,), 2.0 ** -6), torch.full((32,), 2.0 ** -8)
    got = float(tc.fdpa(a, b, torch.tensor(1.0), arith))
    want = 1.0 if SPEC[arith][1] == 13 else 1.0 + 2.0 ** -9
    assert got == want == _dot_fraction(a.tolist(), b.tolist(), 1.0, arith)
    assert float(a @ b) + 1.0 == 1.0 + 2.0 ** -9  # float32 keeps them


@pytest.mark.parametrize("arith", list(SPEC))
def test_the_accumulator_is_aligned_to_the_largest_product_by_hand(arith):
    # 448·448: s = 1.75·1.75 = 3.0625 at exponent 8 + 8 = 16, so e_max = 16 and c = -1 lies on the grid
    # 2^(16 - F): with F = 13 (grid 8) it truncates to 0 and the result is 200704; with F = 25 it survives,
    # 200703, which 23 fraction bits at exponent 17 (grid 2^-6) keep.
    a, b = torch.zeros(32), torch.zeros(32)
    a[0] = b[0] = 448.0
    got = float(tc.fdpa(a, b, torch.tensor(-1.0), arith))
    want = 200704.0 if SPEC[arith][1] == 13 else 200703.0
    assert got == want == _dot_fraction(a.tolist(), b.tolist(), -1.0, arith)


@pytest.mark.parametrize("arith", list(SPEC))
def test_the_result_is_truncated_toward_zero_by_hand(arith):
    # 1·1 + 1·1 + (1.5·2^-6)·2^-6 = 2 + 3·2^-13, every term on the grid 2^-13 (e_max = 0). 13 fraction bits at
    # exponent 1 (grid 2^-12) truncate 1.5·2^-12 to 2^-12: 2 + 2^-12 (round to nearest would give 2 + 2^-11);
    # 23 bits keep 2 + 3·2^-13.
    a, b = torch.zeros(32), torch.zeros(32)
    a[:3] = torch.tensor([1.0, 1.0, 1.5 * 2.0 ** -6])
    b[:3] = torch.tensor([1.0, 1.0, 2.0 ** -6])
    got = float(tc.fdpa(a, b, torch.tensor(0.0), arith))
    want = 2.0 + 2.0 ** -12 if SPEC[arith][2] == 13 else 2.0 + 3 * 2.0 ** -13
    assert got == want == _dot_fraction(a.tolist(), b.tolist(), 0.0, arith)


@pytest.mark.parametrize("arith", list(SPEC))
@pytest.mark.parametrize("fa,fb", [("e4m3fn", "e4m3fn"), ("e5m2", "e4m3fn"), ("e4m3fn", "e5m2")])
def test_fdpa_equals_the_definition_in_fractions(arith, fa, fb):
    gen = torch.Generator().manual_seed(zlib.crc32(f"{arith} {fa} {fb}".encode()))
    a, b = _random_fp8((200, 64), fa, gen).float(), _random_fp8((200, 64), fb, gen).float()
    c = torch.randn(200, generator=gen) * torch.exp2(torch.randint(-20, 16, (200,), generator=gen).float())
    c[:10] = 0.0
    got = tc.fdpa(a, b, c, arith, fa, fb)
    want = [_dot_fraction(a[i].tolist(), b[i].tolist(), float(c[i]), arith, fa, fb) for i in range(200)]
    assert got.tolist() == want
    exact = (a.double() * b.double()).sum(-1) + c.double()
    assert (got.double() != exact).sum() > 50  # the truncation is hit, not skirted


# ----------------------------------------------------------------------------- mmasim, called directly

def _mmasim(arith, n, fa="e4m3fn", fb="e4m3fn"):
    pytest.importorskip("mmasim")
    return tc.mmasim_op(arith, n, fa, fb)


TILES = {"mma-sm89": (16, 8), "wgmma-sm90": (64, 64), "tcgen05-sm100": (128, 64)}


@pytest.mark.parametrize("arith", list(SPEC))
def test_mmasim_reproduces_the_hand_computed_truncation(arith):
    m, n = TILES[arith]
    A = torch.full((m, 32), 2.0 ** -6).to(torch.float8_e4m3fn)
    B = torch.full((32, n), 2.0 ** -8).to(torch.float8_e4m3fn)
    D = _mmasim(arith, n)(A, B, torch.ones(m, n))
    assert torch.all(D == (1.0 if SPEC[arith][1] == 13 else 1.0 + 2.0 ** -9))


@pytest.mark.parametrize("arith", list(SPEC))
@pytest.mark.parametrize("fa,fb", [("e4m3fn", "e4m3fn"), ("e5m2", "e4m3fn")])
def test_fdpa_equals_mmasim_bit_for_bit_on_random_tiles(arith, fa, fb):
    m, n = TILES[arith]
    op = _mmasim(arith, n, fa, fb)
    gen = torch.Generator().manual_seed(7)
    for _ in range(3):
        A, B = _random_fp8((m, 32), fa, gen), _random_fp8((32, n), fb, gen)
        C = torch.randn(m, n, generator=gen) * torch.exp2(torch.randint(-10, 14, (m, n), generator=gen).float())
        want = op(A, B, C)
        got = tc.fdpa(A.float()[:, None, :], B.float().T[None], C, arith, fa, fb)
        assert torch.equal(got.view(torch.int32), want.view(torch.int32))
        assert not torch.equal(got, A.float() @ B.float() + C)  # sums that hit the truncation


@pytest.mark.parametrize("arith", list(SPEC))
@pytest.mark.parametrize("reverse", [False, True])
def test_accumulate_equals_a_chain_of_mmasim_instructions(arith, reverse):
    """Step 5 over 4 blocks of 64 keys: acc·alpha, then the block's k = 32 instructions in ascending order."""
    m, n = TILES[arith]
    op = _mmasim(arith, n)
    gen = torch.Generator().manual_seed(3)
    P = _random_fp8((m, 256), "e4m3fn", gen, lo=-9, hi=2).float().abs()
    V = _random_fp8((256, n), "e4m3fn", gen).float()
    alpha = torch.rand(m, 4, generator=gen)
    acc = torch.zeros(m, n)
    for j in (range(3, -1, -1) if reverse else range(4)):
        acc = acc * alpha[:, j, None]
        for k0 in range(64 * j, 64 * j + 64, 32):
            acc = op(P[:, k0:k0 + 32].to(torch.float8_e4m3fn), V[k0:k0 + 32].to(torch.float8_e4m3fn), acc)
    pv = tc.PVOperands(arith, (), (), "e4m3fn", "e4m3fn")
    got = tc.accumulate(P, V, alpha, pv, 64, reverse)
    assert torch.equal(got.view(torch.int32), acc.view(torch.int32))


@pytest.mark.parametrize("arith", list(SPEC))
@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_attention_with_uniform_scores_equals_mmasim(arith, order):
    """q = 0: every score is 0, so x = S at every key (exp2_offset, S = 256 exact in E4M3), alpha = 1 after the
    first block, l = N·S; the output is mmasim's chain of S times V's FP8 values, times s_v, over l."""
    n_keys, d, S = 256, 64, 256.0
    op = _mmasim(arith, 8 if arith == "mma-sm89" else d)
    gen = torch.Generator().manual_seed(5)
    v = torch.randn(1, 1, n_keys, d, generator=gen) * torch.exp2(torch.randint(-6, 3, (1, 1, n_keys, d), generator=gen))
    q, k = torch.zeros(1, 1, 16, d), torch.randn(1, 1, n_keys, d, generator=gen)
    r = pcast.attention(q, k, v, order=order, scale=S, scale_mode="exp2_offset", v_fmt="e4m3fn", pv_arith=arith,
                          backend="emulator")
    s_v = v.abs().amax() / torch.tensor(448.0)
    vq = (v[0, 0] / s_v).to(torch.float8_e4m3fn)
    A = torch.full((16, 32), S).to(torch.float8_e4m3fn)
    blocks = range(3, -1, -1) if order == "reverse" else range(4)
    cols = [slice(c0, c0 + 8) for c0 in range(0, d, 8)] if arith == "mma-sm89" else [slice(0, d)]
    acc = torch.zeros(16, d)
    for j in blocks:
        for k0 in range(64 * j, 64 * j + 64, 32):
            for cs in cols:
                acc[:, cs] = op(A, vq[k0:k0 + 32, cs], acc[:, cs].contiguous())
    want = (acc * s_v) / (torch.tensor(float(n_keys)) * S)
    assert torch.equal(r.out[0, 0], want)
    assert not torch.equal(r.out, pcast.attention(q, k, v, order=order, scale=S, scale_mode="exp2_offset",
                                                    v_fmt="e4m3fn", backend="emulator").out)


# ----------------------------------------------------------------------------- the option at the front door

def test_fp32_is_the_contract_bit_for_bit():
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 128, 64, generator=gen) for _ in range(3))
    a = pcast.attention(q, k, v, v_fmt="e4m3fn", backend="emulator")
    b = pcast.attention(q, k, v, v_fmt="e4m3fn", backend="emulator", pv_arith="fp32")
    assert torch.equal(a.out, b.out)


@pytest.mark.parametrize("promote", [0, 1])
@pytest.mark.parametrize("arith", ["wgmma-sm90", "tcgen05-sm100"])
def test_every_entry_point_gives_the_same_bits(arith, promote):
    gen = torch.Generator().manual_seed(2)
    q, k = (torch.randn(2, 2, 96, 64, generator=gen) for _ in range(2))
    vs = [torch.randn(2, 2, 96, 64, generator=gen) for _ in range(2)]
    kw = dict(v_fmt="e4m3fn", backend="emulator", pv_arith=arith, ksink=4, pv_promote=promote)
    one = [[pcast.attention(q, k, v, order=o, scale=s, **kw).out for v in vs]
           for o in ("forward", "reverse") for s in (1.0, 256.0)]
    calls = [dict(order=o, scale=s) for o in ("forward", "reverse") for s in (1.0, 256.0)]
    many = pcast.attention_calls(q, k, vs, calls, **kw)
    assert all(torch.equal(x, y.out) for row, rrow in zip(one, many) for x, y in zip(row, rrow))
    scales = pcast.attention_scales(q, k, vs, scales=(1.0, 256.0), order="reverse", **kw)
    assert all(torch.equal(x, y.out) for row, rrow in zip(one[2:], scales) for x, y in zip(row, rrow))
    # calls that differ only in the promotion interval do not share the tensor core's operands' results
    both = pcast.attention_calls(q, k, vs, [dict(pv_promote=0), dict(pv_promote=1)],
                                 **{n: x for n, x in kw.items() if n != "pv_promote"})
    assert torch.equal(both[promote][0].out, one[0][0])


@pytest.mark.parametrize("kw,named", [
    (dict(pv_arith="wgmma"), "pv_arith='wgmma'"),
    (dict(pv_arith="wgmma-sm90", backend="triton"), "pv_arith='wgmma-sm90' is not allowed with backend"),
    (dict(pv_arith="wgmma-sm90", backend="reference"), "pv_arith='wgmma-sm90' is not allowed with backend"),
    (dict(pv_arith="wgmma-sm90", v_fmt=None), "v_fmt=None"),
    (dict(pv_arith="wgmma-sm90", fmt="bf16"), "fmt='bf16'"),
    (dict(pv_arith="wgmma-sm90", block_n=16), "block_n=16"),
    (dict(pv_arith="wgmma-sm90", num_splits=2), "pv_arith='wgmma-sm90' is not allowed with num_splits"),
    (dict(pv_arith="wgmma-sm90", pv_promote=-1), "pv_promote=-1"),
    (dict(pv_arith="wgmma-sm90", pv_promote=1.0), "pv_promote=1.0"),
    (dict(pv_promote=4), "pv_promote=4 is not allowed with pv_arith='fp32'"),
    (dict(pv_arith="wgmma-sm90", pv_promote=4, backend="triton"), "pv_arith='wgmma-sm90' is not allowed with backend"),
])
def test_bad_use_is_one_line_naming_the_argument(kw, named):
    q = torch.randn(1, 1, 64, 64)
    kw = {"v_fmt": "e4m3fn", "backend": "emulator", **kw}
    with pytest.raises(ValueError, match="^" + named.replace("(", r"\(").replace("[", r"\[")) as e:
        pcast.attention(q, q, q, **kw)
    assert "\n" not in str(e.value) and "allowed" in str(e.value)


def test_contract_lists_every_target():
    assert set(PV_ARITHS) == {"fp32", *SPEC} and set(tc.TENSOR_CORES) == set(SPEC)


def test_missing_mmasim_is_named_with_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mmasim", None)
    monkeypatch.setitem(sys.modules, "mmasim.nv_ptx", None)
    with pytest.raises(ImportError, match=r"^mmasim not installed; pip install pcast-fp8\[tensorcore\]$"):
        tc.mmasim_op("wgmma-sm90", 64)
    # the emulator's own arithmetic needs no mmasim
    a = torch.full((32,), 2.0 ** -6)
    assert float(tc.fdpa(a, a, torch.tensor(0.0), "wgmma-sm90")) == 32 * 2.0 ** -12


def test_the_gpu_check_runs_the_emulator_with_the_gpus_tensor_core_then_needs_a_gpu(monkeypatch):
    """``pcast-gpu-check``'s deploy check on a CPU: the emulator's side with Hopper's arithmetic runs, then the
    deploy kernel stops with the error that names ``--compile-only``."""
    from pcast import api
    from pcast.cli import gpu_check

    seen = []
    real = api.attention

    def spy(*a, **kw):
        seen.append(kw.get("pv_arith", "fp32"))
        return real(*a, **kw)

    monkeypatch.setattr(gpu_check, "attention", spy)  # the name gpu_check calls
    with pytest.raises(RuntimeError, match="--compile-only"):
        gpu_check.check_deploy(n=128, d=64, heads=1, reps=1, capability=(9, 0))
    assert seen == ["fp32", "wgmma-sm90"]
    assert [tc.pv_arith_for(c) for c in ((8, 9), (9, 0), (10, 0), (12, 0))] == ["mma-sm89", "wgmma-sm90",
                                                                              "tcgen05-sm100", None]
    if not api.fp8_gpu_available():
        with pytest.raises(RuntimeError, match="--compile-only"):
            gpu_check.check_deploy(n=128, d=64, heads=1, reps=1)
