"""Dynamic P scales (docs/interfaces.md, "Dynamic P scales"): the emulator against the loop oracle, the alias,
rows of one tile changing each other, padded rows pinning the tile max, and the refusals."""

import pytest
import torch

import pcast
from pcast.policies import Policy
from pcast.probes.inputs import Probe
from tests.support.loop_contract import loop_attention


def _inputs(nq=72, nk=200, seed=0, sink=3.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, nq, 64, generator=g)
    k = torch.randn(1, 2, nk, 64, generator=g) * 2
    k[:, :, 0] += sink * q.mean(2)  # a key above the others in the first block
    v = torch.randn(1, 2, nk, 64, generator=g)
    return q, k, v


@pytest.mark.parametrize("mode", ["per_row", "tile_max", "tile_max_padded"])
@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("causal", [None, "bottom_right"])
@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
def test_emulator_equals_the_loop_oracle(mode, order, causal, fmt):
    q, k, v = _inputs()
    kw = dict(scale_mode=mode, order=order, causal=causal is not None, causal_align=causal, block_m=32, fmt=fmt)
    r = pcast.attention(q, k, v, backend="emulator", **kw)
    out, diag = loop_attention(q, k, v, **kw)
    # the counts of the same casts; the output differs only where 1/S is applied (a float32 rounding)
    for name in ("terms", "terms_sink", "underflow", "underflow_sink"):
        assert torch.equal(getattr(r, name), diag[name]), name
    torch.testing.assert_close(r.out, out, rtol=1e-5, atol=2e-6)
    # saturated: the region's max lands within one float32 ulp of the target, above it or not (a boundary count)
    nblk = -(-k.shape[2] // 64)
    assert int((r.saturated - diag["saturated"]).abs().max()) <= nblk


def test_row_block_max_is_per_row():
    q, k, v = _inputs()
    a = pcast.attention(q, k, v, scale_mode="row_block_max", backend="emulator")
    b = pcast.attention(q, k, v, scale_mode="per_row", backend="emulator")
    assert torch.equal(a.out, b.out) and torch.equal(a.underflow, b.underflow)
    assert Policy(name="x", scale_mode="row_block_max").scale_mode == "per_row"


def test_rows_of_one_tile_change_each_other_under_tile_max_only():
    """A 64th row whose tail is shallower than the others' raises the tile's max in the later blocks, so the
    other 63 rows' S and outputs change under tile_max; under per_row they do not."""
    n = 256
    logits = torch.cat([torch.zeros(64, 1), torch.full((64, n - 1), -18.0)], 1)
    logits[63, 1:] = -4.0
    probe = Probe("t", "", "", logits)
    q, k, v, _ = probe.tensors()
    for mode, changes in (("tile_max", True), ("per_row", False)):
        full = pcast.attention(q, k, v, scale_mode=mode, block_m=64, backend="emulator").out[0, 0, :63]
        part = pcast.attention(q[:, :, :63], k, v, scale_mode=mode, block_m=64, backend="emulator").out[0, 0]
        assert (not torch.equal(full, part)) == changes, mode
    # alone, the deep rows' later blocks are lifted to 448 (only the first block's tail, cast against key 0,
    # underflows); with the shallow row (4 below) they sit at 448·e^-14, below half E4M3's smallest subnormal
    alone = pcast.attention(q[:, :, :63], k, v, scale_mode="tile_max", backend="emulator").underflow[0, 0]
    pinned = pcast.attention(q, k, v, scale_mode="tile_max", backend="emulator").underflow[0, 0, :63]
    assert bool((alone == 63).all()) and bool((pinned == n - 1).all())


def test_padded_rows_pin_the_tile_max_at_one():
    """Under tile_max_padded a call of fewer than block_m rows casts as static S = 448 does (the same p_q, so the
    same counts); tile_max lifts the deep tails instead."""
    logits = torch.cat([torch.zeros(40, 1), torch.full((40, 255), -18.0)], 1)
    q, k, v, _ = Probe("t", "", "", logits).tensors()
    padded = pcast.attention(q, k, v, scale_mode="tile_max_padded", backend="emulator")
    static = pcast.attention(q, k, v, scale=448.0, backend="emulator")
    own = pcast.attention(q, k, v, scale_mode="tile_max", backend="emulator")
    assert torch.equal(padded.underflow, static.underflow) and torch.equal(padded.terms, static.terms)
    assert int(own.underflow.sum()) < int(padded.underflow.sum())


@pytest.mark.parametrize("kw, word", [
    (dict(scale_mode="tile_max", backend="triton"), "backend"),
    (dict(scale_mode="per_row", fmt="e4m3fn", backend="triton"), "scale_mode='per_row' with fmt='e4m3fn'"),
    (dict(scale_mode="per_row", fmt="mxfp4"), "fmt='mxfp4'"),
    (dict(scale_mode="per_row", scale=2.0), "scale=2.0"),
    (dict(scale_mode="tile_max", rescale_threshold=4.0), "rescale_threshold"),
    (dict(scale_mode="tile_max", fmt="bf16"), "fmt='bf16'"),
    (dict(scale_mode="tile_max", fmt="nvfp4"), "fmt='nvfp4'"),
    (dict(scale_mode="per_row", fmt=None), "fmt=None"),
    (dict(scale_mode="tile_max", num_splits=2), "num_splits"),
])
def test_refused_before_any_work(kw, word):
    q, k, v = _inputs(nq=16, nk=64)
    with pytest.raises(ValueError, match=word.replace("(", r"\(").replace(".", r"\.")):
        pcast.attention(q, k, v, **({"backend": "emulator"} | kw))


def test_audit_flag_takes_the_dynamic_modes_at_s_1():
    import argparse

    from pcast.audit.flags import policy_fields, yours
    from pcast.cli.audit import add_policy_flags

    ap = argparse.ArgumentParser()
    add_policy_flags(ap)

    def parsed(argv):
        args = ap.parse_args(argv)
        return yours({f.name: getattr(args, f"p_{f.name}") for f in policy_fields()}, args.exp2_offset)

    for mode, want in (("tile_max", "tile_max"), ("row_block_max", "per_row")):
        p = parsed(["--scale-mode", mode, "--block-m", "64"])
        assert (p.scale_mode, p.scale, p.block_m) == (want, 1.0, 64)
    assert parsed(["--scale-mode", "tile_max", "--scale", "2"]).scale == 2.0  # a given S is kept
    assert parsed([]).scale == 256.0  # a static scale keeps the recommended default


def test_attention_calls_run_a_tile_mode_as_attention_does():
    q, k, v = _inputs(nq=200, nk=3072)  # 85 rows a chunk of the shared calls: not whole tiles of 64
    calls = [dict(scale_mode="tile_max", block_m=64), dict(scale=256.0)]
    got = pcast.attention_calls(q, k, [v], calls)
    for res, kw in zip(got, calls):
        one = pcast.attention(q, k, v, backend="emulator", **kw)
        assert torch.equal(res[0].out, one.out) and torch.equal(res[0].underflow, one.underflow)
