"""The policies experiment's shard job: every named P policy on the stored sink inputs of a shard.

For every seed, shape, sigma, causal flag and sink kind, the shard stacks the kind's items along
the batch dimension (``keys``: every (sink_v_scale, Δ) of ``ksink`` sink keys at Δ; ``logit``:
every Δ as a learned sink logit, :func:`kernels.sinks.learned_sink`, with no sink key) and then:

* computes the float64 reference once per stack (:func:`kernels.reference.reference_attention`,
  the learned sink logit included). Operand casts do not enter it: it is the truth of the
  unquantized inputs, so a deployed variant's error includes what its FP8 operands cost;
* runs every DISTINCT attention call once (:func:`call_key`): policies whose keywords agree, or
  differ only where the contract makes them irrelevant, share one call and get one row each;
* runs the V-cast floor once per stack and variant (:func:`floor_kwargs`): P unrounded
  (``fmt=None``) with the variant's operand casts. Without a P cast every policy computes the
  same softmax; its order, S, scale mode, τ, sink mode and blocks change only fp32 rounding, so
  the floor is computed once with the paper's P path (measured on the default grid: every
  policy's own ``fmt=None`` call is within 2e-6 relative of it for FP8 operands; for float32
  operands the floor is fp32 rounding alone, about 1e-12 of the output's mean square).

Rows are ``kernels.contract.POLICY_TIDY_COLUMNS``, sorted by ``POLICY_CONFIG_COLUMNS`` then seed;
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

from ..contract import DIAGNOSTICS, POLICY_CONFIG_COLUMNS, POLICY_TIDY_COLUMNS
from .inputs import base_tensors, load_inputs
from .logs import progress
from .policy_config import sink_items
from .runs import _device, _of, _Tally, _write_shard

__all__ = ["run_policies_shard", "call_kwargs", "call_key", "floor_kwargs", "FLOOR_PATH"]

log = logging.getLogger("pcast.pipeline")

NONE = "none"  # how a format that is None (no cast) is written in the tidy table


def call_kwargs(policy: Mapping, casts: Mapping, *, kind: str, ksink: int, causal: bool, backend: str) -> dict:
    """The keywords of :func:`kernels.attention` for one policy, variant and sink kind (no tensors)."""
    return {**policy, **casts, "causal": bool(causal), "ksink": int(ksink) if kind == "keys" else 0,
            "backend": backend}


# The P path of every floor call: the paper's contract at its defaults (docs/interfaces.md).
FLOOR_PATH = {"order": "forward", "scale": 1.0, "scale_mode": "multiply", "rescale_threshold": 0.0,
              "sink_mode": "final", "fmt": None, "rowsum": "unrounded", "block_m": 64, "block_n": 64}


def floor_kwargs(kwargs: Mapping) -> dict:
    """The V-cast floor's call for a policy call ``kwargs``: its operand casts, causal flag, sink
    keys and backend, with P unrounded on the paper's P path (:data:`FLOOR_PATH`)."""
    return {**kwargs, **FLOOR_PATH}


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
    """One stacked batch: the items of a sink kind on one stored base, and its reference."""

    q: object
    k: object
    v: object
    sink_logit: object  # float32 [L·B, H] or None
    items: list  # [(sink_v_scale, Δ)]
    ref: object  # float64, the stacked reference
    ref_sq: object  # mean square of the reference per item
    meta: dict  # the row fields the stack fixes


def _stack(tensors, spec: Mapping, seed: int, shape: Mapping, sigma: float, kind: str, items, device):
    """q, k, v (and the learned sink logits) of ``items`` of one stored base, stacked along batch."""
    import torch

    from ..sinks import apply_sink, learned_sink

    base = base_tensors(tensors, seed, shape["n"], shape["d"], sigma)
    if kind == "keys":
        parts = [apply_sink(*base, ksink=spec["ksink"], delta=dl, sink_v_scale=svs) for svs, dl in items]
        sink = None
    else:
        parts = [base] * len(items)
        sink = torch.cat([learned_sink(dl, batch=spec["batch"], heads=spec["heads"]) for _, dl in items]).to(device)
    q, k, v = (torch.cat([p[j] for p in parts]).to(device) for j in range(3))
    return q, k, v, sink


def _reference(q, k, v, sink, *, causal: bool, budget: int = 1 << 20):
    """float64 reference of a stack, about ``budget`` scores at a time (as the sweeps')."""
    import torch

    from ..reference import reference_attention

    step = max(1, budget // max(q.shape[1] * q.shape[2] * k.shape[2], 1))
    parts = [reference_attention(q[i:i + step], k[i:i + step], v[i:i + step], causal=causal,
                                 sink_logit=None if sink is None else sink[i:i + step])
             for i in range(0, q.shape[0], step)]
    return torch.cat(parts, 0)


def _measure(tally: _Tally, st: _Stack, kwargs: Mapping) -> dict:
    """One attention call on the stack: per-item error against the reference and summed diagnostics."""
    import torch

    from .. import attention

    t0 = time.perf_counter()
    r = attention(st.q, st.k, st.v, sink_logit=st.sink_logit, **kwargs)
    if st.q.device.type == "cuda":
        torch.cuda.synchronize()
    tally.kernel_s += time.perf_counter() - t0
    L = len(st.items)
    tally.runs += L
    tally.backends.add(r.backend)
    err = (r.out.double() - st.ref).reshape(L, -1)
    return {"backend": r.backend, "mse": err.square().mean(1).cpu().tolist(),
            "max_abs_err": err.abs().amax(1).cpu().tolist(),
            **{c: getattr(r, c).reshape(L, -1).sum(1).cpu().tolist() for c in DIAGNOSTICS}}


def _frac(a: int, b: int) -> float:
    return a / b if b else 0.0  # a fraction of zero terms is 0 (docs/interfaces.md)


def _row(st: _Stack, i: int, main: Mapping, floor: Mapping, fields: Mapping) -> dict:
    """One tidy row: item ``i`` of the stack under one policy and variant."""
    r2 = float(st.ref_sq[i])
    uf, tm, ufs, tms, sat = (int(main[c][i]) for c in ("underflow", "terms", "underflow_sink", "terms_sink",
                                                        "saturated"))
    svs, dl = st.items[i]
    return {**st.meta, **fields, "delta": dl, "sink_v_scale": svs, "backend": main["backend"],
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


def _run_stack(tally: _Tally, spec: Mapping, st: _Stack, kind: str, counts: dict) -> None:
    """Every policy and variant on one stack; each distinct call (floors included) once."""
    cache: dict[tuple, dict] = {}
    logit = st.sink_logit is not None

    def measured(kwargs):
        key = call_key(kwargs, logit=logit)
        if key not in cache:
            cache[key] = _measure(tally, st, kwargs)
        return cache[key]

    for (variant, casts), (name, policy) in itertools.product(sorted(spec["variants"].items()),
                                                             sorted(spec["policies"].items())):
        kwargs = call_kwargs(policy, casts, kind=kind, ksink=spec["ksink"], causal=st.meta["causal"],
                             backend=spec["backend"])
        main = measured(kwargs)
        floor = measured(floor_kwargs(kwargs))
        fields = _policy_fields(name, variant, kwargs)
        tally.rows += [_row(st, i, main, floor, fields) for i in range(len(st.items))]
    counts["calls"] += len(cache)


def _policies_seed(tally: _Tally, spec: Mapping, tensors, seed: int, device, counts: dict) -> None:
    """Every shape, sigma, causal flag, sink kind and chunk of items of one seed."""
    chunk = max(1, spec["max_batch_items"])
    for shape, sigma, causal, kind in itertools.product(spec["shapes"], spec["sigma"], spec["causal"],
                                                        spec["sink_kinds"]):
        items = sink_items(spec, kind)
        for c0 in range(0, len(items), chunk):
            part = items[c0:c0 + chunk]
            q, k, v, sink = _stack(tensors, spec, seed, shape, sigma, kind, part, device)
            t0 = time.perf_counter()
            ref = _reference(q, k, v, sink, causal=causal)
            tally.reference_s += time.perf_counter() - t0
            meta = {"experiment": spec["experiment"], "seed": seed, "n": shape["n"], "d": shape["d"],
                    "sink_kind": kind, "ksink": spec["ksink"] if kind == "keys" else 0, "sigma": sigma,
                    "causal": bool(causal)}
            st = _Stack(q, k, v, sink, part, ref, ref.square().reshape(len(part), -1).mean(1).cpu(), meta)
            _run_stack(tally, spec, st, kind, counts)
            del st, q, k, v, ref


def _sort_key(row: Mapping):
    return tuple(row[c] for c in POLICY_CONFIG_COLUMNS) + (row["seed"],)


def run_policies_shard(spec: Mapping, inputs_path: str | os.PathLike, out_csv: str | os.PathLike,
                       timing_csv: str | os.PathLike, *, threads: int = 1, n_shards: int | None = None) -> dict:
    """Run one shard of the policies experiment and write its tidy rows and timing.

    ``spec`` is the shard's :func:`kernels.pipeline.config.shard_spec` (policies resolved to their
    keywords, variants to their operand casts); returns the timing row.
    """
    import torch

    torch.set_num_threads(max(1, int(threads)))
    t_start = time.perf_counter()
    tensors = load_inputs(inputs_path, spec)
    device = _device(spec["backend"])
    tally, counts = _Tally(), {"calls": 0}
    for si, seed in enumerate(spec["seeds"]):
        t_seed = time.perf_counter()
        _policies_seed(tally, spec, tensors, seed, device, counts)
        log.info("policies shard %d: seed %d (%d/%d) done in %.2f s", spec["shard"], seed, si + 1,
                 len(spec["seeds"]), time.perf_counter() - t_seed)
    tally.rows.sort(key=_sort_key)
    wall = time.perf_counter() - t_start
    timing = _write_shard(spec, tally, POLICY_TIDY_COLUMNS, out_csv, timing_csv, wall)
    note = ""
    if "emulator" in tally.backends and spec["backend"] == "auto":
        note = " -- ran on the EMULATOR (backend=auto found no CUDA GPU with FP8 support)"
    elif "triton-interpreted" in tally.backends:
        note = " -- the Triton kernel ran INTERPRETED on the CPU"
    progress(f"[pcast] policies shard {_of(spec['shard'], n_shards)}: seeds {spec['seeds'][0]}-{spec['seeds'][-1]}, "
             f"{len(tally.rows)} rows from {counts['calls']} distinct calls ({tally.runs} runs, V-cast floors "
             f"included) in {wall:.1f} s (reference {tally.reference_s:.1f} s, kernel {tally.kernel_s:.1f} s), "
             f"backend {timing['backend']}{note}")
    return timing
