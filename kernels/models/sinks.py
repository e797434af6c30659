"""Synthetic attention inputs with attention sinks of a chosen strength.

The construction makes the scaled scores ``s_ij = q_i . k_j / sqrt(d)`` of every
fixed query row *exactly* what the theory in :mod:`pcast.theory` assumes:

* non-sink keys: ``s_ij ~ N(0, sigma^2)``, iid over keys j;
* sink keys (positions ``0 .. ksink-1``): ``s_ij = delta + N(0, sigma^2)``, iid over the sinks.

Construction (:func:`make_base`, then :func:`apply_sink`; :func:`make_inputs` is the two composed):

1. With a private CPU ``torch.Generator().manual_seed(seed)`` (never the global RNG) draw, in
   this order and in float64: ``g ~ N(0,1)`` of shape ``[B,H,N,d-1]``, ``h ~ N(0,1)`` of shape
   ``[B,H,N,d-1]``, ``v ~ N(0,1)`` of shape ``[B,H,N,d]``.
2. Queries: ``q[...,0] = 1`` and ``q[...,1:] = sqrt(d-1) * g / ||g||`` (each row's tail has norm
   exactly ``sqrt(d-1)``, up to the final float32 rounding).
3. Keys: ``k[...,0] = 0`` and ``k[...,1:] = sigma * sqrt(d/(d-1)) * h``.
   For a fixed query, ``q_i . k_j / sqrt(d) = sigma * (g_i/||g_i||) . h_j``, a fixed unit vector
   dotted with iid standard normal vectors: exactly ``N(0, sigma^2)``, iid over keys j.
4. All three tensors are cast to float32 (the only rounding).
5. :func:`apply_sink` returns copies with ``k[..., :ksink, 0] = delta * sqrt(d)``, which adds
   exactly ``1 * delta * sqrt(d) / sqrt(d) = delta`` to the score of every query against a sink
   key (because ``q[...,0] = 1``), and ``v[..., :ksink, :] *= sink_v_scale``.

Different query rows of one (batch, head) share the keys, so their scores are weakly
correlated (through the realised key norms); each row on its own follows the model exactly.
The pipeline stores the Δ-free base once per seed and applies Δ and ``sink_v_scale`` per run;
the same (seed, parameters) always gives the same bytes.
"""

from __future__ import annotations

import math
import numbers

import torch

from pcast.contract import HEAD_DIMS

__all__ = ["make_base", "apply_sink", "value_stack", "make_inputs", "learned_sink"]


def _check_pos_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")
    if value < minimum:
        raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")
    return int(value)


def _check_real(value, name: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        what = "a finite real number > 0" if positive else "a finite real number"
        raise ValueError(f"{name}={value!r} must be {what}")
    x = float(value)
    if not math.isfinite(x):
        what = "a finite real number > 0" if positive else "a finite real number"
        raise ValueError(f"{name}={value!r} must be {what}")
    if positive and not x > 0:
        raise ValueError(f"{name}={value!r} must be a finite real number > 0")
    return x


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2**64:
        raise ValueError(f"seed={seed!r} must be a non-negative integer below 2**64")
    return int(seed)


def _check_d(d) -> int:
    if isinstance(d, bool) or not isinstance(d, numbers.Integral) or int(d) not in HEAD_DIMS:
        raise ValueError(f"d={d!r} must be a power of two in 16..256, one of {HEAD_DIMS}")
    return int(d)


def _check_ksink(ksink, n: int) -> int:
    if isinstance(ksink, bool) or not isinstance(ksink, numbers.Integral) or not 0 <= ksink < n:
        raise ValueError(f"ksink={ksink!r} must be an integer with 0 <= ksink < n (n={n})")
    return int(ksink)


def make_base(seed: int, *, batch: int = 1, heads: int = 1, n: int = 1024, d: int = 64,
              sigma: float = 1.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw the sink-free (q, k, v), float32 CPU tensors of shape ``[batch, heads, n, d]``.

    See the module docstring for the exact construction. For every fixed query row the scores
    ``q_i . k_j / sqrt(d)`` over keys j are iid ``N(0, sigma^2)``.

    Raises:
        ValueError: for a seed that is not a non-negative integer, batch/heads/n < 1, d not a
            power of two in 16..256, or sigma not a finite number > 0.
    """
    seed = _check_seed(seed)
    batch = _check_pos_int(batch, "batch")
    heads = _check_pos_int(heads, "heads")
    n = _check_pos_int(n, "n")
    d = _check_d(d)
    sigma = _check_real(sigma, "sigma", positive=True)

    gen = torch.Generator(device="cpu").manual_seed(seed)
    f64 = dict(dtype=torch.float64, device="cpu", generator=gen)
    g = torch.randn((batch, heads, n, d - 1), **f64)
    h = torch.randn((batch, heads, n, d - 1), **f64)
    v = torch.randn((batch, heads, n, d), **f64)

    q = torch.empty((batch, heads, n, d), dtype=torch.float64)
    q[..., 0] = 1.0
    q[..., 1:] = g * (math.sqrt(d - 1) / torch.linalg.vector_norm(g, dim=-1, keepdim=True))
    k = torch.empty((batch, heads, n, d), dtype=torch.float64)
    k[..., 0] = 0.0
    k[..., 1:] = h * (sigma * math.sqrt(d / (d - 1)))
    return q.to(torch.float32), k.to(torch.float32), v.to(torch.float32)


def apply_sink(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, ksink: int = 4,
               delta: float = 8.0, sink_v_scale: float = 1.0
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Turn keys ``0 .. ksink-1`` into sinks of strength ``delta``; return new tensors.

    Sets ``k[..., :ksink, 0] = delta * sqrt(d)`` (so, with ``q[..., 0] = 1`` from
    :func:`make_base`, every query's score against a sink key gains exactly ``delta``) and
    multiplies ``v[..., :ksink, :]`` by ``sink_v_scale``. The inputs are not modified; ``q`` is
    returned as a copy.

    Raises:
        ValueError: for tensors that are not 4-D float32 with matching shapes, ksink outside
            ``0 <= ksink < n``, or a delta / sink_v_scale that is not a finite real number.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-D float32 torch.Tensor [B, H, N, d]")
    if k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q, k, v shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)} do not match "
                         "(allowed: q [B,H,Nq,d], k and v [B,H,N,d])")
    n, d = k.shape[-2], k.shape[-1]
    _check_d(d)
    ksink = _check_ksink(ksink, n)
    delta = _check_real(delta, "delta")
    sink_v_scale = _check_real(sink_v_scale, "sink_v_scale")

    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    if ksink:
        k2[..., :ksink, 0] = delta * math.sqrt(d)
        v2[..., :ksink, :] *= sink_v_scale
    return q2, k2, v2


def value_stack(base, ksink: int, deltas, svs_list, device):
    """q and k of ``deltas`` (sink keys at each Δ) stacked along batch, and one stacked v per
    sink_v_scale of ``svs_list``: :func:`pcast.models.sinks.apply_sink` changes k with Δ and v with
    sink_v_scale only, so every sink_v_scale shares q and k (:func:`pcast.attention_values`)."""
    parts = {(svs, dl): apply_sink(*base, ksink=ksink, delta=dl, sink_v_scale=svs) for svs in svs_list
             for dl in deltas}
    first = svs_list[0]
    q, k = (torch.cat([parts[(first, dl)][j] for dl in deltas]).to(device) for j in (0, 1))
    values = [torch.cat([parts[(svs, dl)][2] for dl in deltas]).to(device) for svs in svs_list]
    return q, k, values


def make_inputs(seed: int, *, batch: int = 1, heads: int = 1, n: int = 1024, d: int = 64,
                ksink: int = 4, delta: float = 8.0, sigma: float = 1.0, sink_v_scale: float = 1.0
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``apply_sink(*make_base(seed, ...), ksink=..., delta=..., sink_v_scale=...)``.

    Returns (q, k, v), float32 CPU tensors ``[batch, heads, n, d]``. For every query row, the
    scores ``q_i . k_j / sqrt(d)`` are iid ``N(0, sigma^2)`` over the non-sink keys
    (positions >= ksink) and iid ``delta + N(0, sigma^2)`` over the sink keys (positions < ksink).
    Deterministic: the same arguments give the same bytes.

    Raises:
        ValueError: naming the offending argument (see :func:`make_base` and :func:`apply_sink`).
    """
    # Validate everything before drawing, so errors do not depend on the order of the steps.
    n = _check_pos_int(n, "n")
    _check_ksink(ksink, n)
    _check_real(delta, "delta")
    _check_real(sink_v_scale, "sink_v_scale")
    base = make_base(seed, batch=batch, heads=heads, n=n, d=d, sigma=sigma)
    return apply_sink(*base, ksink=ksink, delta=delta, sink_v_scale=sink_v_scale)


def learned_sink(delta: float, *, batch: int = 1, heads: int = 1) -> torch.Tensor:
    """A gpt-oss-style learned sink: float32 CPU tensor ``[batch, heads]`` filled with ``delta``.

    The ``sink_logit`` of :func:`pcast.attention`: a logit that joins the softmax denominator
    with no key and no value, so every query row's weights are ``exp(s_j) / (exp(Δ) + sum_j exp(s_j))``.
    Δ plays the role of a sink key's score: with the inputs of ``make_inputs(..., ksink=0)`` or
    :func:`make_base` (scores iid ``N(0, sigma^2)``) it sits Δ above the keys' mean score, exactly
    and without noise (a sink key scores ``Δ + N(0, sigma^2)``). Move it to q's device before the call.

    Raises:
        ValueError: for batch/heads < 1, or a delta that is not a real number finite in float32.
    """
    batch = _check_pos_int(batch, "batch")
    heads = _check_pos_int(heads, "heads")
    delta = _check_real(delta, "delta")
    if not math.isfinite(float(torch.tensor(delta, dtype=torch.float32))):
        raise ValueError(f"delta={delta!r} must be a real number finite in float32 (|delta| < 3.4e38)")
    return torch.full((batch, heads), delta, dtype=torch.float32)
