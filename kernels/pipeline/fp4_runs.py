"""The fp4 experiment's shard job: every P cast (NVFP4, MXFP4, an FP8 baseline) in both orders on the
stored sink inputs of a shard.

For every seed, shape, sigma and causal flag, the shard stacks the Δ values along the batch dimension
(:func:`pcast.pipeline.runs.value_stack`: ``ksink`` sink keys at each Δ, one value tensor per
sink_v_scale sharing q and k), computes the float64 reference once per stack and value tensor
(:func:`pcast.reference.reference_stack`) and runs every (cast, order) on the same tensors through
:func:`pcast.attention_calls`, so every comparison is paired by seed.

Every call of a stack goes to one :func:`pcast.attention_calls` (the static first-level scales of one
format share steps 1-2 there).

Rows are ``pcast.contract.FP4_TIDY_COLUMNS``, sorted by ``FP4_CONFIG_COLUMNS`` then seed:
``underflow_elem = underflow − underflow_scale`` (lost on the element grid, their group's scale > 0),
``groups = rows · groups_per_row`` (:func:`pcast.pipeline.fp4_config.groups_per_row`, 0 for FP8) and
the fractions ``x_frac = x / terms`` (``groups_flushed_frac = groups_flushed / groups``,
``saturated_frac = saturated / (terms + terms_sink)``; a fraction of nothing is 0). Same spec and
inputs give the same bytes.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from collections.abc import Mapping

import torch

from pcast import attention_calls
from pcast.contract import DIAGNOSTICS, FP4_CONFIG_COLUMNS, FP4_TIDY_COLUMNS
from pcast.pipeline.fp4_config import groups_per_row
from pcast.pipeline.inputs import base_tensors
from pcast.pipeline.runs import run_seeds, Tally, delta_chunks, finish_shard, value_stack
from pcast.reference import reference_stack

__all__ = ["run_fp4_shard"]


def _frac(a: int, b: int) -> float:
    return a / b if b else 0.0


def _measure(tally: Tally, q, k, values, refs, calls: list[dict], common: dict) -> list:
    """Every call on one stack, in one attention_calls; per call and value tensor, the per-item squared
    error mean, max abs error and summed diagnostics."""
    L = q.shape[0] // common["batch"]
    out: list = [None] * len(calls)
    kw = {k: v for k, v in common.items() if k != "batch"}
    t0 = time.perf_counter()
    per_call = attention_calls(q, k, values, calls, **kw)
    if q.device.type == "cuda":
        torch.cuda.synchronize()
    tally.kernel_s += time.perf_counter() - t0
    for i, results in enumerate(per_call):
        out[i] = []
        for r, ref in zip(results, refs):
            tally.backends.add(r.backend)
            err = (r.out.double() - ref).reshape(L, -1)
            out[i].append({"backend": r.backend, "mse": err.square().mean(1).cpu().tolist(),
                           "max_abs_err": err.abs().amax(1).cpu().tolist(),
                           **{c: getattr(r, c).reshape(L, -1).sum(1).cpu().tolist() for c in DIAGNOSTICS}})
    tally.runs += L * len(values) * len(calls)
    return out


def _row(m: Mapping, i: int, r2: float, groups: int, fields: Mapping) -> dict:
    """One tidy row: item ``i`` of one call's measurement ``m`` on one value tensor."""
    uf, us, tm, sat, gf = (int(m[c][i]) for c in ("underflow", "underflow_scale", "terms", "saturated",
                                                   "groups_flushed"))
    ufs, tms = int(m["underflow_sink"][i]), int(m["terms_sink"][i])
    mse = m["mse"][i]
    return {**fields, "backend": m["backend"], "mse": mse, "rel_mse": mse / r2 if r2 > 0 else math.nan,
            "max_abs_err": m["max_abs_err"][i], "underflow": uf, "underflow_scale": us, "underflow_elem": uf - us,
            "terms": tm, "underflow_frac": _frac(uf, tm), "underflow_scale_frac": _frac(us, tm),
            "underflow_elem_frac": _frac(uf - us, tm), "underflow_sink": ufs, "terms_sink": tms,
            "groups_flushed": gf, "groups": groups, "groups_flushed_frac": _frac(gf, groups), "saturated": sat,
            "saturated_frac": _frac(sat, tm + tms)}


def _stack_rows(tally: Tally, spec: Mapping, base, meta: dict, deltas: list, device) -> None:
    """One Δ stack of one stored base: the reference, every (cast, order), the rows."""
    shape_n, block_n = meta["n"], meta["block_n"]
    svs_list = list(spec["sink_v_scale"])
    q, k, values = value_stack(base, spec["ksink"], deltas, svs_list, device)
    t0 = time.perf_counter()
    refs = reference_stack(q, k, values, causal=meta["causal"])
    ref_sqs = [ref.square().reshape(len(deltas), -1).mean(1).cpu().tolist() for ref in refs]
    tally.reference_s += time.perf_counter() - t0
    combos = [(c, order) for c in spec["casts"] for order in spec["order"]]
    calls = [{"fmt": c["fmt"], "scale": c["scale"], "scale_mode": c["scale_mode"], "order": order}
             for c, order in combos]
    common = {"causal": meta["causal"], "ksink": spec["ksink"], "block_m": meta["block_m"], "block_n": block_n,
              "backend": spec["backend"], "batch": spec["batch"]}
    measured = _measure(tally, q, k, values, refs, calls, common)
    rows_per_item = spec["batch"] * spec["heads"] * shape_n
    for (c, order), per_value in zip(combos, measured):
        groups = rows_per_item * groups_per_row(c["fmt"], shape_n, block_n)
        for j, m in enumerate(per_value):
            for i, dl in enumerate(deltas):
                fields = {**meta, "sink_v_scale": svs_list[j], "fmt": c["fmt"], "scale_mode": c["scale_mode"],
                          "scale": c["scale"], "order": order, "delta": dl, "cast": c["cast"]}
                tally.rows.append(_row(m, i, ref_sqs[j][i], groups, fields))


def _fp4_seed(tally: Tally, spec: Mapping, tensors: Mapping, seed: int, device) -> None:
    """Every shape, sigma, causal flag and Δ stack of one seed."""
    chunks = delta_chunks(spec["delta"], len(spec["sink_v_scale"]), spec["max_batch_items"])
    for shape, sigma, causal, deltas in itertools.product(spec["shapes"], spec["sigma"], spec["causal"], chunks):
        base = base_tensors(tensors, seed, shape["n"], shape["d"], sigma)
        meta = {"experiment": spec["experiment"], "seed": seed, "n": shape["n"], "d": shape["d"],
                "block_m": shape["block_m"], "block_n": shape["block_n"], "causal": bool(causal),
                "ksink": spec["ksink"], "sigma": sigma}
        _stack_rows(tally, spec, base, meta, list(deltas), device)


def _sort_key(row: Mapping):
    return tuple(row[c] for c in FP4_CONFIG_COLUMNS) + (row["seed"],)


def run_fp4_shard(spec: Mapping, inputs_path: str | os.PathLike, out_csv: str | os.PathLike,
                  timing_csv: str | os.PathLike, *, threads: int = 1, n_shards: int | None = None) -> dict:
    """Run one shard of the fp4 experiment and write its tidy rows and timing (``spec``: the shard's
    :func:`pcast.pipeline.config.shard_spec`); returns the timing row."""
    tally, t_start = run_seeds(spec, inputs_path, threads, _fp4_seed)
    return finish_shard(spec, tally, t_start, FP4_TIDY_COLUMNS, _sort_key, out_csv, timing_csv, n_shards,
                        f"{tally.runs} runs ({len(spec['casts'])} P casts x {len(spec['order'])} orders)")
