"""One call through the three implementations of the contract, every difference explained.

The Triton kernel (interpreted on a CPU), the emulator and the plain loop oracle
(:mod:`loop_contract`) run the same call; :func:`pcast.conformance.explain` must explain every
pairwise difference, and where the diagnostics agree the outputs agree to 1e-5 relative except on
rows that hold a boundary element.

The interpreter costs seconds a call, the emulator and the loop milliseconds, so a large grid runs
the emulator against the loop everywhere and the kernel on a covering subset (:func:`covering`):
every value of every parameter meets the kernel at least once.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

import pcast
from pcast.conformance import explain, fragile_elements
from pcast.contract import DIAGNOSTICS

from loop_contract import loop_attention

#: The keywords of pcast.attention that pcast.conformance.fragile_elements takes.
MODEL_KEYS = ("order", "scale", "fmt", "causal", "block_n", "sm_scale", "scale_mode", "rescale_threshold",
              "sink_logit", "sink_mode", "qk_fmt", "qk_scale")


def sink_inputs(seed, nq, nk, d, *, delta=7.0, ksink=4, b=1, h=2):
    """Random q, k, v [b, h, n, d] whose first ksink keys score about delta above the rest."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, nq, d, generator=g)
    k = torch.randn(b, h, nk, d, generator=g)
    v = torch.randn(b, h, nk, d, generator=g)
    # push the sink keys along the mean query direction so most rows see a strong sink
    qm = q.mean(2, keepdim=True)
    k[:, :, :ksink] += qm * (delta * math.sqrt(d) / qm.pow(2).sum(-1, keepdim=True))
    return q, k, v


def as_result(out, diag):
    return SimpleNamespace(out=out, **diag)


def copy_result(r):
    return SimpleNamespace(out=r.out.clone(), **{n: getattr(r, n).clone() for n in DIAGNOSTICS})


def model(q, k, **kw):
    """fragile_elements of the call with keywords ``kw`` (those of pcast.attention)."""
    return fragile_elements(q, k, **{n: kw[n] for n in MODEL_KEYS if n in kw})


def check_three(q, k, v, *, block_m=64, rowsum="unrounded", triton=True, **kw):
    """Triton (interpreted; skipped with ``triton=False``), emulator and loop agree on one call
    (keywords ``kw`` of pcast.attention), every difference explained.

    Returns ``(triton result or None, emulator result, loop result, reports by pair)``. A causal call
    with Nq < Nk and no ``causal_align`` runs top-left aligned, the mask these tests check.
    """
    if kw.get("causal") and q.shape[2] < k.shape[2] and "causal_align" not in kw:
        kw = {**kw, "causal_align": "top_left"}
    emu = pcast.attention(q, k, v, backend="emulator", block_m=block_m, rowsum=rowsum, **kw)
    assert emu.backend == "emulator"
    loop = as_result(*loop_attention(q, k, v, rowsum=rowsum, **kw))
    pairs = [("loop/emulator", loop, emu)]
    tri = None
    if triton:
        tri = pcast.attention(q, k, v, backend="triton", block_m=block_m, rowsum=rowsum, **kw)
        assert tri.backend == "triton-interpreted"
        pairs += [("triton/emulator", tri, emu), ("triton/loop", tri, loop)]
    fr = model(q, k, **kw)
    reps = {}
    for name, a, b in pairs:
        rep = explain(a, b, q, k, v, fragile=fr, **kw)
        assert rep["explained"], f"{name}: {rep['why']}"
        # The output bound widens only on rows that hold a boundary element; elsewhere 1e-5 holds.
        if rep["diag_equal"]:
            assert rep["max_rel_diff"] <= 1e-5 or rep["fragile_elements"] > 0, name
        reps[name] = rep
    return tri, emu, loop, reps


def covering(index: tuple[int, ...], sizes: tuple[int, ...]) -> bool:
    """Whether the grid point ``index`` (one index per parameter, ``sizes`` values each) is in the
    kernel's covering subset: the last parameter's index equals the sum of the others modulo its
    size. Every combination of the other parameters meets exactly one value of the last, and every
    value of the last meets several combinations of the others (when they number at least as many)."""
    assert len(index) == len(sizes) and all(0 <= i < s for i, s in zip(index, sizes))
    return index[-1] == sum(index[:-1]) % sizes[-1]
