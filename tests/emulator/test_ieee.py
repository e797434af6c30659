"""The contract's float32 exp, exp2 and block sums (:mod:`pcast.emulator.ieee`) against float64 and against
their compiled twins (:mod:`pcast.emulator.fusedmath`).

Accuracy is checked against numpy's float64 exp / exp2 on 6M float32 arguments (fixed seed) across the range
the P path uses, the underflow edge and the subnormal results included; the two implementations must give
the same bits on all of them. The pairwise order of ``tree_sum`` is checked against a recursive float32
sum written here from its definition.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pcast.conformance.model import EXP_REL_ERR_CPU
from pcast.emulator import fusedmath, ieee

_U = 2.0 ** -23


@pytest.fixture(scope="module")
def args() -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.concatenate([rng.uniform(-104.0, 89.0, 4_000_000), rng.uniform(-1.0, 1.0, 1_000_000),
                           rng.uniform(-104.0, -86.0, 1_000_000)]).astype(np.float32)


@pytest.mark.parametrize("name", ["exp", "exp2"])
def test_within_one_ulp_of_float64_and_the_same_bits_compiled(args, name):
    x = args if name == "exp" else (args * np.float32(1.4426950408889634)).astype(np.float32)
    torch_op, compiled_op, ref = ((ieee.exp, fusedmath.exp_array, np.exp) if name == "exp"
                                  else (ieee.exp2, fusedmath.exp2_array, np.exp2))
    got = torch_op(torch.from_numpy(x)).numpy()
    assert np.array_equal(got.view(np.int32), compiled_op(x).view(np.int32))
    r = ref(x.astype(np.float64))
    normal = (r >= 2.0 ** -126) & (r < 3.0e38)
    ulp = np.exp2(np.floor(np.log2(r[normal])) - 23)
    err = np.abs(got[normal].astype(np.float64) - r[normal]) / ulp
    assert 0.5 < err.max() < 1.0  # faithful: never a full ulp off (0.5 < : not correctly rounded, a real test)
    assert err.max() * _U * 2 <= EXP_REL_ERR_CPU  # inside the bound conformance allows the emulator's exp
    sub = (r < 2.0 ** -126) & (r > 0)
    assert sub.sum() > 1000
    assert (np.abs(got[sub].astype(np.float64) - r[sub]) / 2.0 ** -149).max() < 1.0


def test_special_values():
    x = torch.tensor([float("-inf"), float("inf"), float("nan"), 0.0, -104.0, -103.9])
    e = ieee.exp(x)
    assert e[0] == 0 and e[1] == float("inf") and torch.isnan(e[2]) and e[3] == 1.0
    assert e[4] == 0 and e[5] == 2.0 ** -149  # e^-104 < 2^-150 rounds to 0; e^-103.9 to the least subnormal
    t = torch.tensor([float("-inf"), 128.0, -149.0, -150.5, 3.0])
    assert ieee.exp2(t).tolist() == [0.0, float("inf"), 2.0 ** -149, 0.0, 8.0]


def _tree_reference(v: list) -> np.float32:
    """The pairwise order from its definition: value i gets value i + n//2 added; an odd last value moves down."""
    v = [np.float32(a) for a in v]
    while len(v) > 1:
        h = len(v) // 2
        v = [np.float32(v[i] + v[i + h]) for i in range(h)] + v[2 * h:]
    return v[0]


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 96, 192])
def test_tree_sum_order(n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((5, n)) * 10.0 ** rng.uniform(-6, 6, (5, n))).astype(np.float32)
    got = ieee.tree_sum(torch.from_numpy(x)).numpy()
    want = np.array([_tree_reference(list(r)) for r in x], np.float32)
    assert np.array_equal(got.view(np.int32), want.view(np.int32))
    if n >= 64:  # the order matters: a plain left-to-right sum differs somewhere
        seq = np.array([np.float32(np.cumsum(r, dtype=np.float32)[-1]) for r in x])
        assert not np.array_equal(seq, want)
