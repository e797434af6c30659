"""The sweeps' shard job, and what the other shard jobs share (:mod:`pcast.pipeline.policy_runs`,
:mod:`pcast.pipeline.fp4_runs`, :mod:`pcast.pipeline.conformance_runs`).

* :func:`run_sweep_shard` stacks the Δ variants of one stored base along the batch dimension, one
  value tensor per sink_v_scale (:func:`value_stack`), computes the float64 reference once per
  stack and value tensor (:func:`pcast.reference.reference_stack`: the non-sink keys' float64
  partial sums once for the stack) and runs every (order, scale) combination on the same tensors: one
  :func:`pcast.attention_calls` call a stack, so the scores are taken once for every order (their
  non-sink keys once for the stack), P once for all value tensors and exp(s - m) once for all scales;
  one tidy row per (seed x configuration).

It writes its rows (sorted, ``TIDY_COLUMNS``) and a one-row timing table atomically, and prints one
plain progress line that says what actually ran.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from pcast import attention_calls
from pcast.contract import CONFIG_COLUMNS, DIAGNOSTICS, TIDY_COLUMNS, TIMING_COLUMNS, combo_label
from pcast.host.files import atomic_write_text
from pcast.models.sinks import value_stack
from pcast.pipeline.inputs import base_tensors, load_inputs
from pcast.pipeline.logs import progress
from pcast.pipeline.tables import csv_text
from pcast.reference import reference_stack

__all__ = ["run_sweep_shard", "delta_chunks", "value_stack", "backend_note",
           "finish_shard", "Tally"]

log = logging.getLogger("pcast.pipeline")


@dataclass
class Tally:
    """What a shard job has produced and measured so far."""

    rows: list[dict] = field(default_factory=list)
    backends: set[str] = field(default_factory=set)
    reference_s: float = 0.0
    kernel_s: float = 0.0
    runs: int = 0


def _device(backend: str):
    if backend in ("auto", "triton") and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def write_shard(spec: Mapping, tally: Tally, columns, out_csv, timing_csv, wall: float) -> dict:
    """Write the shard's rows and its one-row timing table; return the timing row."""
    atomic_write_text(out_csv, csv_text(columns, tally.rows))
    timing = {"experiment": spec["experiment"], "shard": spec["shard"],
              "seeds": " ".join(map(str, spec["seeds"])), "runs": tally.runs,
              "backend": ",".join(sorted(tally.backends)), "wall_s": round(wall, 3),
              "reference_s": round(tally.reference_s, 3), "kernel_s": round(tally.kernel_s, 3)}
    atomic_write_text(timing_csv, csv_text(TIMING_COLUMNS, [timing]))
    return timing


def shard_of(shard: int, n_shards: int | None) -> str:
    return f"{shard + 1}/{n_shards}" if n_shards else f"{shard + 1}"


# ----------------------------------------------------------------------------- sweeps


def _item_rows(r, ref, ref_sq, items, meta: Mapping) -> list[dict]:
    """Tidy rows of one attention call on a stack of ``len(items)`` (sink_v_scale, Δ) variants."""
    L = len(items)
    err = (r.out.double() - ref).reshape(L, -1)
    mse, mae = err.square().mean(1).cpu(), err.abs().amax(1).cpu()
    rsq = ref_sq.cpu()
    cnt = {c: getattr(r, c).reshape(L, -1).sum(1).cpu().tolist() for c in DIAGNOSTICS}
    rows = []
    for i, (svs, dl) in enumerate(items):
        uf, tm, ufs, tms = cnt["underflow"][i], cnt["terms"][i], cnt["underflow_sink"][i], cnt["terms_sink"][i]
        m, r2 = float(mse[i]), float(rsq[i])
        rows.append({**meta, "delta": dl, "sink_v_scale": svs, "backend": r.backend, "mse": m,
                     "rel_mse": m / r2 if r2 > 0 else math.nan, "max_abs_err": float(mae[i]),
                     "underflow": uf, "terms": tm, "underflow_frac": uf / tm if tm else math.nan,
                     "underflow_sink": ufs, "terms_sink": tms,
                     "underflow_sink_frac": ufs / tms if tms else math.nan, "saturated": cnt["saturated"][i]})
    return rows


def delta_chunks(deltas, n_values: int, max_items: int) -> list[list]:
    """The Δ grid cut into stacks of at most ``max_items`` (sink_v_scale, Δ) items: ``n_values``
    value tensors (one per sink_v_scale) share each Δ's q and k, so a stack holds
    ``max(1, max_items // n_values)`` Δ values."""
    per = max(1, int(max_items) // max(1, n_values))
    deltas = list(deltas)
    return [deltas[i:i + per] for i in range(0, len(deltas), per)]


def _sweep_stack(tally: Tally, spec: Mapping, q, k, values, svs_list, deltas, meta: Mapping, *, causal: bool,
                 ksink: int, block_m: int, block_n: int) -> None:
    """The reference once per value tensor, then every (order, scale) on the same stacked tensors in one
    :func:`pcast.attention_calls` (the emulator takes the scores once for every order and the non-sink
    scores once for the stack, p = exp(s - m) once per order); rows into ``tally``, order by order,
    scale by scale, value tensor by value tensor."""
    t0 = time.perf_counter()
    refs = reference_stack(q, k, values, causal=causal)
    ref_sqs = [ref.square().reshape(len(deltas), -1).mean(1) for ref in refs]
    tally.reference_s += time.perf_counter() - t0
    combos = [(order, float(scale)) for order in spec["order"] for scale in spec["scale"]]
    t0 = time.perf_counter()
    per_combo = attention_calls(q, k, values, [{"order": order, "scale": scale} for order, scale in combos],
                                fmt=spec["fmt"], causal=causal, ksink=ksink, block_m=block_m, block_n=block_n,
                                rowsum=spec["rowsum"], backend=spec["backend"])
    if q.device.type == "cuda":
        torch.cuda.synchronize()
    tally.kernel_s += time.perf_counter() - t0
    tally.runs += len(combos) * len(deltas) * len(values)  # one run per (combination, Δ, value tensor)
    for (order, scale), results in zip(combos, per_combo):
        combo = {"order": order, "scale": scale, "combo": combo_label(order, scale)}
        for svs, r, ref, ref_sq in zip(svs_list, results, refs, ref_sqs):
            tally.backends.add(r.backend)
            tally.rows += _item_rows(r, ref, ref_sq, [(svs, dl) for dl in deltas], {**meta, **combo})
    del per_combo


def _sweep_seed(tally: Tally, spec: Mapping, tensors: Mapping, seed: int, device) -> None:
    """Every shape, sigma, causal flag, ksink and stack of Δ (all sink_v_scale sharing it) of one seed."""
    svs_list = list(spec["sink_v_scale"])
    chunks = delta_chunks(spec["delta"], len(svs_list), spec["max_batch_items"])
    groups = itertools.product(spec["shapes"], spec["sigma"], spec["causal"], spec["ksink"], chunks)
    for shape, sigma, causal, ksink, deltas in groups:
        base = base_tensors(tensors, seed, shape["n"], shape["d"], sigma)
        q, k, values = value_stack(base, ksink, deltas, svs_list, device)
        meta = {"experiment": spec["experiment"], "seed": seed, "n": shape["n"], "d": shape["d"],
                "block_m": shape["block_m"], "block_n": shape["block_n"], "causal": bool(causal),
                "ksink": ksink, "sigma": sigma, "fmt": spec["fmt"], "rowsum": spec["rowsum"]}
        _sweep_stack(tally, spec, q, k, values, svs_list, deltas, meta, causal=causal, ksink=ksink,
                     block_m=shape["block_m"], block_n=shape["block_n"])
        del q, k, values


def run_seeds(spec: Mapping, inputs_path, threads: int, per_seed) -> tuple[Tally, float]:
    """Load a shard's inputs and call ``per_seed(tally, spec, tensors, seed, device)`` for each of its
    seeds on ``threads`` torch threads, logging each seed's time; returns the tally and the start time."""
    torch.set_num_threads(max(1, int(threads)))
    t_start = time.perf_counter()
    tensors = load_inputs(inputs_path, spec)
    device = _device(spec["backend"])
    tally = Tally()
    for si, seed in enumerate(spec["seeds"]):
        t_seed = time.perf_counter()
        per_seed(tally, spec, tensors, seed, device)
        log.info("%s shard %d: seed %d (%d/%d) done in %.2f s", spec["experiment"], spec["shard"], seed, si + 1,
                 len(spec["seeds"]), time.perf_counter() - t_seed)
    return tally, t_start


def finish_shard(spec: Mapping, tally: Tally, t_start: float, columns, sort_key, out_csv, timing_csv,
                 n_shards: int | None, what: str) -> dict:
    """Sort and write a sweep-like shard's rows and timing, print its progress line (``what`` it
    produced), and return the timing row."""
    tally.rows.sort(key=sort_key)
    wall = time.perf_counter() - t_start
    timing = write_shard(spec, tally, columns, out_csv, timing_csv, wall)
    progress(f"[pcast] {spec['experiment']} shard {shard_of(spec['shard'], n_shards)}: seeds "
             f"{spec['seeds'][0]}-{spec['seeds'][-1]}, {what} in {wall:.1f} s "
             f"(reference {tally.reference_s:.1f} s, kernel {tally.kernel_s:.1f} s), "
             f"backend {timing['backend']}{backend_note(tally, spec)}")
    return timing


def backend_note(tally: Tally, spec: Mapping) -> str:
    """What a shard's progress line adds when it did not run the compiled kernel."""
    if "emulator" in tally.backends and spec["backend"] == "auto":
        return " -- ran on the EMULATOR (backend=auto found no CUDA GPU with FP8 support)"
    if "triton-interpreted" in tally.backends:
        return " -- the Triton kernel ran INTERPRETED on the CPU"
    return ""


def _tidy_sort_key(row: Mapping[str, Any]):
    return tuple(row[c] for c in CONFIG_COLUMNS) + (row["seed"],)


def run_sweep_shard(spec: Mapping, inputs_path: str | os.PathLike, out_csv: str | os.PathLike,
                    timing_csv: str | os.PathLike, *, threads: int = 1, n_shards: int | None = None) -> dict:
    """Run one shard of a sweep experiment and write its tidy rows and timing.

    For every seed, shape, sigma, causal flag and ksink, the Δ variants of the stored base are
    stacked along the batch dimension, with one value tensor per sink_v_scale (at most
    ``max_batch_items`` (sink_v_scale, Δ) items a stack, :func:`delta_chunks`); the float64
    reference is computed once per stack and value tensor, and every (order, scale) combination
    runs on the same tensors (one :func:`pcast.attention_scales` call per order, all scales and
    value tensors), so the combinations are paired by seed. The timing's ``runs`` counts one run per
    (order, scale, Δ, value tensor) and ``kernel_s`` the attention calls. ``spec`` is the shard's
    :func:`pcast.pipeline.config.shard_spec`; returns the timing row.
    """
    tally, t_start = run_seeds(spec, inputs_path, threads, _sweep_seed)
    return finish_shard(spec, tally, t_start, TIDY_COLUMNS, _tidy_sort_key, out_csv, timing_csv, n_shards,
                        f"{tally.runs} runs")
