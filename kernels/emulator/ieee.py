"""The contract's float32 ``exp``, ``exp2`` and block sums, as IEEE float32 operations in a fixed order.

torch's float32 ``exp`` differs in its last bit between CPU code paths (``ATEN_CPU_CAPABILITY``), and its sums
follow the vector width. The emulator's P path uses these instead, so its float32 values are the same on every
CPU and its compiled pass (:mod:`pcast.emulator.fused`) runs the very same operations: each function here is
written twice, as torch operations (below) and as numba scalar code (:mod:`pcast.emulator.fusedmath`), op for op
(no fused multiply-add: no ``alpha=`` in torch, no fast-math in numba).

``exp(x)``, after Cephes' ``expf``:

* ``x`` clamped to [-110, 89] (``-inf`` gives 0, ``+inf`` gives inf; NaN stays NaN);
* ``k = (x·LOG2E + 1.5·2²³) − 1.5·2²³`` (x/ln 2 rounded to an integer, ties to even);
* ``r = (x − k·LN2_HI) − k·LN2_LO`` (``LN2_HI`` has 15 significant bits, so ``k·LN2_HI`` is exact);
* ``y = ((P(r)·r²) + r) + 1``, P of degree 5 in Horner form;
* ``e^x = (y·2^k₁)·2^k₂`` with ``k₁ = k >> 1``, ``k₂ = k − k₁``: both powers are normal and only the last
  product can round, so a result in float32's subnormal range is rounded once.

``exp2(t)``: the same with ``k`` the integer nearest ``t``, ``r = (t − k)·LN2`` (``t − k`` exact).

Both are faithful: within one ulp of the exact value (at most 0.97 ulp measured; ``tests/emulator/test_ieee.py``
checks 6M float32 arguments across the P path's range, the subnormal results included, against float64),
well inside the bound the exact decisions allow for exp (:mod:`pcast.emulator.exact`).

``tree_sum(x)`` sums the last dimension pairwise: while more than one value is left, value i gets value
``i + h`` added (``h = n // 2``; an odd last value moves down unchanged), the order a vectorised loop keeps.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from pcast.contract import LOG2E

__all__ = ["exp", "exp2", "fma32", "tree_sum", "EXP_CONSTANTS"]

_F = np.float32
#: The constants of :func:`exp` and :func:`exp2`, float32 (shared with the compiled pass).
EXP_CONSTANTS = dict(
    MAGIC=_F(12582912.0), LN2=_F(0.6931471805599453),
    LN2_HI=_F(0.693145751953125), LN2_LO=_F(1.428606765330187045e-06),
    P0=_F(1.9875691500e-4), P1=_F(1.3981999507e-3), P2=_F(8.3334519073e-3), P3=_F(4.1665795894e-2),
    P4=_F(1.6666665459e-1), P5=_F(5.0000001201e-1), LO=_F(-110.0), HI=_F(89.0), LO2=_F(-160.0), HI2=_F(129.0))
EXP_CONSTANTS["LOG2E"] = _F(LOG2E)  # the contract's float32 log2(e)
_K = {n: float(v) for n, v in EXP_CONSTANTS.items()}


def _poly_scale(r: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``((P(r)·r²) + r) + 1`` times ``2^k`` as two normal powers of two; r, k float32 (k integral)."""
    z = r * r
    y = r * _K["P0"]
    y.add_(_K["P1"])
    for c in ("P2", "P3", "P4", "P5"):
        y.mul_(r).add_(_K[c])
    y.mul_(z).add_(r).add_(1.0)
    ki = k.to(torch.int32)
    k1 = ki >> 1
    k2 = ki - k1
    s1 = ((k1 + 127) << 23).view(torch.float32)
    s2 = ((k2 + 127) << 23).view(torch.float32)
    return y.mul_(s1).mul_(s2)


def exp(x: torch.Tensor) -> torch.Tensor:
    """float32 ``e^x`` of a float32 tensor (a new tensor), the same bits on every device and CPU."""
    x = torch.clamp(x, min=_K["LO"], max=_K["HI"])
    k = (x * _K["LOG2E"]).add_(_K["MAGIC"]).sub_(_K["MAGIC"])
    r = x - k * _K["LN2_HI"]
    r.sub_(k * _K["LN2_LO"])
    return _poly_scale(r, k)


def exp2(t: torch.Tensor) -> torch.Tensor:
    """float32 ``2^t`` of a float32 tensor (a new tensor), the same bits on every device and CPU."""
    t = torch.clamp(t, min=_K["LO2"], max=_K["HI2"])
    k = (t + _K["MAGIC"]).sub_(_K["MAGIC"])
    r = (t - k).mul_(_K["LN2"])
    return _poly_scale(r, k)


def tree_sum(x: torch.Tensor) -> torch.Tensor:
    """The sum over the last dimension of x in the fixed pairwise order (module docstring)."""
    n = x.shape[-1]
    if n == 0:
        return x.sum(-1)
    while n > 1:
        h = n // 2
        y = x[..., :h] + x[..., h:2 * h]
        x = torch.cat([y, x[..., 2 * h:]], -1) if n % 2 else y
        n = x.shape[-1]
    return x[..., 0]


def fma32(a: torch.Tensor, b: float, c: torch.Tensor) -> torch.Tensor:
    """float32 ``a·b + c`` rounded once (a fused multiply-add) of float32 ``a``, ``c`` (broadcast) and a
    float32 constant ``b``: the product is exact in float64 (24 + 24 bits), the sum is rounded to float64 by
    round-to-odd (the exact error of the float64 sum decides), then once to float32, which round-to-odd with
    29 spare bits makes correct (no double rounding). Infinite inputs give the infinite sum."""
    p = a.double() * float(b)
    c = c.double()
    d = p + c
    t = d - p
    e = (p - (d - t)) + (c - t)  # the exact error of the float64 sum: p + c = d + e
    even = (d.view(torch.int64) & 1) == 0
    away = torch.where(e > 0, torch.tensor(math.inf, dtype=torch.float64), torch.tensor(-math.inf, dtype=torch.float64))
    d = torch.where(even & (e != 0) & torch.isfinite(d), torch.nextafter(d, away), d)
    return d.float()
