"""The fp4 experiment's configuration: P casts, checks, shard specs and row counts (torch-free).

``experiments.fp4`` in config.yaml (docs/interfaces.md, "The fp4 experiment (pipeline)") sweeps the sink
strength Δ with ``ksink`` sink keys, both KV orders, and these casts of P (:func:`casts`):

* ``nvfp4_scales``: NVFP4 with a static first-level scale S₁ each (``scale_mode="multiply"``);
* ``nvfp4_per_row: true``: NVFP4 with SageAttention3's per-row first level (``scale_mode="per_row"``, S₁ = 1);
* ``mxfp4_scales``: MXFP4 at each S₁;
* ``baseline``: one FP8 cast ``{fmt, scale}`` (default E4M3 with S = 256) the FP4 casts' MSE is read against,
  or null for none.

:func:`check_fp4` checks what the schema cannot say; :func:`fp4_shard_spec` lists every cast's keywords of
:func:`pcast.attention`, so a shard's ``params`` change exactly when its work does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pcast.contract import BLOCK_SIZES, FP4_EXPERIMENT, HEAD_DIMS, is_allowed

__all__ = ["GROUPS", "cast_label", "casts", "check_fp4", "check_sink_shapes", "fp4_shard_spec", "fp4_expected_rows", "groups_per_row"]

KEY = f"experiments.{FP4_EXPERIMENT}"
#: Keys per scale group of each microscaled format (pcast.formats.microscaling.MX_FORMATS; 0: not microscaled).
GROUPS = {"nvfp4": 16, "mxfp4": 32}


class _Error(ValueError):
    """Raised here; :mod:`pcast.pipeline.config` re-raises it as its ``ConfigError``."""


def cast_label(fmt: str, scale: float, scale_mode: str) -> str:
    """The ``cast`` column: ``nvfp4 S1=2048``, ``nvfp4 per-row``, ``mxfp4 S1=1``, ``e4m3fn S=256``."""
    if scale_mode == "per_row":
        return f"{fmt} per-row"
    return f"{fmt} {'S1' if fmt in GROUPS else 'S'}={float(scale):g}"


def casts(exp: Mapping) -> list[dict]:
    """The P casts of the experiment, in config order: ``{fmt, scale, scale_mode, cast}`` each."""
    out = [{"fmt": "nvfp4", "scale": float(s), "scale_mode": "multiply"} for s in exp.get("nvfp4_scales", [])]
    if exp.get("nvfp4_per_row", False):
        out.append({"fmt": "nvfp4", "scale": 1.0, "scale_mode": "per_row"})
    out += [{"fmt": "mxfp4", "scale": float(s), "scale_mode": "multiply"} for s in exp.get("mxfp4_scales", [])]
    base = exp.get("baseline")
    if base:
        out.append({"fmt": str(base["fmt"]), "scale": float(base["scale"]), "scale_mode": "multiply"})
    return [{**c, "cast": cast_label(c["fmt"], c["scale"], c["scale_mode"])} for c in out]


def groups_per_row(fmt: str, n: int, block_n: int) -> int:
    """Scale groups of one query row: the padded keys ``ceil(n / block_n)·block_n`` over the group (0 for FP8)."""
    g = GROUPS.get(fmt, 0)
    return -(-int(n) // int(block_n)) * int(block_n) // g if g else 0


def check_sink_shapes(key: str, shapes, ksink: int) -> None:
    """The shapes of a sink sweep under config key ``key`` (this experiment's and the dynamic one's): d and the
    blocks of the contract's sizes, every sink in KV block 0; ValueError naming the key."""
    for i, shape in enumerate(shapes):
        skey = f"{key}.shapes[{i}]"
        if not is_allowed(shape["d"], HEAD_DIMS):
            raise _Error(f"config key '{skey}.d': {shape['d']!r} is not allowed; allowed: a power of two from 16 to 256")
        for b in ("block_m", "block_n"):
            if not is_allowed(shape[b], BLOCK_SIZES):
                raise _Error(f"config key '{skey}.{b}': {shape[b]!r} is not allowed; allowed: a power of two "
                             "from 16 to 256")
        if not 0 < ksink < shape["n"] or ksink > shape["block_n"]:
            raise _Error(f"config key '{key}.ksink': {ksink} is not allowed with {skey} (n = {shape['n']}, block_n"
                         f" = {shape['block_n']}); allowed: 1 <= ksink < n and ksink <= block_n (every sink in KV "
                         "block 0, as the theory assumes)")


def _check_shapes(exp: Mapping) -> None:
    formats = {c["fmt"] for c in casts(exp)}
    check_sink_shapes(KEY, exp["shapes"], int(exp["ksink"]))
    for i, shape in enumerate(exp["shapes"]):
        skey = f"{KEY}.shapes[{i}]"
        for fmt in sorted(formats & set(GROUPS)):
            if shape["block_n"] % GROUPS[fmt]:
                raise _Error(f"config key '{skey}.block_n': {shape['block_n']} is not allowed with {fmt} in "
                             f"{KEY}; allowed: a multiple of its group, {GROUPS[fmt]} (a group never spans blocks)")


def check_fp4(exp: Mapping) -> None:
    """What the schema cannot say: at least one cast, distinct finite scales, shapes and sinks that fit
    every cast's groups. Raises ValueError naming the key and what is allowed."""
    for field in ("nvfp4_scales", "mxfp4_scales"):
        values = [float(s) for s in exp.get(field, [])]
        if any(not math.isfinite(v) or v <= 0 for v in values):
            raise _Error(f"config key '{KEY}.{field}': {values!r} is not allowed; allowed: finite numbers > 0")
        if len(set(values)) != len(values):
            raise _Error(f"config key '{KEY}.{field}': values {values!r} repeat; allowed: distinct values")
    if not any(c["fmt"] in GROUPS for c in casts(exp)):
        raise _Error(f"config key '{KEY}': no FP4 cast is listed; allowed: a non-empty {KEY}.nvfp4_scales or "
                     f"{KEY}.mxfp4_scales, or {KEY}.nvfp4_per_row: true")
    labels = [c["cast"] for c in casts(exp)]
    if len(set(labels)) != len(labels):
        raise _Error(f"config key '{KEY}.baseline': its cast repeats one of {labels!r}; allowed: an FP8 format")
    _check_shapes(exp)


def fp4_shard_spec(exp: Mapping, base: dict) -> dict:
    """The fp4 shard's spec: ``base`` (seeds, shapes, Δ, sigma, sink_v_scale, causal, backend) plus
    ksink, the orders and every cast's keywords."""
    return {**base, "ksink": int(exp["ksink"]), "order": list(exp["order"]), "casts": casts(exp)}


def fp4_expected_rows(exp: Mapping, n_deltas: int) -> int:
    """Rows of results/tidy/fp4.csv: seeds x shapes x causal x sigma x sink_v_scale x Δ x orders x casts."""
    return (int(exp["seeds"]) * len(exp["shapes"]) * len(exp["causal"]) * len(exp["sigma"])
            * len(exp["sink_v_scale"]) * n_deltas * len(exp["order"]) * len(casts(exp)))
