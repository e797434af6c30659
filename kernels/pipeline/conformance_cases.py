"""The conformance check's cases: every attention call the experiments make, and the subset the Triton
kernel runs (torch-free).

:func:`experiment_cases` lists the distinct calls of the sweeps (``collapse``, ``scales``, ``threshold``:
their orders x scales with their format, row sum and blocks), of the policies experiment (every listed
policy x variant x sink kind, and each variant's V-cast floor, :func:`pcast.pipeline.policy_config.floor_kwargs`)
and of the fp4 experiment (every P cast x order), each with the ``group`` of calls the experiment passes to one
:func:`pcast.attention_calls` (the sweeps' calls, the fp4 casts, the policies' calls of one sink kind and one
Q·K cast). The engine rows run every case at the sweeps' shape; :func:`covering_subset` picks the cases the
Triton kernel runs on at a small shape (its interpreter costs about a second a call there, about 100 s at
N = 1,024): greedily, the case that brings the most (option, value) pairs not yet met, first in list order
on a tie, until every value of every option in :data:`OPTIONS` has met the kernel once; a call the kernel
refuses (an FP8 dynamic P scale, docs/interfaces.md "Dynamic P scales") runs in the engine rows only.
:func:`engine_spec` puts both into the conformance shard's spec, :func:`engine_row_count` counts the rows they
give, :func:`check_engine` checks the ``engine`` part of the section.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pcast.contract import (DYNAMIC_SCALE_MODES, FP4_EXPERIMENT, HEAD_DIMS, MX_FORMAT_NAMES, POLICY_EXPERIMENT,
                            SWEEP_EXPERIMENTS, combo_label, is_allowed)
from pcast.pipeline import fp4_config, policy_config

__all__ = ["OPTIONS", "experiment_cases", "option_values", "covering_subset", "case_columns", "engine_spec",
           "engine_row_count", "check_engine"]

#: The options of a call whose every value the Triton kernel must meet (``scale`` by its class: 1, a power
#: of two, a non-power of two, or above the format's largest finite value, which saturates P = 1).
OPTIONS = ("order", "scale", "scale_mode", "rescale_threshold", "sink", "fmt", "rowsum", "qk_fmt", "v_fmt", "blocks")

_FP8_MAX = {"e4m3fn": 448.0, "e5m2": 57344.0, "e4m3fnuz": 240.0, "e5m2fnuz": 57344.0}
_DEFAULTS = {"scale_mode": "multiply", "rescale_threshold": 0.0, "sink_mode": "final", "qk_fmt": None,
             "qk_scale": "tensor", "v_fmt": None, "v_scale": "tensor"}


def _case(label: str, group: str, kind: str, call: Mapping) -> dict:
    return {"label": label, "group": group, "kind": kind, "call": {**_DEFAULTS, **call}}


def _sweep_cases(experiments: Mapping, ksink: int) -> list[dict]:
    out = []
    for name in SWEEP_EXPERIMENTS:
        exp = experiments[name]
        for shape in exp["shapes"]:
            for order in exp["order"]:
                for scale in exp["scale"]:
                    call = {"order": order, "scale": float(scale), "fmt": exp.get("fmt", "e4m3fn"),
                            "rowsum": exp.get("rowsum", "unrounded"), "block_m": int(shape["block_m"]),
                            "block_n": int(shape["block_n"]), "causal": False, "ksink": ksink}
                    out.append(_case(f"sweeps {combo_label(order, scale)}", "sweeps", "keys", call))
    return out


def _policy_cases(exp: Mapping, user_policies: Mapping | None, ksink: int) -> list[dict]:
    policies = policy_config.resolve_policies(exp, user_policies)
    variants = policy_config.resolve_variants(exp)
    out = []
    for kind in exp["sink_kinds"]:
        for variant, casts in sorted(variants.items()):
            group = f"policies {kind} qk={casts.get('qk_fmt') or 'none'}"
            floor = None
            for name, policy in sorted(policies.items()):
                kw = policy_config.call_kwargs(policy, casts, kind=kind, ksink=ksink, causal=False, backend="emulator")
                kw.pop("backend")
                floor = policy_config.floor_kwargs(kw)
                out.append(_case(f"policies {name} {variant} {kind}", group, kind, kw))
            if floor is not None:
                out.append(_case(f"policies floor {variant} {kind}", group, kind, floor))
    return out


def _fp4_cases(exp: Mapping, ksink: int) -> list[dict]:
    out = []
    for shape in exp["shapes"]:
        for cast in fp4_config.casts(exp):
            for order in exp["order"]:
                call = {"order": order, "scale": cast["scale"], "scale_mode": cast["scale_mode"], "fmt": cast["fmt"],
                        "rowsum": "unrounded", "block_m": int(shape["block_m"]), "block_n": int(shape["block_n"]),
                        "causal": False, "ksink": ksink}
                out.append(_case(f"fp4 {cast['cast']} {order}", "fp4", "keys", call))
    return out


def experiment_cases(experiments: Mapping, user_policies: Mapping | None, *, ksink: int) -> list[dict]:
    """Every distinct call of the sweeps, the policies and the fp4 experiment, in that order: dicts with
    ``label`` (unique), ``group`` (the calls one :func:`pcast.attention_calls` takes together), ``kind``
    (``keys``: ``ksink`` sink keys at Δ; ``logit``: a learned sink logit Δ, no sink key) and ``call`` (the
    keywords of :func:`pcast.attention`, blocks included, no backend). A call two experiments (or two
    policies) make alike is listed once, under its first label."""
    cases = _sweep_cases(experiments, ksink)
    cases += _policy_cases(experiments[POLICY_EXPERIMENT], user_policies, ksink)
    cases += _fp4_cases(experiments[FP4_EXPERIMENT], ksink)
    seen, labels, out = set(), set(), []
    for c in cases:
        key = (c["group"], c["kind"], tuple(sorted((k, repr(v)) for k, v in c["call"].items())))
        if key in seen or c["label"] in labels:
            continue
        seen.add(key)
        labels.add(c["label"])
        out.append(c)
    return out


def _scale_class(scale: float, fmt) -> str:
    if fmt in _FP8_MAX and scale > _FP8_MAX[fmt]:
        return "above max_finite"
    if scale == 1:
        return "1"
    return "power of two" if math.frexp(scale)[0] == 0.5 else "non-power of two"


def option_values(case: Mapping) -> dict:
    """The value of each option of :data:`OPTIONS` in one case (``sink``: ``keys``, or ``logit`` with its
    sink mode; ``blocks``: ``block_m x block_n``)."""
    c = case["call"]
    sink = "keys" if case["kind"] == "keys" else f"logit {c['sink_mode']}"
    return {"order": c["order"], "scale": _scale_class(float(c["scale"]), c["fmt"]), "scale_mode": c["scale_mode"],
            "rescale_threshold": f"{float(c['rescale_threshold']):g}", "sink": sink, "fmt": str(c["fmt"]),
            "rowsum": c["rowsum"], "qk_fmt": str(c["qk_fmt"]), "v_fmt": str(c["v_fmt"]),
            "blocks": f"{c['block_m']}x{c['block_n']}"}


def covering_subset(cases: list[Mapping]) -> list[int]:
    """Indices of a subset of ``cases`` in which every (option, value) of any case the Triton kernel runs occurs
    at least once: greedy set cover, the case with the most pairs not yet covered first (the earliest on a tie).
    An FP8 dynamic P scale, which the kernel refuses, is never chosen."""
    refused = [c["call"]["scale_mode"] in DYNAMIC_SCALE_MODES and str(c["call"]["fmt"]) not in MX_FORMAT_NAMES
               for c in cases]
    pairs = [set() if no else set(option_values(c).items()) for c, no in zip(cases, refused)]
    todo = set().union(*pairs) if pairs else set()
    chosen: list[int] = []
    while todo:
        best = max(range(len(cases)), key=lambda i: (len(pairs[i] & todo), -i))
        chosen.append(best)
        todo -= pairs[best]
    return sorted(chosen)


def case_columns(case: Mapping) -> dict:
    """The option columns of a conformance row for one case (formats that are None written ``none``)."""
    c = case["call"]
    return {"case": case["label"], "order": c["order"], "scale": float(c["scale"]), "fmt": str(c["fmt"] or "none"),
            "scale_mode": c["scale_mode"], "rescale_threshold": float(c["rescale_threshold"]),
            "sink_kind": case["kind"], "ksink": int(c["ksink"]), "sink_mode": c["sink_mode"], "rowsum": c["rowsum"],
            "qk_fmt": c["qk_fmt"] or "none", "v_fmt": c["v_fmt"] or "none", "block_m": int(c["block_m"]),
            "block_n": int(c["block_n"])}


def engine_spec(exp: Mapping, experiments: Mapping | None, policies: Mapping | None) -> dict:
    """The conformance shard spec's ``engine``, ``cases`` and ``cover`` (empty without ``exp["engine"]``): the
    engine's seeds, shape, Δ and sink value norms; every call of the other experiments
    (:func:`experiment_cases`); the covering subset's indices and shape. Raises ValueError without
    ``experiments``."""
    engine = exp.get("engine")
    if not engine:
        return {}
    if experiments is None:
        raise ValueError("the conformance check's engine part needs the other experiments' sections "
                         "(experiments=config['experiments']) to list their calls")
    cases = experiment_cases(experiments, policies, ksink=int(exp["ksink"]))
    return {"engine": {"seeds": int(engine["seeds"]), "shape": {k: int(v) for k, v in engine["shape"].items()},
                       "delta": [float(x) for x in engine["delta"]],
                       "sink_v_scale": [float(x) for x in engine["sink_v_scale"]]},
            "cases": cases,
            "cover": {"shape": {k: int(v) for k, v in engine["cover_shape"].items()}, "cases": covering_subset(cases)}}


def engine_row_count(spec: Mapping, seeds: int) -> int:
    """Covering-case and engine rows of the conformance table, from :func:`engine_spec`: per engine seed (of
    the section's ``seeds``), one row per covering case and one per case x Δ x sink value norm (a learned
    sink logit has one value tensor, v = 0)."""
    if not spec:
        return 0
    eng = spec["engine"]
    per_kind = {"keys": len(eng["delta"]) * len(eng["sink_v_scale"]), "logit": len(eng["delta"])}
    per_seed = len(spec["cover"]["cases"]) + sum(per_kind[c["kind"]] for c in spec["cases"])
    return min(eng["seeds"], int(seeds)) * per_seed


def check_engine(key: str, exp: Mapping) -> None:
    """The engine part of the conformance section (``key``): head dims allowed, every sink key inside each
    shape, finite Δ and norms. Raises ValueError naming the key and what is allowed."""
    engine = exp.get("engine")
    if not engine:
        return
    for field in ("shape", "cover_shape"):
        shape = engine[field]
        if not is_allowed(shape["d"], HEAD_DIMS):
            raise ValueError(f"config key '{key}.engine.{field}.d': {shape['d']!r} is not allowed; allowed: a power "
                             f"of two from 16 to 256 ({', '.join(map(str, HEAD_DIMS))})")
        if not 0 <= exp["ksink"] < shape["n"]:
            raise ValueError(f"config key '{key}.engine.{field}.n': {shape['n']} is not allowed with {key}.ksink = "
                             f"{exp['ksink']}; allowed: n > ksink")
    for field in ("delta", "sink_v_scale"):
        if not all(math.isfinite(float(x)) for x in engine[field]):
            raise ValueError(f"config key '{key}.engine.{field}': {engine[field]!r} is not allowed; allowed: "
                             "finite numbers")
