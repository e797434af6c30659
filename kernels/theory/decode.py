"""Theory of decode-time attention (docs/decode.md): sink-induced underflow under split-KV, and the error of a
partition-normalised P on the FP8 grid.

**Underflow under splits.** The model is :mod:`pcast.theory.collapse`'s (non-sink scores iid ``N(0, σ²)``,
``k`` sink keys at positions ``0..k-1``, all in KV block 0, scores ``Δ + N(0, σ²)``). With splits (the contract
of docs/interfaces.md, "Decode-time attention") each split has its own running max, so a non-sink key meets
the sinks only when block 0 is in its split and is visited at or before the key's block: in forward order,
every key of split 0; in reverse order, only block 0's own keys (block 0 is visited last in its split).
:func:`split_underflow_fraction` gives the expected non-sink underflow fraction (leading order, or exact by
quadrature, per block: ``pcast.theory.collapse.p_under`` with the keys the block's max has met), and
:func:`split_critical_delta` the Δ at which it reaches one half: ``c - σ·δ_k + σ·Φ⁻¹(1 / (2A))`` with A the
share of non-sink keys that meet the sinks, or infinity when A < 1/2 (the fraction never crosses).

**A learned sink that seeds split 0** (``sink_mode="init"``, no sink key): every key of split 0 meets the max
Δ, in either order; :func:`init_underflow_fraction` is ``A₀·Φ((Δ - c)/σ)`` with A₀ split 0's share of the keys.

**Underflow of a partition-normalised P.** A key of a split with exact sum ``Σ = Σ_j e^(s_j)`` casts
``S·e^s/Σ`` and underflows when ``s < ln Σ - c``. :func:`partition_underflow_fraction` takes
``Σ = n_s·e^(σ²/2) + (sinks of the split)`` (the non-sink keys' sum by its mean; the sink keys' ``e^(Δ + σZ_i)``
averaged over a fixed draw of Z, a logit's ``e^Δ`` as it is) and averages ``Φ((ln Σ - c)/σ)`` over the keys.

**Partition-normalised P.** A partition of n keys casts ``x = S·P``, ``P = e^s / Σ e^s``. With scores iid
``N(0, σ²)``, ``x = (S/n)·e^(σZ - σ²/2) / (1 + ε)`` with ε the normaliser's relative fluctuation (normal, variance
``(e^(σ²) - 1)/n``; the model wants ``σ`` up to about 1, where n keys sample the lognormal well), capped at
``x <= S``. :func:`partition_rms_error` is the relative RMS error ``sqrt(E(q(x) - x)² / E x²)`` of the
cast q, integrated over Z and ε with q the format's exact rounding (numpy). When ``S/n`` lies below the
format's smallest normal, x sits on the subnormal staircase (step ``2^(emin - m)``) and the error grows like
``step / (S/n)``; :func:`normal_range_scale` is the smallest power of two S that lifts the typical key ``S/n``
into the normal range.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm

from pcast.formats import FP8Format, get_p_format
from pcast.theory.collapse import p_under, delta_k

__all__ = ["split_blocks_theory", "split_underflow_fraction", "split_critical_delta", "meet_share",
           "init_underflow_fraction", "partition_underflow_fraction", "partition_rms_error", "normal_range_scale",
           "round_to_format"]


def split_blocks_theory(nblk: int, num_splits: int, layout: str) -> list[list[int]]:
    """The blocks of each split (docs/interfaces.md): contiguous ranges of ``ceil(nblk / num_splits)``, or
    block j in split ``j mod num_splits``."""
    if layout == "contiguous":
        c = -(-nblk // num_splits)
        return [list(range(s * c, min(nblk, (s + 1) * c))) for s in range(num_splits)]
    return [list(range(s, nblk, num_splits)) for s in range(num_splits)]


def _block_terms(n, block_n, k, num_splits, layout, order):
    """(non-sink keys, sinks met, other non-sink keys met) for each block, under its split's running max."""
    out = []
    for blocks in split_blocks_theory(-(-n // block_n), num_splits, layout):
        seen_sink, seen = False, 0
        for j in (blocks[::-1] if order == "reverse" else blocks):
            lo, hi = j * block_n, min((j + 1) * block_n, n)
            cnt = hi - max(lo, k)
            seen_sink = seen_sink or j == 0
            seen += max(cnt, 0)
            if cnt > 0:
                out.append((cnt, k if seen_sink else 0, seen - 1))
    return out


def meet_share(n: int, block_n: int, k: int, num_splits: int, layout: str, order: str) -> float:
    """A: the share of the ``n - k`` non-sink keys whose split's max has met the sinks when they are cast."""
    return sum(c for c, ks, _ in _block_terms(n, block_n, k, num_splits, layout, order) if ks) / (n - k)


def split_underflow_fraction(delta, S: float, *, num_splits: int, layout: str = "contiguous", order: str = "forward",
                             k: int = 4, n: int = 8192, block_n: int = 64, sigma: float = 1.0,
                             fmt: str | FP8Format = "e4m3fn", method: str = "leading"):
    """Expected fraction of the non-sink P values of one row that round to 0, under ``num_splits`` splits.

    ``"leading"``: ``A·Φ((Δ + σ·δ_k - c)/σ)`` with ``c = log_threshold + ln S`` and A = :func:`meet_share`
    (keys that do not meet the sinks are taken to give 0). ``"exact"``: per block, the probability that a
    non-sink key lies ``c`` below the max of the keys its split has met (``pcast.theory.collapse.p_under``),
    averaged over keys. ``delta``: a number or an array (the result has its shape)."""
    f = get_p_format(fmt)
    c = f.log_threshold + math.log(S)
    d = np.asarray(delta, dtype=float)
    if c <= 0:
        res = np.ones_like(d)
    elif method == "leading":
        a = meet_share(n, block_n, k, num_splits, layout, order)
        res = a * norm.cdf((d + sigma * delta_k(k) - c) / sigma)
    else:
        terms = _block_terms(n, block_n, k, num_splits, layout, order)
        res = np.empty_like(d)
        for idx, dv in np.ndenumerate(d):
            res[idx] = sum(cnt * p_under(c / sigma, float(dv) / sigma if ks else 0.0, ks, r)
                           for cnt, ks, r in terms) / (n - k)
    return float(res) if res.ndim == 0 else res


def split_critical_delta(S: float, *, num_splits: int, layout: str = "contiguous", order: str = "forward",
                         k: int = 4, n: int = 8192, block_n: int = 64, sigma: float = 1.0,
                         fmt: str | FP8Format = "e4m3fn") -> float:
    """The Δ at which :func:`split_underflow_fraction` (leading) reaches 1/2; ``inf`` when fewer than half the
    non-sink keys meet the sinks (the fraction never crosses)."""
    a = meet_share(n, block_n, k, num_splits, layout, order)
    if a < 0.5:
        return math.inf
    c = get_p_format(fmt).log_threshold + math.log(S)
    return c - sigma * delta_k(k) + sigma * float(norm.ppf(0.5 / a))


def round_to_format(x: np.ndarray, fmt: str | FP8Format = "e4m3fn") -> np.ndarray:
    """``x >= 0`` rounded to nearest even on the format's grid (subnormals included), saturating: numpy."""
    f = get_p_format(fmt)
    x = np.minimum(np.asarray(x, dtype=float), f.max_finite)
    e = np.floor(np.log2(np.maximum(x, 2.0 ** (f.emin - f.man_bits - 8))))
    step = np.exp2(np.maximum(e, f.emin) - f.man_bits)
    return np.minimum(np.rint(x / step) * step, f.max_finite)


def partition_rms_error(n: int, S: float, sigma: float = 1.0, fmt: str | FP8Format = "e4m3fn", *,
                        points: int = 8001) -> float:
    """Relative RMS error ``sqrt(E(q(x) - x)² / E x²)`` of the cast of a partition-normalised P over n keys
    (module docstring): a quadrature over the key's score and the normaliser's fluctuation."""
    z = np.linspace(-9.0, 9.0, points)
    wz = norm.pdf(z) * (z[1] - z[0])
    e_nodes, e_weights = np.polynomial.hermite_e.hermegauss(21)  # ε = sd·node, weights for N(0, 1)
    e_weights = e_weights / e_weights.sum()
    sd = math.sqrt(math.expm1(sigma * sigma) / n)
    err2 = x2 = 0.0
    for node, we in zip(e_nodes, e_weights):
        denom = max(1.0 + sd * node, 1e-3)
        x = np.minimum((S / n) * np.exp(sigma * z - 0.5 * sigma * sigma) / denom, S)  # P <= 1
        err2 += we * float(np.sum(wz * (round_to_format(x, fmt) - x) ** 2))
        x2 += we * float(np.sum(wz * x * x))
    return math.sqrt(err2 / x2)


def normal_range_scale(n: int, fmt: str | FP8Format = "e4m3fn") -> float:
    """The smallest power of two S with ``S/n >= min_normal``: the typical key of an n-key partition is normal."""
    f = get_p_format(fmt)
    return 2.0 ** math.ceil(math.log2(f.min_normal * n))


def _split_keys(n: int, block_n: int, k: int, num_splits: int, layout: str) -> list[int]:
    """Non-sink keys of each split (the ``k`` sink keys are keys 0..k-1, in block 0, split 0)."""
    out = []
    for blocks in split_blocks_theory(-(-n // block_n), num_splits, layout):
        out.append(sum(min((j + 1) * block_n, n) - max(j * block_n, k) for j in blocks if min((j + 1) * block_n, n)
                       > max(j * block_n, k)))
    return out


def init_underflow_fraction(delta, S: float, *, num_splits: int, layout: str = "contiguous", n: int = 8192,
                            block_n: int = 64, sigma: float = 1.0, fmt: str | FP8Format = "e4m3fn"):
    """Leading-order non-sink underflow fraction when a learned sink logit Δ seeds split 0's max (no sink key):
    ``A₀·Φ((Δ - c)/σ)``, A₀ the share of the n keys in split 0. ``delta``: a number or an array."""
    c = get_p_format(fmt).log_threshold + math.log(S)
    a0 = _split_keys(n, block_n, 0, num_splits, layout)[0] / n
    res = a0 * norm.cdf((np.asarray(delta, dtype=float) - c) / sigma)
    return float(res) if res.ndim == 0 else res


def partition_underflow_fraction(delta, S: float, *, num_splits: int, layout: str = "contiguous", k: int = 4,
                                 n: int = 8192, block_n: int = 64, sigma: float = 1.0,
                                 fmt: str | FP8Format = "e4m3fn", sink: str = "keys", draws: int = 4096):
    """Non-sink underflow fraction of a partition-normalised P (module docstring). ``sink``: ``"keys"`` (k sink
    keys at Δ in split 0), ``"logit"`` (a logit Δ seeds split 0's sum; ``k`` is then 0) or ``"none"``. The sink
    keys' noise is averaged over ``draws`` fixed normal draws (``numpy.random.default_rng(0)``)."""
    c = get_p_format(fmt).log_threshold + math.log(S)
    ks = k if sink == "keys" else 0
    counts = _split_keys(n, block_n, ks, num_splits, layout)
    d = np.asarray(delta, dtype=float)
    if sink == "keys":
        z = np.random.default_rng(0).standard_normal((draws, ks))
        sink_sum = np.exp(sigma * z).sum(-1)[None, :] * np.exp(d.reshape(-1, 1))  # [Δ, draw]
    elif sink == "logit":
        sink_sum = np.exp(d.reshape(-1, 1))
    else:
        sink_sum = np.zeros((d.size, 1))
    bulk = math.exp(sigma * sigma / 2)
    total = np.zeros(d.size)
    for s, cnt in enumerate(counts):
        if cnt == 0:
            continue
        lsum = np.log(cnt * bulk + (sink_sum if s == 0 else np.zeros((d.size, 1))))
        total += cnt * norm.cdf((lsum - c) / sigma).mean(-1)
    res = (total / sum(counts)).reshape(d.shape)
    return float(res) if res.ndim == 0 else res
