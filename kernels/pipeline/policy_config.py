"""The policies experiment's configuration: checks, shard specs and row counts (torch-free).

``experiments.policies`` in config.yaml (docs/interfaces.md, "The policies experiment") names
policies (presets of :data:`pcast.policies.POLICIES` or the user's, from the top-level
``policies:`` section) and operand-cast ``variants``; each policy brings its own order, S,
scale mode, rescale threshold, sink mode, format, row sum and block sizes. :func:`check_policies`
checks what the schema cannot say; :func:`policy_shard_spec` resolves every listed policy to the
keywords of :func:`pcast.attention` it runs with, so a shard's ``params`` change exactly when
its work does. :mod:`pcast.pipeline.config` dispatches here for the policies experiment.
"""

from __future__ import annotations

from collections.abc import Mapping

from pcast.contract import DYNAMIC_SCALE_MODES, HEAD_DIMS, MX_FORMAT_NAMES, POLICY_EXPERIMENT, SINK_KINDS, VARIANTS, is_allowed
from pcast.policies import POLICIES, Policy, policies_from_config

__all__ = ["OPERAND_KEYS", "resolve_variants", "resolve_policies", "check_policies", "policy_shard_spec",
           "policy_inputs_spec", "policy_expected_rows", "call_kwargs", "floor_kwargs", "FLOOR_PATH"]

KEY = f"experiments.{POLICY_EXPERIMENT}"
OPERAND_KEYS = ("qk_fmt", "qk_scale", "v_fmt", "v_scale")  # what a variant sets
# The deployed variant's casts where config.yaml leaves a key out (docs/interfaces.md).
_DEPLOYED_DEFAULT = {"qk_fmt": "e4m3fn", "qk_scale": "tensor", "v_fmt": "e4m3fn", "v_scale": "tensor"}
_NO_CASTS = {"qk_fmt": None, "qk_scale": "tensor", "v_fmt": None, "v_scale": "tensor"}


def call_kwargs(policy: Mapping, casts: Mapping, *, kind: str, ksink: int, causal: bool, backend: str) -> dict:
    """The keywords of :func:`pcast.attention` for one policy, variant and sink kind (no tensors).

    ``backend="auto"`` runs a dynamic FP8 P scale (``tile_max``, ``per_row``) on the emulator: the Triton kernel
    refuses them (docs/interfaces.md, "Dynamic P scales")."""
    dynamic = policy.get("scale_mode") in DYNAMIC_SCALE_MODES and str(policy.get("fmt")) not in MX_FORMAT_NAMES
    return {**policy, **casts, "causal": bool(causal), "ksink": int(ksink) if kind == "keys" else 0,
            "backend": "emulator" if dynamic and backend == "auto" else backend}


# The P path of every floor call: the paper's contract at its defaults (docs/interfaces.md).
FLOOR_PATH = {"order": "forward", "scale": 1.0, "scale_mode": "multiply", "rescale_threshold": 0.0,
              "sink_mode": "final", "fmt": None, "rowsum": "unrounded", "block_m": 64, "block_n": 64}


def floor_kwargs(kwargs: Mapping) -> dict:
    """The V-cast floor's call for a policy call ``kwargs``: its operand casts, causal flag, sink
    keys and backend, with P unrounded on the paper's P path (:data:`FLOOR_PATH`)."""
    return {**kwargs, **FLOOR_PATH}


class _Error(ValueError):
    """Raised here; :mod:`pcast.pipeline.config` re-raises it as its ``ConfigError``."""


def resolve_variants(exp: Mapping) -> dict[str, dict]:
    """Variant name -> the four operand keywords it runs with (``p_only``: no casts).

    Raises ValueError naming ``experiments.policies.variants.<name>[.<key>]``.
    """
    variants = exp.get("variants")
    if not isinstance(variants, Mapping) or not variants:
        raise _Error(f"config key '{KEY}.variants': {variants!r} is not allowed; allowed: a non-empty mapping "
                     f"of variant names ({', '.join(VARIANTS)}) to their operand casts")
    out = {}
    for name, casts in variants.items():
        vkey = f"{KEY}.variants.{name}"
        if name not in VARIANTS:
            raise _Error(f"config key '{vkey}': {name!r} is not a variant; allowed: {', '.join(VARIANTS)}")
        casts = dict(casts or {})
        unknown = sorted(set(casts) - set(OPERAND_KEYS))
        if unknown:
            raise _Error(f"config key '{vkey}.{unknown[0]}' is not allowed; allowed keys: {', '.join(OPERAND_KEYS)}")
        if name == "p_only":
            cast = [k for k in ("qk_fmt", "v_fmt") if casts.get(k) is not None]
            if cast:
                raise _Error(f"config key '{vkey}.{cast[0]}': {casts[cast[0]]!r} is not allowed; allowed: null "
                             "(p_only keeps Q, K and V in float32)")
            out[name] = dict(_NO_CASTS, **{k: casts[k] for k in ("qk_scale", "v_scale") if k in casts})
        else:
            out[name] = dict(_DEPLOYED_DEFAULT, **casts)
            if out[name]["qk_fmt"] is None and out[name]["v_fmt"] is None:
                raise _Error(f"config key '{vkey}': casts no operand; allowed: qk_fmt and/or v_fmt an FP8 format "
                             "(a variant without casts is p_only)")
    for name, v in out.items():
        _check_operands(f"{KEY}.variants.{name}", v)
    return out


def _check_operands(key: str, casts: Mapping) -> None:
    try:
        Policy(name="variant", **casts)  # the same field rules as a policy's operand fields
    except ValueError as e:
        raise _Error(f"config key '{key}': {e}") from None


def resolve_policies(exp: Mapping, user_policies: Mapping | None = None, *, key: str = KEY) -> dict[str, dict]:
    """Policy name -> its :func:`pcast.attention` keywords, for every name the experiment lists.

    User policies (top-level ``policies:``) are built by
    :func:`pcast.policies.policies_from_config`. Raises ValueError naming the key: a bad user
    policy (``policies.<name>.<field>``), an unknown name (``experiments.policies.policies[i]``), or
    a user's policy that sets operand casts itself (the variants decide those). A preset verified against a
    deployed kernel carries the operand casts its adapter ran: here its P path is taken and the variants decide
    the operands, as for every other policy.
    """
    try:
        user = policies_from_config(user_policies)
    except ValueError as e:
        raise _Error(f"config key 'policies': {e}") from None
    names = exp["policies"]
    known = {**POLICIES, **user}
    out = {}
    for i, name in enumerate(names):
        if name not in known:
            raise _Error(f"config key '{key}.policies[{i}]': {name!r} is not a known policy; allowed: the presets "
                         f"{', '.join(POLICIES)} or a name of the top-level 'policies' section "
                         f"({', '.join(user) or 'none defined'})")
        kwargs = known[name].attention_kwargs()
        cast = [k for k in ("qk_fmt", "v_fmt") if kwargs[k] is not None]
        if cast and name not in POLICIES:
            raise _Error(f"config key 'policies.{name}.{cast[0]}': {kwargs[cast[0]]!r} is not allowed in "
                         f"{key}; allowed: null (the experiment's variants add the operand casts)")
        out[name] = {k: v for k, v in kwargs.items() if k not in OPERAND_KEYS}
    return out


def check_policies(exp: Mapping, user_policies: Mapping | None = None) -> None:
    """The policies experiment's checks beyond the schema; raises ValueError naming the key.

    ``exp`` is ``experiments.policies``, ``user_policies`` the top-level ``policies:`` section.
    """
    policies = resolve_policies(exp, user_policies)
    resolve_variants(exp)
    kinds = exp["sink_kinds"]
    for kind in kinds:
        if kind not in SINK_KINDS:
            raise _Error(f"config key '{KEY}.sink_kinds': {kind!r} is not allowed; allowed: {', '.join(SINK_KINDS)}")
    for i, shape in enumerate(exp["shapes"]):
        if not is_allowed(shape["d"], HEAD_DIMS):
            raise _Error(f"config key '{KEY}.shapes[{i}].d': {shape['d']!r} is not allowed; allowed: a power of "
                         f"two from 16 to 256 ({', '.join(map(str, HEAD_DIMS))})")
        if "keys" in kinds and not 1 <= exp["ksink"] < shape["n"]:
            raise _Error(f"config key '{KEY}.ksink': {exp['ksink']} is not allowed with {KEY}.shapes[{i}].n = "
                         f"{shape['n']}; allowed: 1 <= ksink < n")
    if "keys" in kinds:
        for name, kw in policies.items():
            if exp["ksink"] > kw["block_n"]:
                raise _Error(f"config key '{KEY}.ksink': {exp['ksink']} is not allowed with policy {name!r} "
                             f"(block_n = {kw['block_n']}); allowed: ksink <= block_n of every policy (every "
                             "sink in KV block 0, as the theory assumes)")


def policy_shard_spec(exp: Mapping, user_policies: Mapping | None, base: dict) -> dict:
    """The policies shard's spec: ``base`` (seeds, shapes, grids of :func:`pcast.pipeline.config.shard_spec`) plus
    the sink kinds, ksink, every listed policy's resolved keywords and every variant's casts."""
    return {**base, "sink_kinds": list(exp["sink_kinds"]), "ksink": int(exp["ksink"]),
            "policies": resolve_policies(exp, user_policies), "variants": resolve_variants(exp)}


def policy_inputs_spec(base: Mapping) -> dict:
    """The part of a policies shard's spec that decides its stored inputs (as the sweeps')."""
    nd = sorted({(s["n"], s["d"]) for s in base["shapes"]})
    return {"experiment": base["experiment"], "shard": base["shard"], "seeds": base["seeds"],
            "batch": base["batch"], "heads": base["heads"], "nd": [list(x) for x in nd], "sigma": base["sigma"]}


def policy_expected_rows(exp: Mapping, n_deltas: int) -> int:
    """Rows of results/tidy/policies.csv: seeds x shapes x causal x sigma x policies x variants x sink items."""
    per_kind = {"keys": len(exp["sink_v_scale"]) * n_deltas, "logit": n_deltas}
    items = sum(per_kind[k] for k in exp["sink_kinds"])
    return (int(exp["seeds"]) * len(exp["shapes"]) * len(exp["causal"]) * len(exp["sigma"])
            * len(exp["policies"]) * len(exp["variants"]) * items)
