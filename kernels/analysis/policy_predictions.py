"""The theory's predictions for one configuration of the policies experiment (one tidy row).

Each row of ``results/tidy/policies.csv`` carries its policy's fields (order, scale, scale_mode,
rescale_threshold, sink_mode, fmt, block_n, ...), so the prediction is computed from the row
alone. Which law applies (column ``pred_model`` of the policies summary):

* ``keys``: sink keys (``sink_kind = "keys"``): :func:`pcast.theory.underflow_fraction`
  (``method="exact"``) with the row's ksink, order, n, block_n, fmt, sigma and the S the policy
  really applies (:func:`pcast.theory.policy.exp2_offset_scale` for ``scale_mode="exp2_offset"``).
* ``init``: a learned sink logit that seeds the running max (``sink_mode="init"``):
  :func:`pcast.theory.policy.underflow_fraction_init` (``method="exact"``), same S, order, n,
  block_n.
* ``no-sink``: a learned sink logit that joins only the row sum (``sink_mode="final"``): the keys
  never meet it, so the paper's law without a sink, :func:`pcast.theory.underflow_fraction`
  with ``k = 0`` (Δ plays no role; Δ = 0 is passed).
* ``none``: no law (causal rows, an unknown format, sinks outside block 0): NaN.

A dynamic P scale (``scale_mode`` ``per_row`` or ``tile_max`` with an FP8 format) is predicted by
:mod:`pcast.theory.dynamic`: the static laws above at S = the format's largest finite value in reverse
order, whatever the row's order (its saturated fraction, a boundary count, has no law: NaN).

With lazy rescaling (``rescale_threshold`` τ > 0) the running max may be stale, below the eager
max, so p is never smaller than under the eager rule: the eager laws above are then an upper
bound of the underflow fraction, and the model name says so (``keys, eager bound``).

The saturated fraction is :func:`pcast.theory.policy.saturation_fraction` with the row's τ, S
and scale_mode; the sink enters its walk as sink keys at Δ, as a logit seeding the max at Δ
(``init``), or not at all (``final``: ``delta=None``).

Predictions are cached per distinct set of theory arguments: many policies share them.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy.optimize import brentq

from pcast import theory
from pcast.contract import SCALE_MODES, SINK_KINDS, SINK_MODES
from pcast.formats import FORMATS
from pcast.theory import policy as policy_theory
from pcast.theory.dynamic import DYNAMIC_MODES, dynamic_target

__all__ = ["applied_scale", "underflow_model", "predict_underflow", "predict_saturation", "predicted_crossing"]


def _causal(row) -> bool:
    return str(row.get("causal", False)).lower() in ("true", "1")


def _check(row) -> None:
    """The row's policy fields are the contract's words (a ValueError names the column otherwise)."""
    for col, allowed in (("sink_kind", SINK_KINDS), ("scale_mode", SCALE_MODES), ("sink_mode", SINK_MODES)):
        if row[col] not in allowed:
            raise ValueError(f"column {col!r} = {row[col]!r} is not allowed; allowed: {', '.join(allowed)}")


def _dynamic(row) -> bool:
    return row.get("scale_mode", "multiply") in DYNAMIC_MODES and row.get("fmt") in FORMATS


def applied_scale(row) -> float:
    """The S the policy really applies: ``2**log2_scale(S)`` for exp2_offset, the format's largest finite
    value for a dynamic scale (:func:`pcast.theory.dynamic.dynamic_target`), else S."""
    s = float(row["scale"])
    if _dynamic(row):
        return dynamic_target(str(row["fmt"]))
    if row.get("scale_mode", "multiply") == "exp2_offset":
        return float(policy_theory.exp2_offset_scale(s))
    return s


def underflow_model(row) -> str:
    """Which law predicts this row's underflow fraction (see the module docstring)."""
    _check(row)
    if _causal(row) or row.get("fmt") not in FORMATS:
        return "none"
    if row["sink_kind"] == "keys":
        k, block_n = int(row["ksink"]), int(row["block_n"])
        base = "keys" if 1 <= k <= block_n and k < int(row["n"]) else "none"
    else:
        base = "init" if row["sink_mode"] == "init" else "no-sink"
    if base != "none" and float(row.get("rescale_threshold", 0.0)) > 0:
        return f"{base}, eager bound"
    return base


def _theory_args(row) -> tuple:
    """The hashable arguments every law reads from a row."""
    order = "reverse" if _dynamic(row) else str(row["order"])
    return (applied_scale(row), str(row["fmt"]), float(row.get("sigma", 1.0)), order, int(row["n"]),
            int(row["block_n"]))


@lru_cache(maxsize=4096)
def _underflow(model: str, k: int, args: tuple, deltas: tuple) -> tuple:
    s, fmt, sigma, order, n, block_n = args
    d = np.asarray(deltas, dtype=float)
    kw = {"fmt": fmt, "sigma": sigma, "order": order, "n": n, "block_n": block_n}
    if model == "keys":
        out = theory.underflow_fraction(d, s, k=k, method="exact", **kw)
    elif model == "init":
        out = policy_theory.underflow_fraction_init(deltas, s, method="exact", **kw)  # cached: a tuple
    else:  # no-sink: Δ does not enter
        out = np.full(d.shape, float(theory.underflow_fraction(0.0, s, k=0, method="exact", **kw)))
    return tuple(np.broadcast_to(np.asarray(out, dtype=float), d.shape).tolist())


def predict_underflow(row, deltas) -> np.ndarray:
    """The predicted non-sink underflow fraction of ``row``'s configuration at each Δ (NaN: no law)."""
    model = underflow_model(row).split(",")[0]
    deltas = tuple(float(x) for x in np.atleast_1d(deltas))
    if model == "none":
        return np.full(len(deltas), math.nan)
    return np.asarray(_underflow(model, int(row["ksink"]), _theory_args(row), deltas))


@lru_cache(maxsize=4096)
def _saturation(tau: float, args: tuple, scale_mode: str, sink: tuple, deltas) -> tuple:
    s, fmt, sigma, order, n, block_n = args
    kind, k = sink
    kw = {"n": n, "block_n": block_n, "order": order, "scale_mode": scale_mode}
    if kind is None:  # no sink in the walk: Δ does not enter
        return (float(policy_theory.saturation_fraction(tau, s, fmt, sigma, delta=None, **kw)),) * len(deltas)
    out = policy_theory.saturation_fraction(tau, s, fmt, sigma, delta=np.asarray(deltas, dtype=float),
                                            sink_kind=kind, ksink=max(k, 1), **kw)
    return tuple(np.atleast_1d(out).tolist())


def predict_saturation(row, deltas) -> np.ndarray:
    """The predicted saturated fraction (of all keys, sink keys included) at each Δ (NaN: no law).

    :func:`pcast.theory.policy.saturation_fraction` with the row's τ, its nominal S and
    scale_mode (the function applies exp2_offset's S itself), and the sink as it enters the walk:
    sink keys at Δ, a learned logit seeding the max at Δ (``init``), or none (``final``).
    """
    deltas = tuple(float(x) for x in np.atleast_1d(deltas))
    if underflow_model(row) == "none" or _dynamic(row):
        return np.full(len(deltas), math.nan)
    args = (float(row["scale"]),) + _theory_args(row)[1:]
    if row["sink_kind"] == "keys":
        sink = ("keys", int(row["ksink"]))
    else:
        sink = ("logit", 0) if row["sink_mode"] == "init" else (None, 0)
    return np.asarray(_saturation(float(row.get("rescale_threshold", 0.0)), args,
                                  str(row.get("scale_mode", "multiply")), sink, deltas))


def predicted_crossing(row, deltas, level: float) -> float:
    """The Δ where the predicted underflow fraction first reaches ``level``, on the range of ``deltas``.

    The predictions at the grid points ``deltas`` (increasing; the measured grid) bracket the
    first crossing, then ``scipy.optimize.brentq`` refines it (xtol 1e-6). NaN when no law applies
    or the prediction does not reach ``level`` inside the grid (as the measured crossing, which is
    looked for on the same grid), or already exceeds it at the first point.
    """
    grid = np.asarray(deltas, dtype=float)
    if underflow_model(row) == "none" or len(grid) < 2:
        return math.nan
    f = predict_underflow(row, grid) - level
    if f[0] >= 0:
        return float(grid[0]) if f[0] == 0 else math.nan
    above = np.flatnonzero(f >= 0)
    if not len(above):
        return math.nan
    j = int(above[0])
    g = lambda x: float(predict_underflow(row, [x])[0]) - level  # noqa: E731
    return float(brentq(g, grid[j - 1], grid[j], xtol=1e-6))
