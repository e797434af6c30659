"""The policies experiment's shard job: every named P policy on the stored sink inputs of a shard.

For every seed, shape, sigma, causal flag and sink kind, the shard stacks the kind's Δ values along
the batch dimension (``keys``: ``ksink`` sink keys at Δ, one value tensor per sink_v_scale sharing
q and k; ``logit``: every Δ as a learned sink logit, :func:`pcast.models.sinks.learned_sink`, with no
sink key) and then:

* computes the float64 reference once per stack and value tensor (:func:`pcast.reference.reference_stack`,
  the learned sink logit included; the non-sink keys' partial sums once for the stack). Operand casts do not enter it: it is the truth of the
  unquantized inputs, so a deployed variant's error includes what its FP8 operands cost;
* runs every DISTINCT attention call once (:func:`call_key`): policies whose keywords agree, or
  differ only where the contract makes them irrelevant, share one call and get one row each; a
  call runs over the stack's value tensors (P once for all), and all calls of a stack run in one
  :func:`pcast.attention_calls`, which takes the scores once for the calls that share them (and
  the non-sink keys' scores once for the stack);
* runs the V-cast floor once per stack and variant (:func:`floor_kwargs`): P unrounded
  (``fmt=None``) with the variant's operand casts. Without a P cast every policy computes the
  same softmax; its order, S, scale mode, τ, sink mode and blocks change only fp32 rounding, so
  the floor is computed once with the paper's P path (measured on the default grid: every
  policy's own ``fmt=None`` call is within 2e-6 relative of it for FP8 operands; for float32
  operands the floor is fp32 rounding alone, about 1e-12 of the output's mean square).

Rows are ``pcast.contract.POLICY_TIDY_COLUMNS``, sorted by ``POLICY_CONFIG_COLUMNS`` then seed;
formats that are None are written ``none``. Same spec and inputs give the same bytes.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from pcast import attention_calls
from pcast.contract import DIAGNOSTICS, POLICY_CONFIG_COLUMNS, POLICY_TIDY_COLUMNS
from pcast.models.sinks import learned_sink
from pcast.pipeline.inputs import base_tensors
from pcast.pipeline.policy_config import FLOOR_PATH, call_kwargs, floor_kwargs
from pcast.pipeline.runs import run_seeds, Tally, delta_chunks, finish_shard, value_stack
from pcast.reference import reference_stack

__all__ = ["run_policies_shard", "call_kwargs", "call_key", "floor_kwargs", "FLOOR_PATH"]

log = logging.getLogger("pcast.pipeline")

NONE = "none"  # how a format that is None (no cast) is written in the tidy table


def _power_of_two_ge1(x: float) -> bool:
    return x >= 1 and math.frexp(x)[0] == 0.5


def call_key(kwargs: Mapping, *, logit: bool) -> tuple:
    """A hashable key: two calls with the same key give the same bits on the same tensors.

    The key is every keyword, less those the contract makes irrelevant for this call:

    * ``sink_mode`` without a sink logit (it only says how the logit enters);
    * ``rowsum`` when ``fmt`` is None and the row sum of ``p_q/S`` (multiply) or ``p_q``
      (exp2_offset) equals that of the unrounded ``p`` / ``x`` bit for bit: with no cast
      ``p_q = x``, and sums of ``p·S`` divided by S equal sums of ``p`` exactly for S a power of
      two >= 1 (scaling up by 2^k neither overflows nor loses subnormal bits);
    * the operand scale of an operand that is not cast.

    Everything else (order, S, scale mode, τ, blocks, causal, casts) can change fp32 rounding
    even when P is not rounded, so it stays in.
    """
    kw = dict(kwargs)
    if not logit:
        kw.pop("sink_mode")
    if kw["fmt"] is None and (kw["scale_mode"] == "exp2_offset" or _power_of_two_ge1(float(kw["scale"]))):
        kw.pop("rowsum")
    for op in ("qk", "v"):
        if kw[f"{op}_fmt"] is None:
            kw.pop(f"{op}_scale")
    return tuple(sorted((k, v) for k, v in kw.items()))


@dataclass
class _Stack:
    """One stacked batch: the Δ of a sink kind on one stored base (one value tensor per
    sink_v_scale, sharing q and k), and the reference of each value tensor."""

    q: object
    k: object
    values: list  # one stacked v per sink_v_scale of svs
    sink_logit: object  # float32 [L·B, H] or None
    svs: list  # the sink_v_scale of each value tensor
    deltas: list  # the Δ of each stacked item
    refs: list  # float64, the stacked reference of each value tensor
    ref_sqs: list  # mean square of each reference per item
    meta: dict  # the row fields the stack fixes


def _stack(tensors, spec: Mapping, seed: int, shape: Mapping, sigma: float, kind: str, svs_list, deltas, device):
    """q, k (and the learned sink logits) of ``deltas`` of one stored base, stacked along batch, and
    one stacked v per sink_v_scale (:func:`pcast.pipeline.runs.value_stack`)."""
    base = base_tensors(tensors, seed, shape["n"], shape["d"], sigma)
    ksink = spec["ksink"] if kind == "keys" else 0
    q, k, values = value_stack(base, ksink, deltas, svs_list, device)
    sink = None
    if kind == "logit":
        sink = torch.cat([learned_sink(dl, batch=spec["batch"], heads=spec["heads"]) for dl in deltas]).to(device)
    return q, k, values, sink


def _measure(tally: Tally, st: _Stack, calls: list) -> list[list[dict]]:
    """One :func:`pcast.attention_calls` of every call on the stack (each a dict of keywords): per call and
    value tensor, the per-item error against its reference and the summed diagnostics."""
    t0 = time.perf_counter()
    per_call = attention_calls(st.q, st.k, st.values, calls, sink_logit=st.sink_logit)
    if st.q.device.type == "cuda":
        torch.cuda.synchronize()
    tally.kernel_s += time.perf_counter() - t0
    L = len(st.deltas)
    tally.runs += L * len(st.values) * len(calls)
    measured = []
    for results in per_call:
        out = []
        for r, ref in zip(results, st.refs):
            tally.backends.add(r.backend)
            err = (r.out.double() - ref).reshape(L, -1)
            out.append({"backend": r.backend, "mse": err.square().mean(1).cpu().tolist(),
                        "max_abs_err": err.abs().amax(1).cpu().tolist(),
                        **{c: getattr(r, c).reshape(L, -1).sum(1).cpu().tolist() for c in DIAGNOSTICS}})
        measured.append(out)
    return measured


def _frac(a: int, b: int) -> float:
    return a / b if b else 0.0  # a fraction of zero terms is 0 (docs/interfaces.md)


def _row(st: _Stack, j: int, i: int, main: Mapping, floor: Mapping, fields: Mapping) -> dict:
    """One tidy row: item ``i`` (its Δ) of value tensor ``j`` (its sink_v_scale) under one policy and variant."""
    r2 = float(st.ref_sqs[j][i])
    uf, tm, ufs, tms, sat = (int(main[c][i]) for c in ("underflow", "terms", "underflow_sink", "terms_sink",
                                                        "saturated"))
    return {**st.meta, **fields, "delta": st.deltas[i], "sink_v_scale": st.svs[j], "backend": main["backend"],
            "mse": main["mse"][i], "rel_mse": main["mse"][i] / r2 if r2 > 0 else math.nan,
            "max_abs_err": main["max_abs_err"][i], "floor_mse": floor["mse"][i],
            "floor_rel_mse": floor["mse"][i] / r2 if r2 > 0 else math.nan, "underflow": uf, "terms": tm,
            "underflow_frac": _frac(uf, tm), "underflow_sink": ufs, "terms_sink": tms,
            "underflow_sink_frac": _frac(ufs, tms), "saturated": sat, "saturated_frac": _frac(sat, tm + tms)}


def _policy_fields(name: str, variant: str, kw: Mapping) -> dict:
    return {"variant": variant, "policy": name, "order": kw["order"], "scale": float(kw["scale"]),
            "scale_mode": kw["scale_mode"], "rescale_threshold": float(kw["rescale_threshold"]),
            "sink_mode": kw["sink_mode"], "fmt": kw["fmt"] or NONE, "rowsum": kw["rowsum"],
            "qk_fmt": kw["qk_fmt"] or NONE, "v_fmt": kw["v_fmt"] or NONE, "block_m": kw["block_m"],
            "block_n": kw["block_n"]}


def _cast_key(kwargs: Mapping) -> tuple:
    """The q/k operand cast of a call: calls that differ here never share scores."""
    return (kwargs.get("qk_fmt"), kwargs.get("qk_scale") if kwargs.get("qk_fmt") is not None else None)


def _run_stack(tally: Tally, spec: Mapping, st: _Stack, kind: str, counts: dict) -> None:
    """Every policy and variant on one stack: each distinct call (floors included) once, all of them in
    one :func:`pcast.attention_calls` (which shares the scores between them)."""
    logit = st.sink_logit is not None
    keys: dict[tuple, int] = {}  # call key -> index into calls
    calls: list[dict] = []

    def index(kwargs):
        key = call_key(kwargs, logit=logit)
        if key not in keys:
            keys[key] = len(calls)
            calls.append(dict(kwargs))
        return keys[key]

    planned = []
    for (variant, casts), (name, policy) in itertools.product(sorted(spec["variants"].items()),
                                                             sorted(spec["policies"].items())):
        kwargs = call_kwargs(policy, casts, kind=kind, ksink=spec["ksink"], causal=st.meta["causal"],
                             backend=spec["backend"])
        planned.append((index(kwargs), index(floor_kwargs(kwargs)), _policy_fields(name, variant, kwargs)))
    # One attention_calls a q/k cast: only calls with the same cast share scores, and the results of
    # one batch of calls are held at once (the run plan's memory model counts the largest batch).
    measured: dict[int, list] = {}
    for cast in sorted({_cast_key(c) for c in calls}, key=repr):
        batch = [i for i, c in enumerate(calls) if _cast_key(c) == cast]
        measured.update(zip(batch, _measure(tally, st, [calls[i] for i in batch])))
    for main, floor, fields in planned:
        mains, floors = measured[main], measured[floor]
        tally.rows += [_row(st, j, i, mains[j], floors[j], fields) for j in range(len(st.values))
                       for i in range(len(st.deltas))]
    counts["calls"] += len(calls)


def _policies_seed(tally: Tally, spec: Mapping, tensors, seed: int, device, counts: dict) -> None:
    """Every shape, sigma, causal flag, sink kind and stack of Δ of one seed (the keys kind's
    sink_v_scale values share each stack's q and k; the logit kind has one value tensor, v = 0)."""
    for shape, sigma, causal, kind in itertools.product(spec["shapes"], spec["sigma"], spec["causal"],
                                                        spec["sink_kinds"]):
        svs_list = list(spec["sink_v_scale"]) if kind == "keys" else [0.0]
        for deltas in delta_chunks(spec["delta"], len(svs_list), spec["max_batch_items"]):
            q, k, values, sink = _stack(tensors, spec, seed, shape, sigma, kind, svs_list, deltas, device)
            t0 = time.perf_counter()
            refs = reference_stack(q, k, values, causal=causal, sink_logit=sink)
            tally.reference_s += time.perf_counter() - t0
            meta = {"experiment": spec["experiment"], "seed": seed, "n": shape["n"], "d": shape["d"],
                    "sink_kind": kind, "ksink": spec["ksink"] if kind == "keys" else 0, "sigma": sigma,
                    "causal": bool(causal)}
            ref_sqs = [ref.square().reshape(len(deltas), -1).mean(1).cpu() for ref in refs]
            st = _Stack(q, k, values, sink, svs_list, list(deltas), refs, ref_sqs, meta)
            _run_stack(tally, spec, st, kind, counts)
            del st, q, k, values, refs


def _sort_key(row: Mapping):
    return tuple(row[c] for c in POLICY_CONFIG_COLUMNS) + (row["seed"],)


def run_policies_shard(spec: Mapping, inputs_path: str | os.PathLike, out_csv: str | os.PathLike,
                       timing_csv: str | os.PathLike, *, threads: int = 1, n_shards: int | None = None) -> dict:
    """Run one shard of the policies experiment and write its tidy rows and timing.

    ``spec`` is the shard's :func:`pcast.pipeline.config.shard_spec` (policies resolved to their
    keywords, variants to their operand casts); returns the timing row.
    """
    counts = {"calls": 0}

    def per_seed(tally, spec, tensors, seed, device):
        _policies_seed(tally, spec, tensors, seed, device, counts)

    tally, t_start = run_seeds(spec, inputs_path, threads, per_seed)
    return finish_shard(spec, tally, t_start, POLICY_TIDY_COLUMNS, _sort_key, out_csv, timing_csv, n_shards,
                        f"{len(tally.rows)} rows from {counts['calls']} distinct calls ({tally.runs} runs, V-cast "
                        "floors included)")
