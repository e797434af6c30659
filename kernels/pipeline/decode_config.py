"""The decode experiment's configuration: its calls, checks, shard spec and row count (torch-free).

``experiments.decode`` in config.yaml (docs/decode.md, "The decode experiment") runs decode rows (Nq = 1, the
last query row of each stored base) over ``n`` keys, ``heads`` rows per seed, on a Δ grid, in every
configuration of :func:`calls`: ``num_splits`` x ``split_layout`` x ``order`` x ``p_normalize`` x ``scale``.
One split has one layout (contiguous). A partition-normalised split takes its exact max and sum before any
cast, so its result does not depend on the order: it runs in forward order only.

``sink_kinds``: ``keys`` puts ``ksink`` sink keys at Δ (all in KV block 0); ``logit`` gives every row a
learned sink logit Δ with ``sink_mode: init`` (it seeds split 0's max and sum; ``final`` joins the merged
denominator after every cast and cannot change the P cast, so it is not run).

``policies`` adds the decode presets of :mod:`pcast.policies` (``DECODE_PRESETS``) as configurations of
their own, each with all its keywords (block size, P format, scale mode, sink mode): the policies audit's
decode rows.

``partition`` adds the P-cast error rows: per seed, ``rows`` query rows with one partition of each listed
number of keys (scores N(0, sigma²) set exactly, V the identity, so the output is the cast P), at each listed
scale, measured against the same call without a P cast.
"""

from __future__ import annotations

from collections.abc import Mapping

from pcast.contract import BLOCK_SIZES, DECODE_EXPERIMENT, HEAD_DIMS, is_allowed
from pcast.pipeline.grid import delta_values
from pcast.policies import DECODE_PRESETS, POLICIES

__all__ = ["calls", "policy_calls", "check_decode", "decode_shard_spec", "decode_expected_rows", "partition_cases"]

KEY = f"experiments.{DECODE_EXPERIMENT}"


class _Error(ValueError):
    """Raised here; :mod:`pcast.pipeline.config` re-raises it as its ``ConfigError``."""


def calls(exp: Mapping) -> list[dict]:
    """The keyword sets of one Δ stack, in a fixed order: ``{num_splits, split_layout, order, p_normalize,
    scale}`` each (see the module docstring for the layouts and orders that are not repeated)."""
    out = []
    for ns in exp["num_splits"]:
        layouts = ["contiguous"] if int(ns) == 1 else list(exp["split_layout"])
        for layout in layouts:
            for pn in exp["p_normalize"]:
                orders = ["forward"] if pn == "partition" else list(exp["order"])
                for order in orders:
                    for s in exp["scale"]:
                        out.append({"num_splits": int(ns), "split_layout": layout, "order": order,
                                    "p_normalize": pn, "scale": float(s)})
    return out


def policy_calls(exp: Mapping) -> list[dict]:
    """The decode presets' keyword sets (``{"policy": name, "kwargs": {...}}``), in config order."""
    return [{"policy": name, "kwargs": dict(POLICIES[name].attention_kwargs())} for name in exp.get("policies", [])]


def partition_cases(exp: Mapping) -> list[dict]:
    """The P-cast error cases ``{n, scale}`` (empty when ``partition`` is null)."""
    part = exp.get("partition")
    if not part:
        return []
    return [{"n": int(n), "scale": float(s)} for n in part["keys"] for s in part["scale"]]


def check_decode(exp: Mapping) -> None:
    """What the schema cannot say. Raises ValueError naming the key and what is allowed."""
    n, d, block_n, ksink = int(exp["n"]), int(exp["d"]), int(exp["block_n"]), int(exp["ksink"])
    if not is_allowed(d, HEAD_DIMS):
        raise _Error(f"config key '{KEY}.d': {d!r} is not allowed; allowed: a power of two from 16 to 256")
    if not is_allowed(block_n, BLOCK_SIZES):
        raise _Error(f"config key '{KEY}.block_n': {block_n!r} is not allowed; allowed: a power of two from 16 "
                     "to 256")
    if "keys" in exp["sink_kinds"] and not (0 < ksink < n and ksink <= block_n):
        raise _Error(f"config key '{KEY}.ksink': {ksink} is not allowed with n = {n}, block_n = {block_n}; "
                     "allowed: 1 <= ksink < n and ksink <= block_n (every sink key in KV block 0)")
    for field in ("num_splits", "split_layout", "order", "p_normalize", "scale", "sink_kinds"):
        values = list(exp[field])
        if len(set(map(str, values))) != len(values):
            raise _Error(f"config key '{KEY}.{field}': values {values!r} repeat; allowed: distinct values")

    names = list(exp.get("policies", []))
    bad = [x for x in names if x not in DECODE_PRESETS]
    if bad or len(set(names)) != len(names):
        raise _Error(f"config key '{KEY}.policies': {names!r} is not allowed; allowed: distinct decode presets of "
                     f"pcast.policies, {', '.join(DECODE_PRESETS)}")
    for case in partition_cases(exp):
        if case["n"] > 4096:
            raise _Error(f"config key '{KEY}.partition.keys': {case['n']} is not allowed; allowed: 16 to 4096 "
                         "keys (V is the identity, d = n)")


def decode_shard_spec(exp: Mapping, base: dict) -> dict:
    """The decode shard's spec: ``base`` (experiment, shard, seeds, batch, heads, backend) plus everything
    its rows depend on."""
    part = exp.get("partition")
    return {**base, "shapes": [{"n": int(exp["n"]), "d": int(exp["d"])}], "sigma": [float(exp["sigma"])],
            "block_n": int(exp["block_n"]), "ksink": int(exp["ksink"]), "fmt": str(exp["fmt"]),
            "delta": delta_values(exp["delta"]), "sink_kinds": list(exp["sink_kinds"]), "calls": calls(exp),
            "policy_calls": policy_calls(exp),
            "partition": None if not part else {"cases": partition_cases(exp), "rows": int(part["rows"])},
            "max_batch_items": int(exp.get("max_batch_items", 64))}


def decode_expected_rows(exp: Mapping, n_deltas: int) -> int:
    """Rows of results/tidy/decode.csv: per seed, heads x Δ x (calls and presets) per sink kind, plus the partition
    cases."""
    configs = len(calls(exp)) + len(exp.get("policies", []))
    rows = int(exp["heads"]) * n_deltas * configs * len(exp["sink_kinds"]) + len(partition_cases(exp))
    return int(exp["seeds"]) * rows
