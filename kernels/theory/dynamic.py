"""Underflow under dynamic P scales (docs/interfaces.md, "Dynamic P scales"), in the model of
:mod:`pcast.theory.collapse` (non-sink scores iid N(0, σ²), ``k`` sink keys at Δ + N(0, σ²) in KV block 0).

A dynamic scale sets ``x = p·target / r`` with r the max of p over a region of the block: the block's row
(``per_row``) or its tile of ``block_m`` rows (``tile_max``). Per row, p = exp(s − m), so
``x = target·exp(s − M)`` with M the region's max score relative to each row's running max, and a key
underflows iff ``s ≤ M − c`` with ``c = log_threshold(fmt) + ln(target)`` (e4m3fn: ln(448·2^10) = 13.04),
whatever the running max. The sink's max therefore governs only its own block: in either order the sink's
block is cast with r = 1 (the sink is each row's max there, so its p is 1, in forward order at once and in
reverse order when it arrives last), exactly as a static S = target casts it; every other block is cast
against its own max (per_row) or its tile's largest row max (tile_max, which only lifts x further, the
rows' maxima of iid noise lying within a few σ of each other), as a reverse-order static S = target casts
the blocks visited before the sink against their own running max of noise (depth 13 σ: ~1e-23). Hence, to
within those Δ-free terms, both modes in both orders give the reverse-order static fraction at S = target:

``underflow_fraction_dynamic(Δ) = underflow_fraction(Δ, target, order="reverse")`` (leading order
``(block_n − k)/(n − k)·Φ((Δ + σδ_k − c)/σ)``), and the critical Δ, where half of the sink block's non-sink
keys underflow, is ``critical_delta(target)`` (e4m3fn, k = 4: 12.01), for forward and reverse alike. The
collapse is confined to the sink's block: the row's fraction never exceeds (block_n − k)/(n − k).
Checked by Monte Carlo against the emulator (tests/theory/test_dynamic_theory.py).
"""

from __future__ import annotations

import math

from pcast.contract import ORDERS
from pcast.formats import get_format
from pcast.theory.collapse import critical_delta, underflow_fraction

__all__ = ["DYNAMIC_MODES", "dynamic_target", "dynamic_threshold", "underflow_fraction_dynamic",
           "critical_delta_dynamic"]

DYNAMIC_MODES = ("per_row", "tile_max")


def _check(mode: str, order: str) -> None:
    if mode not in DYNAMIC_MODES:
        raise ValueError(f"mode={mode!r} is not allowed; allowed: {', '.join(DYNAMIC_MODES)}")
    if order not in ORDERS:
        raise ValueError(f"order={order!r} is not allowed; allowed: {', '.join(ORDERS)}")


def dynamic_target(fmt: str = "e4m3fn") -> float:
    """The format's largest finite value, the value a region's max of p is scaled to."""
    return float(get_format(fmt).max_finite)


def dynamic_threshold(fmt: str = "e4m3fn") -> float:
    """``c = log_threshold(fmt) + ln(target)``: the depth below its region's max at which a key underflows
    (e4m3fn: 13.04 nats)."""
    f = get_format(fmt)
    return f.log_threshold + math.log(f.max_finite)


def underflow_fraction_dynamic(delta, mode: str = "tile_max", order: str = "forward", k: int = 4,
                               fmt: str = "e4m3fn", sigma: float = 1.0, n: int = 1024, block_n: int = 64,
                               method: str = "leading"):
    """Expected fraction of a row's non-sink P values that round to zero under ``mode`` (per_row or tile_max)
    in ``order``: :func:`pcast.theory.collapse.underflow_fraction` at S = target in reverse order, for both
    orders and both modes (module docstring). Arguments as ``underflow_fraction``'s."""
    _check(mode, order)
    return underflow_fraction(delta, dynamic_target(fmt), k=k, fmt=fmt, sigma=sigma, order="reverse", n=n,
                              block_n=block_n, method=method)


def critical_delta_dynamic(mode: str = "tile_max", order: str = "forward", k: int = 4, fmt: str = "e4m3fn") -> float:
    """The Δ at which half the non-sink keys of the sink's block underflow: ``critical_delta(target)``, the same
    for both orders and both modes (e4m3fn, k = 4: 12.01)."""
    _check(mode, order)
    return critical_delta(dynamic_target(fmt), k=k, fmt=fmt)
