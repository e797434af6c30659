"""The interpreter's FP8 downcast under pcast.triton.fp8cast.fp8_cast_fixed, against torch's cast.

Reference: torch's round-to-nearest-even cast after clamping to ±(the format's largest finite value), NaN kept
(torch's own casts do not saturate). The inputs go through a real interpreted Triton kernel (``x.to(fp8)``
bitcast to uint8), so the test sees the conversion a third-party kernel sees. Inputs: every float32
exponent (subnormals included) with several significands, every tie between neighbouring FP8 values and the
float32 values either side of it, the saturation boundary, infinities, NaN and both zeros, in both signs.
"""

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from pcast.triton.fp8cast import FIXED_FORMATS, fp8_bits, fp8_cast_fixed
from pcast.triton.interpret import interpreted, interpreting

# Triton's name -> (triton dtype, torch dtype): every FP8 format both name.
FORMATS = {
    "fp8e5": (tl.float8e5, torch.float8_e5m2),
    "fp8e5b16": (tl.float8e5b16, torch.float8_e5m2fnuz),
    "fp8e4nv": (tl.float8e4nv, torch.float8_e4m3fn),
    "fp8e4b8": (tl.float8e4b8, torch.float8_e4m3fnuz),
}


@triton.jit
def _cast(x_ptr, out_ptr, n, DST: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, x.to(DST).to(tl.uint8, bitcast=True), mask=offs < n)


def interpreted_cast(x: torch.Tensor, dst) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=torch.uint8)
    block = 1024
    with interpreting():
        interpreted(_cast.fn)[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), DST=dst, BLOCK=block)
    return out


def reference(x: torch.Tensor, dt) -> torch.Tensor:
    top = torch.finfo(dt).max
    return x.float().clamp(-top, top).to(dt).view(torch.uint8)


def inputs(dt) -> torch.Tensor:
    """Every float32 exponent, the FP8 grid's ties and their neighbours, the saturation boundary."""
    exps = torch.arange(-149, 128, dtype=torch.float64)
    sig = torch.tensor([1.0, 1.0625, 1.125, 1.1875, 1.25, 1.375, 1.5, 1.75, 1.9375, 1.99999988079071])
    pow2 = torch.cat([(2.0 ** exps[:23]) * 1.0, (2.0 ** exps[23:, None] * sig).flatten()]).float()
    grid = torch.arange(256, dtype=torch.uint8).view(dt).float()
    grid = torch.unique(grid[torch.isfinite(grid)])
    ties = (grid[:-1].double() + grid[1:].double()) / 2
    ties = ties.float()
    near = torch.cat([ties, torch.nextafter(ties, torch.tensor(-np.inf)), torch.nextafter(ties, torch.tensor(np.inf))])
    top = torch.tensor(torch.finfo(dt).max)
    step = top - grid[grid < top].max()
    edge = torch.stack([top, top + step / 2, top + step, top * 2, torch.nextafter(top + step / 2, top),
                        torch.nextafter(top, torch.tensor(np.inf)), torch.tensor(3.4e38),
                        torch.tensor(np.inf), torch.tensor(np.nan), torch.tensor(0.0)])
    x = torch.cat([pow2, grid, near, edge]).float()
    return torch.cat([x, -x])


def mismatches(name: str, source=torch.float32) -> tuple[int, int, list]:
    tdt, dt = FORMATS[name]
    x = inputs(dt).to(source)
    got = interpreted_cast(x, tdt)
    want = reference(x, dt)
    bad = (got != want) & ~(got.view(dt).float().isnan() & want.view(dt).float().isnan())  # a NaN's sign is free
    examples = [(float(a), int(g), int(w)) for a, g, w in zip(x[bad][:5].float(), got[bad][:5], want[bad][:5])]
    return int(bad.sum()), x.numel(), examples


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_fixed_cast_is_torch_rne_with_satfinite(name):
    with fp8_cast_fixed():
        bad, n, examples = mismatches(name)
    assert bad == 0, f"{name}: {bad} of {n} codes differ from torch's satfinite RNE, e.g. (x, got, want) {examples}"


@pytest.mark.parametrize("source", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["fp8e4nv", "fp8e5"])
def test_fixed_cast_from_half_sources(name, source):
    with fp8_cast_fixed():
        bad, n, examples = mismatches(name, source)
    assert bad == 0, f"{name} from {source}: {bad} of {n} codes differ, e.g. (x, got, want) {examples}"


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_the_same_check_fails_without_the_fix(name):
    """Triton's own conversion fails the check above (were it fixed upstream, this test says so)."""
    bad, n, examples = mismatches(name)
    print(f"{name} without the fix: {bad} of {n} codes differ, e.g. (x, got, want) {examples}")
    assert bad > 0


def test_the_fix_is_scoped():
    from triton.runtime import interpreter as ti

    before = ti._convert_float
    with fp8_cast_fixed():
        assert ti._convert_float is not before
        with fp8_cast_fixed():  # re-entrant
            pass
        assert ti._convert_float is not before
    assert ti._convert_float is before


def test_issue_examples_and_table_against_torch():
    """The three values that went wrong in e4m3fn, and the table's largest finite values against torch's."""
    x = np.array([3 / 2048, 0.00293, 500.0], dtype=np.float32)
    got = torch.from_numpy(fp8_bits(x, FIXED_FORMATS["fp8e4nv"])).view(torch.float8_e4m3fn).float().tolist()
    assert got == [2.0 ** -9, 0.00390625, 448.0]
    for name, (_, dt) in FORMATS.items():
        assert FIXED_FORMATS[name].max_finite == torch.finfo(dt).max, name


def test_float8e4b15_is_left_to_triton():
    """torch has no float8e4b15: the fix leaves its conversion to Triton (which wraps 3.0 to 1.5 there)."""
    x = torch.tensor([1.0, 0.5, 3.0, 2.0 ** -10, 1e-6])
    before = interpreted_cast(x, tl.float8e4b15)
    with fp8_cast_fixed():
        assert torch.equal(interpreted_cast(x, tl.float8e4b15), before)
    assert "fp8e4b15" not in FIXED_FORMATS
