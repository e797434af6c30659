"""The pipeline's configuration: presets, the checks a JSON schema cannot express, shard specs.

Torch-free: ``workflow/rules/common.smk`` imports this before any job, so a bad config stops the
run before anything heavy loads. The schemas (``workflow/schemas/config.schema.yaml``, then
``claims.schema.yaml``) run first, their errors worded by :func:`schema_message`; :func:`check_config`
then checks what they cannot say (powers of two, ``ksink < n``, finite and distinct grid values;
the ``statistics:`` and ``claims:`` sections against the experiments, :mod:`.claims_config`).

A shard is a group of consecutive seeds of one experiment (:func:`shard_seeds`). Its
:func:`shard_spec` lists everything the shard job computes, Δ grid expanded; the rules pass it as
canonical JSON (:func:`spec_json`) in ``params``, so Snakemake's params trigger reruns exactly
the shards whose work changed. :func:`inputs_spec` is the part that decides the stored inputs.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Mapping

from pcast.contract import (BLOCK_SIZES, CONFORMANCE, DECODE_EXPERIMENT, DYNAMIC_EXPERIMENT, EXPERIMENTS, FP4_EXPERIMENT,
                        HEAD_DIMS, POLICY_EXPERIMENT, REALMODEL, TENSORCORE_EXPERIMENT, is_allowed)
from pcast.pipeline import claims_config, conformance_cases, decode_config, dynamic_config, fp4_config, policy_config
from pcast.pipeline.grid import delta_values, listed

__all__ = ["ConfigError", "deep_merge", "resolve_preset", "delta_values", "check_config", "schema_message", "listed",
           "shard_seeds", "n_shards", "shard_spec", "inputs_spec", "expected_rows", "spec_json", "gpu_jobs"]

_CASTS = {  # the experiments of P casts in both orders under sink keys: (check, shard spec, row count) of each
    FP4_EXPERIMENT: (fp4_config.check_fp4, fp4_config.fp4_shard_spec, fp4_config.fp4_expected_rows),
    DYNAMIC_EXPERIMENT: (dynamic_config.check_dynamic_experiment, dynamic_config.dynamic_shard_spec,
                         dynamic_config.dynamic_expected_rows)}


class ConfigError(ValueError):
    """A configuration value is not allowed; the message names the key and what is allowed."""


# ----------------------------------------------------------------------------- presets


def deep_merge(base: Mapping, override: Mapping) -> dict:
    """A new dict: ``override`` merged into ``base``; nested mappings merge, anything else replaces."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


PRESET_NOTES = ("description", "expected_verdicts")  # keys of a preset that describe it and override nothing


def resolve_preset(config: Mapping, overrides: Mapping | None = None) -> dict:
    """Merge ``presets[preset]`` over the rest of the config, then ``overrides`` over that.

    Precedence, lowest first: config.yaml, the preset, the command line (``overrides``: what
    ``--config``/``--configfile`` set, so a command-line value beats the preset's). ``preset`` and
    ``presets`` are kept (the latter unchanged) so the result validates with the same schema. A
    preset may override any section (``experiments``, ``statistics``, ``claims``).
    """
    name = config.get("preset", "default")
    presets = config.get("presets") or {}
    if name not in presets:
        allowed = ", ".join(sorted(presets)) or "(none defined)"
        raise ConfigError(f"config key 'preset': {name!r} is not a defined preset; allowed: {allowed} "
                          "(the keys of the 'presets' section)")
    override = {k: v for k, v in (presets[name] or {}).items() if k not in PRESET_NOTES}
    merged = deep_merge({k: v for k, v in config.items() if k != "presets"}, override)
    if overrides:
        merged = deep_merge(merged, {k: v for k, v in overrides.items() if k not in ("preset", "presets")})
    merged["presets"] = copy.deepcopy(dict(presets))
    return merged


# ----------------------------------------------------------------------------- checks


def schema_message(err, schema: str = "config.schema.yaml") -> str:
    """One readable line from a jsonschema ``ValidationError``: the key, the value, what is allowed.

    ``schema`` (the schema file's name) is named when the failing part has no ``description``.
    """
    path = ""
    for part in err.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    sub = err.schema if isinstance(err.schema, dict) else {}
    if err.validator == "additionalProperties":
        allowed = sorted(sub.get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed))
        keys = ", ".join(f"{path}.{k}" if path else k for k in extra)
        return f"config key '{keys}' is not allowed here; allowed keys: {', '.join(allowed)}"
    if err.validator == "required":
        missing = [k for k in err.validator_value if k not in err.instance]
        keys = ", ".join(f"{path}.{k}" if path else k for k in missing)
        return f"config key '{keys}' is missing; required: {', '.join(err.validator_value)}"
    allowed = sub.get("description", f"see workflow/schemas/{schema}")
    return f"config key '{path or '(top level)'}': {err.message}; allowed: {allowed}"


def check_config(config: Mapping) -> None:
    """Checks that the JSON schemas cannot express (run after both schemas, on the merged config).

    The experiments first, then the ``statistics:`` and ``claims:`` sections against them
    (:func:`pcast.pipeline.claims_config.check_analysis`: finite numbers, ordered bands, every
    combination, scale and variant named one the experiment read runs).

    Raises:
        ConfigError: naming the key (``experiments.collapse.shapes[0].d``) and what is allowed.
    """
    exps = config["experiments"]
    for name in EXPERIMENTS + (POLICY_EXPERIMENT,):
        if name not in exps:
            raise ConfigError(f"config key 'experiments.{name}' is missing; allowed: a section for each of "
                              f"{', '.join(EXPERIMENTS + (POLICY_EXPERIMENT,))}")
    for name, exp in exps.items():
        key = f"experiments.{name}"
        if name == REALMODEL:
            _check_realmodel(key, exp, config.get("policies"))
            continue
        if name == TENSORCORE_EXPERIMENT:
            _check_tensorcore(key, exp)
            continue
        if name == "deployed":  # table T10 (the schema bounds heads and rows): a captured layer
            if not 0 <= int(exp["layer"]) < (top := int(exps["realmodel"]["layers"])):
                raise ConfigError(f"config key '{key}.layer': {exp['layer']} is not allowed; allowed: 0 to {top - 1}")
            continue
        if name == DECODE_EXPERIMENT:
            _check_grid(key, "delta", exp["delta"])
            try:
                decode_config.check_decode(exp)
            except ValueError as e:
                raise ConfigError(str(e)) from None
            continue
        if name == POLICY_EXPERIMENT or name in _CASTS:
            for field in ("delta", "sigma", "sink_v_scale"):
                _check_grid(key, field, exp[field])
            try:
                policy_config.check_policies(exp, config.get("policies")) if name == POLICY_EXPERIMENT \
                    else _CASTS[name][0](exp)
            except ValueError as e:
                raise ConfigError(str(e)) from None
            continue
        _check_shapes(key, exp["shapes"])
        _check_ksink(key, exp)
        for field in ("delta", "sigma", "sink_v_scale", "scale"):
            _check_grid(key, field, exp[field])
        if name == CONFORMANCE:
            _check_distinct_nd(key, exp["shapes"])
            try:
                conformance_cases.check_engine(key, exp)
            except ValueError as e:
                raise ConfigError(str(e)) from None
    try:
        claims_config.check_analysis(config)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _check_realmodel(key: str, exp: Mapping, user_policies) -> None:
    """The realmodel experiment: policy names known and free of operand casts, the tensors file readable."""
    try:
        policy_config.resolve_policies({"policies": exp["policies"]}, user_policies, key=key)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    path = exp.get("tensors")
    if path is not None and not os.path.isfile(path):
        raise ConfigError(f"config key '{key}.tensors': {path!r} is not a file; allowed: null (capture from "
                          "all-MiniLM-L6-v2) or the path of a safetensors file with layer{L}/q, layer{L}/k, layer{L}/v")


def _check_shapes(key: str, shapes) -> None:
    for i, shape in enumerate(shapes):
        skey = f"{key}.shapes[{i}]"
        if not is_allowed(shape["d"], HEAD_DIMS):
            raise ConfigError(f"config key '{skey}.d': {shape['d']!r} is not allowed; allowed: a power of two "
                              f"from 16 to 256 ({', '.join(map(str, HEAD_DIMS))})")
        for b in ("block_m", "block_n"):
            if not is_allowed(shape[b], BLOCK_SIZES):
                raise ConfigError(f"config key '{skey}.{b}': {shape[b]!r} is not allowed; allowed: a power of "
                                  f"two from 16 to 256")


def _check_ksink(key: str, exp: Mapping) -> None:
    """Every sink inside the sequence and inside KV block 0, for every shape."""
    ksinks = listed(exp["ksink"])
    for i, shape in enumerate(exp["shapes"]):
        for k in ksinks:
            if k >= shape["n"]:
                raise ConfigError(f"config key '{key}.ksink': {k} is not allowed with {key}.shapes[{i}].n = "
                                  f"{shape['n']}; allowed: 0 <= ksink < n")
            if k > shape["block_n"]:
                raise ConfigError(f"config key '{key}.ksink': {k} is not allowed with {key}.shapes[{i}].block_n"
                                  f" = {shape['block_n']}; allowed: ksink <= block_n (every sink in KV block 0,"
                                  " as the theory assumes)")


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_tensorcore(key: str, exp: Mapping) -> None:
    """The tensorcore experiment: a Δ grid, and its sink keys inside the first KV block and fewer than n."""
    _check_grid(key, "delta", exp["delta"])
    if exp["ksink"] > exp["block_n"] or exp["ksink"] >= exp["n"]:
        raise ConfigError(f"config key '{key}.ksink': {exp['ksink']!r} is not allowed; allowed: an integer with "
                          f"1 <= ksink <= block_n ({exp['block_n']}) and ksink < n ({exp['n']})")


def _check_grid(key: str, field: str, raw) -> None:
    """A grid field (a value, a list, or a Δ range): finite numbers, distinct, Δ not empty."""
    values = delta_values(raw) if isinstance(raw, (list, Mapping)) else [raw]
    if isinstance(raw, Mapping):
        if raw["stop"] < raw["start"]:
            raise ConfigError(f"config key '{key}.delta': stop={raw['stop']!r} < start={raw['start']!r}; "
                              "allowed: start <= stop with step > 0")
    for v in values:
        if not _is_number(v) or not math.isfinite(v):
            raise ConfigError(f"config key '{key}.{field}': {v!r} is not allowed; allowed: finite numbers")
    if len(set(values)) != len(values):
        raise ConfigError(f"config key '{key}.{field}': values {values!r} repeat; allowed: distinct values "
                          "(a repeated value would duplicate tidy rows)")
    if field == "delta" and not values:
        raise ConfigError(f"config key '{key}.delta': the grid is empty; allowed: at least one value")


def _check_distinct_nd(key: str, shapes) -> None:
    if len(set(nd := [(s["n"], s["d"]) for s in shapes])) != len(nd):
        raise ConfigError(f"config key '{key}.shapes': (n, d) pairs {nd} repeat; allowed: distinct (n, d) "
                          "(conformance rows are keyed by order, scale, causal, n, d, seed)")


# ----------------------------------------------------------------------------- shards


def shard_seeds(exp: Mapping) -> list[list[int]]:
    """Seeds ``0 .. seeds-1`` cut into consecutive groups of ``seeds_per_shard``."""
    seeds = list(range(int(exp["seeds"])))
    k = int(exp.get("seeds_per_shard", 1))
    return [seeds[i:i + k] for i in range(0, len(seeds), k)]


def n_shards(exp: Mapping) -> int:
    return len(shard_seeds(exp))


def _shapes(exp: Mapping, keys=("n", "d", "block_m", "block_n")) -> list[dict]:
    return [{k: int(s[k]) for k in keys} for s in exp["shapes"]]


def _floats(values) -> list[float]:
    return [float(v) for v in listed(values)]


def _shard_group(name: str, exp: Mapping, shard: int) -> list[int]:
    if not 0 <= shard < len(groups := shard_seeds(exp)):
        raise ConfigError(f"experiment {name!r} has {len(groups)} shards; shard {shard} does not exist")
    return groups[shard]


def shard_spec(name: str, exp: Mapping, shard: int, *, policies: Mapping | None = None,
               experiments: Mapping | None = None) -> dict:
    """Everything one shard job computes, explicit (Δ expanded): the job's ``params``.

    Snakemake's ``params`` rerun trigger compares this across runs, so a change to one experiment's
    grid reruns only that experiment's shards; adding seeds touches only the shards whose seed list
    changed (so the number of shards is deliberately not part of it). ``policies`` is config.yaml's
    top-level ``policies:`` section (the user's policies), read by the policies experiment only,
    whose spec holds every listed policy's resolved keywords
    (:func:`pcast.pipeline.policy_config.policy_shard_spec`). ``experiments`` is read by the conformance
    check's engine part (:func:`pcast.pipeline.conformance_cases.engine_spec`).
    """
    seeds = _shard_group(name, exp, shard)
    if name == POLICY_EXPERIMENT:
        return _policy_spec(exp, shard, seeds, policies)
    if name == DECODE_EXPERIMENT:
        return decode_config.decode_shard_spec(exp, {"experiment": name, "shard": shard, "seeds": seeds, "batch": 1,
                                                     "heads": int(exp["heads"]),
                                                     "backend": exp.get("backend", "auto")})
    if name in _CASTS:  # a sweep's spec less its order x scale grid, plus the P casts
        base = shard_spec("collapse", {**exp, "scale": [], "ksink": [exp["ksink"]]}, shard)
        drop = ("order", "scale", "fmt", "rowsum")
        return _CASTS[name][1](exp, {k: v for k, v in base.items() if k not in drop} | {"experiment": name})
    spec = {
        "experiment": name,
        "shard": shard,
        "seeds": seeds,
        "batch": int(exp.get("batch", 1)),
        "heads": int(exp.get("heads", 1)),
        "shapes": _shapes(exp),
        "causal": [bool(c) for c in exp["causal"]],
        "order": list(exp["order"]),
        "scale": _floats(exp["scale"]),
        "fmt": exp.get("fmt", "e4m3fn"),
        "rowsum": exp.get("rowsum", "unrounded"),
    }
    if name == CONFORMANCE:
        spec.update(ksink=int(exp["ksink"]), delta=float(exp["delta"]), sigma=float(exp["sigma"]),
                    sink_v_scale=float(exp["sink_v_scale"]), tol=float(exp.get("tol", 1e-5)))
        spec.update(_engine_spec(exp, experiments, policies))
    else:
        spec.update(ksink=[int(k) for k in exp["ksink"]], delta=delta_values(exp["delta"]),
                    sigma=_floats(exp["sigma"]), sink_v_scale=_floats(exp["sink_v_scale"]),
                    backend=exp.get("backend", "auto"), max_batch_items=int(exp.get("max_batch_items", 64)))
    return spec


def _engine_spec(exp: Mapping, experiments: Mapping | None, policies: Mapping | None) -> dict:
    try:
        return conformance_cases.engine_spec(exp, experiments, policies)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _policy_spec(exp: Mapping, shard: int, seeds: list[int], policies: Mapping | None) -> dict:
    base = {"experiment": POLICY_EXPERIMENT, "shard": shard, "seeds": seeds, "batch": int(exp.get("batch", 1)),
            "heads": int(exp.get("heads", 1)), "shapes": _shapes(exp, ("n", "d")),
            "causal": [bool(c) for c in exp["causal"]], "delta": delta_values(exp["delta"]),
            "sigma": _floats(exp["sigma"]), "sink_v_scale": _floats(exp["sink_v_scale"]),
            "backend": exp.get("backend", "auto"), "max_batch_items": int(exp.get("max_batch_items", 64))}
    try:
        return policy_config.policy_shard_spec(exp, policies, base)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def inputs_spec(name: str, exp: Mapping, shard: int) -> dict:
    """The part of a shard's spec that decides its stored inputs (not Δ, ksink, sink_v_scale)."""
    if name == POLICY_EXPERIMENT:
        base = {"experiment": name, "shard": shard, "seeds": _shard_group(name, exp, shard),
                "batch": int(exp.get("batch", 1)),
                "heads": int(exp.get("heads", 1)), "shapes": _shapes(exp, ("n", "d")), "sigma": _floats(exp["sigma"])}
        return policy_config.policy_inputs_spec(base)
    spec = shard_spec(name, {k: v for k, v in exp.items() if k != "engine"}, shard)
    shapes = list(spec["shapes"])
    if name == CONFORMANCE and exp.get("engine"):
        shapes += [exp["engine"]["shape"], exp["engine"]["cover_shape"]]
    nd = sorted({(int(s["n"]), int(s["d"])) for s in shapes})
    sig = listed(spec["sigma"])
    return {"experiment": name, "shard": shard, "seeds": spec["seeds"], "batch": spec["batch"],
            "heads": spec["heads"], "nd": [list(x) for x in nd], "sigma": sig}


def expected_rows(name: str, exp: Mapping, *, experiments: Mapping | None = None, policies: Mapping | None = None) -> int:
    """Rows of the experiment's tidy table (``experiments``, ``policies``: as :func:`shard_spec`)."""
    if name == DECODE_EXPERIMENT:
        return decode_config.decode_expected_rows(exp, len(delta_values(exp["delta"])))
    if name == POLICY_EXPERIMENT or name in _CASTS:
        rows = policy_config.policy_expected_rows if name == POLICY_EXPERIMENT else _CASTS[name][2]
        return rows(exp, len(delta_values(exp["delta"])))
    seeds = int(exp["seeds"])
    shapes, causal, combos = len(exp["shapes"]), len(exp["causal"]), len(exp["order"]) * len(exp["scale"])
    if name == CONFORMANCE:
        engine = _engine_spec(exp, experiments, policies)
        return seeds * shapes * causal * combos + conformance_cases.engine_row_count(engine, seeds)
    grid = len(exp["ksink"]) * len(delta_values(exp["delta"])) * len(exp["sigma"]) * len(exp["sink_v_scale"])
    return seeds * shapes * causal * combos * grid


def realmodel_spec(exp: Mapping, user_policies: Mapping | None, stage: str) -> str:
    """The realmodel job's params as canonical JSON: what that stage reads of the config.

    ``capture`` reads the passages, tokens, layers and the user's tensors; ``heads`` and ``outputs``
    also the kernel settings and the named policies, resolved to their keywords (so editing a
    user policy reruns them).
    """
    keys = ["passages", "tokens", "layers", "tensors"]
    spec = {k: exp.get(k) for k in keys}
    if stage != "capture":
        spec.update({k: exp[k] for k in ("ksink", "block_m", "block_n", "shuffle_seed", "policies")})
        spec["backend"] = exp.get("backend", "auto")
        spec["resolved_policies"] = policy_config.resolve_policies({"policies": exp["policies"]}, user_policies,
                                                                   key=f"experiments.{REALMODEL}")
    if stage == "outputs":
        spec.pop("shuffle_seed")
    return spec_json(spec)


def spec_json(spec: Mapping) -> str:
    """Canonical JSON (sorted keys, no spaces): a stable ``params`` value."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def gpu_jobs(exp: Mapping, *, kernel: bool = False) -> int:
    """1 when a job of this experiment would use the GPU here (for ``resources: gpu``), else 0.

    Decided without importing torch: a CUDA device node must exist and CUDA_VISIBLE_DEVICES must
    not hide every device. ``kernel=True`` (conformance) always runs the Triton kernel.
    """
    backend = "triton" if kernel else exp.get("backend", "auto")
    if backend not in ("auto", "triton"):
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    return int(os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0"))
