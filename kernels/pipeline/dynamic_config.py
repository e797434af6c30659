"""The dynamic experiment's configuration: P casts, checks, shard specs and row counts (torch-free).

``experiments.dynamic`` in config.yaml (docs/interfaces.md, "The dynamic experiment (pipeline; beyond the
paper)") sweeps the sink strength Δ with ``ksink`` sink keys, both KV orders, and these casts of P in format
``fmt`` (:func:`casts`):

* ``scale``: a static S each (``scale_mode="multiply"``), labelled ``S=1``, ``S=256``;
* ``scale_modes``: a dynamic scale each (S = 1; the region's max of p scaled to the format's largest finite
  value): ``tile_max``, ``row_block_max`` (the alias of ``per_row``, recorded ``per_row`` and labelled
  ``row_block_max``), ``tile_max_padded``.

It is an experiment beyond the paper: no claim reads it. :func:`check_dynamic_experiment` checks what the
schema cannot say; :func:`dynamic_shard_spec` lists every cast's keywords of :func:`pcast.attention`, so a
shard's ``params`` change exactly when its work does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pcast.contract import DYNAMIC_EXPERIMENT, DYNAMIC_SCALE_MODES, SCALE_MODE_ALIASES
from pcast.pipeline.fp4_config import check_sink_shapes

__all__ = ["LABELS", "cast_label", "casts", "check_dynamic_experiment", "dynamic_shard_spec", "dynamic_expected_rows"]

KEY = f"experiments.{DYNAMIC_EXPERIMENT}"
#: The ``cast`` label of each dynamic mode (``per_row`` under its FP8 name).
LABELS = {"per_row": "row_block_max", "tile_max": "tile_max", "tile_max_padded": "tile_max_padded"}


class _Error(ValueError):
    """Raised here; :mod:`pcast.pipeline.config` re-raises it as its ``ConfigError``."""


def cast_label(scale: float, scale_mode: str) -> str:
    """The ``cast`` column: ``S=256`` for a static scale, the mode's name (:data:`LABELS`) for a dynamic one."""
    return LABELS[scale_mode] if scale_mode in LABELS else f"S={float(scale):g}"


def casts(exp: Mapping) -> list[dict]:
    """The P casts of the experiment, static scales first, in config order: ``{fmt, scale, scale_mode, cast}``."""
    fmt = str(exp["fmt"])
    out = [{"fmt": fmt, "scale": float(s), "scale_mode": "multiply"} for s in exp.get("scale", [])]
    out += [{"fmt": fmt, "scale": 1.0, "scale_mode": SCALE_MODE_ALIASES.get(m, m)} for m in exp.get("scale_modes", [])]
    return [{**c, "cast": cast_label(c["scale"], c["scale_mode"])} for c in out]


def check_dynamic_experiment(exp: Mapping) -> None:
    """What the schema cannot say: finite distinct static scales, distinct modes (an alias counts as its mode),
    at least one cast, shapes and sinks the theory's model holds. Raises ValueError naming the key."""
    values = [float(s) for s in exp.get("scale", [])]
    if any(not math.isfinite(v) or v <= 0 for v in values) or len(set(values)) != len(values):
        raise _Error(f"config key '{KEY}.scale': {values!r} is not allowed; allowed: distinct finite numbers > 0")
    modes = [SCALE_MODE_ALIASES.get(m, m) for m in exp.get("scale_modes", [])]
    if any(m not in DYNAMIC_SCALE_MODES for m in modes) or len(set(modes)) != len(modes):
        raise _Error(f"config key '{KEY}.scale_modes': {list(exp.get('scale_modes', []))!r} is not allowed; "
                     f"allowed: distinct modes of {', '.join(LABELS.values())} (row_block_max is per_row)")
    if not casts(exp):
        raise _Error(f"config key '{KEY}': no P cast is listed; allowed: a non-empty {KEY}.scale or "
                     f"{KEY}.scale_modes")
    check_sink_shapes(KEY, exp["shapes"], int(exp["ksink"]))


def dynamic_shard_spec(exp: Mapping, base: dict) -> dict:
    """The dynamic shard's spec: ``base`` (seeds, shapes, Δ, sigma, sink_v_scale, causal, backend) plus ksink,
    the orders and every cast's keywords."""
    return {**base, "ksink": int(exp["ksink"]), "order": list(exp["order"]), "casts": casts(exp)}


def dynamic_expected_rows(exp: Mapping, n_deltas: int) -> int:
    """Rows of results/tidy/dynamic.csv: seeds x shapes x causal x sigma x sink_v_scale x Δ x orders x casts."""
    return (int(exp["seeds"]) * len(exp["shapes"]) * len(exp["causal"]) * len(exp["sigma"])
            * len(exp["sink_v_scale"]) * n_deltas * len(exp["order"]) * len(casts(exp)))
