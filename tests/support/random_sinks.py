"""Sink keys in a random direction: the first ``ksink`` keys moved by ``Δ·sqrt(d)·q̄/|q̄|²`` (q̄ the mean query),
so that the mean query's score against them gains Δ, with norms of a few hundred at Δ = 15 (|q̄|² ≈ d/N).

Drawn and built in float64, then rounded to float32: the same bits under every vector ISA. (torch's float32
``randn`` is not: its Box–Muller transform is vectorised, and under ``ATEN_CPU_CAPABILITY=default`` and ``=avx2``
it draws different numbers from one seed, as float32 means and norms may differ in their last bits.)
"""

from __future__ import annotations

import math

import torch


def random_sink_inputs(seed: int, deltas, *, heads: int = 2, n: int = 1024, d: int = 64, ksink: int = 4):
    """``(q, [k_Δ for Δ in deltas], v)``, float32 [1, heads, n, d]."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, heads, n, d, generator=g, dtype=torch.float64) for _ in range(3))
    qm = q.mean(2, keepdim=True)
    direction = qm * (math.sqrt(d) / qm.pow(2).sum(-1, keepdim=True))
    keys = []
    for delta in deltas:
        kd = k.clone()
        kd[:, :, :ksink] += float(delta) * direction
        keys.append(kd.float())
    return q.float(), keys, v.float()
