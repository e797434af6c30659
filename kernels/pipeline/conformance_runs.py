"""The conformance shard job: the Triton kernel against the emulator, and the multi-call engine against
single calls, on one shard's stored inputs.

Three kinds of rows (``check``, docs/interfaces.md "Pipeline data"):

* ``kernel``, the grid: :func:`pcast.conformance.compare` (the Triton kernel, interpreted on a CPU, against
  the emulator, every difference explained) on every shape, causal flag and (order, scale) of the
  conformance section, at its one Δ and sink value norm;
* ``kernel``, the covering cases: the same comparison for the cases of
  :func:`pcast.pipeline.conformance_cases.covering_subset` (every option value the experiments use meets
  the kernel once), at the small ``cover`` shape with each call's own blocks, the engine's Δ and sink value
  norms taken in turn;
* ``engine``: every case of :func:`pcast.pipeline.conformance_cases.experiment_cases` at the ``engine``
  shape (the sweeps' N), its group of calls in one :func:`pcast.attention_calls` on a Δ stack (every
  Δ x sink value norm of ``engine``, as the shards stack them), each result against a single call on that
  item alone (:func:`engine_rows`), on the emulator; equal means bit for bit (the outputs, every diagnostic
  and the log-sum-exp), as the contract states.

The covering cases and the engine rows run on the seeds below ``engine.seeds``. Rows are sorted by
``CONFORMANCE_KEY`` and written atomically with a one-row timing table.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Mapping
import dataclasses

import torch

from pcast import attention_calls, attention_values
from pcast.conformance import compare
from pcast.contract import CONFORMANCE_COLUMNS, CONFORMANCE_KEY, DIAGNOSTICS, combo_label
from pcast.models.sinks import apply_sink, learned_sink
from pcast.pipeline.conformance_cases import case_columns
from pcast.pipeline.inputs import base_tensors, load_inputs
from pcast.pipeline.logs import progress
from pcast.pipeline.runs import shard_of, Tally, write_shard, value_stack

__all__ = ["run_conformance_shard", "engine_rows"]

log = logging.getLogger("pcast.pipeline")

_GRID_OPTIONS = {"scale_mode": "multiply", "rescale_threshold": 0.0, "sink_kind": "keys", "sink_mode": "final",
                 "qk_fmt": "none", "v_fmt": "none"}


def _kernel_row(rep: Mapping, fields: Mapping) -> dict:
    return {**fields, "check": "kernel", "kernel_backend": rep["kernel_backend"],
            "max_abs_diff": float(rep["max_abs_diff"]), "max_rel_diff": float(rep["max_rel_diff"]),
            "diag_equal": bool(rep["diag_equal"]), "mismatched_rows": int(rep["mismatched_rows"]),
            "explained": bool(rep["explained"]), "fragile_elements": int(rep["fragile_elements"])}


def _log_row(row: Mapping, why: str) -> None:
    level = logging.INFO if row["explained"] else logging.WARNING
    log.log(level, "%s %s seed %d n=%d d=%d causal=%s delta=%g v=%g: diag_equal=%s explained=%s (%s)", row["check"],
            row["case"], row["seed"], row["n"], row["d"], row["causal"], row["delta"], row["sink_v_scale"],
            row["diag_equal"], row["explained"], why)


def _grid_rows(tally: Tally, spec: Mapping, tensors: Mapping, seed: int) -> None:
    """The kernel grid of one seed: every shape, causal flag and (order, scale) at the section's Δ."""
    for shape in spec["shapes"]:
        base = base_tensors(tensors, seed, shape["n"], shape["d"], spec["sigma"])
        q, k, v = apply_sink(*base, ksink=spec["ksink"], delta=spec["delta"], sink_v_scale=spec["sink_v_scale"])
        for causal, order, scale in itertools.product(spec["causal"], spec["order"], spec["scale"]):
            rep = compare(q, k, v, order=order, scale=scale, fmt=spec["fmt"], causal=causal, ksink=spec["ksink"],
                          block_m=shape["block_m"], block_n=shape["block_n"], rowsum=spec["rowsum"], tol=spec["tol"])
            fields = {**_GRID_OPTIONS, "case": combo_label(order, scale), "order": order, "scale": float(scale),
                      "causal": bool(causal), "n": shape["n"], "d": shape["d"], "delta": float(spec["delta"]),
                      "sink_v_scale": float(spec["sink_v_scale"]), "seed": seed, "fmt": spec["fmt"], "ksink": spec["ksink"],
                      "rowsum": spec["rowsum"], "block_m": shape["block_m"], "block_n": shape["block_n"]}
            row = _kernel_row(rep, fields)
            _log_row(row, rep.get("why", ""))
            tally.rows.append(row)
            tally.backends.add(row["kernel_backend"])


def _stack(base, case_kind: str, ksink: int, deltas, svs_list):
    """q, k, the value tensors and the learned sink logits (or None) of one Δ stack of a sink kind."""
    if case_kind == "keys":
        q, k, values = value_stack(base, ksink, deltas, svs_list, torch.device("cpu"))
        return q, k, values, list(svs_list), None
    q, k, values = value_stack(base, 0, deltas, [0.0], torch.device("cpu"))
    batch, heads = base[0].shape[0], base[0].shape[1]
    sink = torch.cat([learned_sink(dl, batch=batch, heads=heads) for dl in deltas])
    return q, k, values, [0.0], sink


def _cover_rows(tally: Tally, spec: Mapping, tensors: Mapping, seed: int) -> None:
    """The covering cases on the Triton kernel at the small cover shape, Δ and sink value norm in turn."""
    eng, shape = spec["engine"], spec["cover"]["shape"]
    base = base_tensors(tensors, seed, shape["n"], shape["d"], spec["sigma"])
    for j, idx in enumerate(spec["cover"]["cases"]):
        case = spec["cases"][idx]
        dl = eng["delta"][j % len(eng["delta"])]
        svs = eng["sink_v_scale"][j % len(eng["sink_v_scale"])] if case["kind"] == "keys" else 0.0
        q, k, values, _, sink = _stack(base, case["kind"], spec["ksink"], [dl], [svs])
        call = case["call"]
        rep = compare(q, k, values[0], tol=spec["tol"], sink_logit=sink, **call)
        fields = {**case_columns(case), "causal": bool(call["causal"]), "n": shape["n"], "d": shape["d"],
                  "delta": float(dl), "sink_v_scale": float(svs), "seed": seed}
        row = _kernel_row(rep, fields)
        _log_row(row, rep.get("why", ""))
        tally.rows.append(row)
        tally.backends.add(row["kernel_backend"])


def _equal_row(a, b) -> tuple[float, bool, int]:
    """(max ``|Δout|``, every diagnostic identical, rows with any difference) of two results, bit for bit:
    a NaN counts as a difference unless both sides hold it at the same place."""
    oa, ob = a.out.double(), b.out.double()
    same = (oa == ob) | (torch.isnan(oa) & torch.isnan(ob))
    diff = (oa - ob).abs().nan_to_num(nan=float("inf"))
    rows = ~same.all(-1)
    diag = True
    for name in DIAGNOSTICS:
        da, db = getattr(a, name), getattr(b, name)
        if da is None or db is None:
            diag &= da is None and db is None
            continue
        d = da != db
        diag &= not bool(d.any())
        rows |= d
    la, lb = getattr(a, "lse", None), getattr(b, "lse", None)
    if (la is None) != (lb is None):
        rows |= True
    elif la is not None:
        rows |= ~((la == lb) | (torch.isnan(la) & torch.isnan(lb)))
    return float(diff.max()) if diff.numel() else 0.0, diag, int(rows.sum())


def _item(res, sl):
    """The batch items ``sl`` of a result: its tensors sliced, the rest as it is."""
    return dataclasses.replace(res, **{f.name: getattr(res, f.name)[sl] for f in dataclasses.fields(res)
                                      if f.name in ("out", "lse", *DIAGNOSTICS) and getattr(res, f.name) is not None})


def engine_rows(q, k, values, svs_list, sink, deltas, cases: list[Mapping], fields: Mapping) -> list[dict]:
    """One :func:`pcast.attention_calls` of ``cases``' calls on the stack, on the emulator, and every result
    (call, value tensor, item) against a single call on that item alone (:func:`pcast.attention_values`:
    the core emulator's one pass, steps 1-4 once for the item's value tensors, each result the bits of
    :func:`pcast.attention` on that value tensor); one row each."""
    calls = [dict(c["call"]) for c in cases]
    per_call = attention_calls(q, k, values, calls, sink_logit=sink, backend="emulator")
    L = len(deltas)
    B = q.shape[0] // L
    rows = []
    for case, call, results in zip(cases, calls, per_call):
        singles = []
        for i in range(L):
            sl = slice(i * B, (i + 1) * B)
            singles.append(attention_values(q[sl], k[sl], [v[sl] for v in values], backend="emulator",
                                            sink_logit=None if sink is None else sink[sl], **call))
        for j, (svs, res) in enumerate(zip(svs_list, results)):
            for i, dl in enumerate(deltas):
                sl = slice(i * B, (i + 1) * B)
                one = singles[i][j]
                dmax, diag, bad = _equal_row(_item(res, sl), one)
                scale_out = max(float(one.out.abs().max()), 1e-30)
                rows.append({**fields, **case_columns(case), "check": "engine", "causal": bool(call["causal"]),
                             "delta": float(dl), "sink_v_scale": float(svs), "kernel_backend": res.backend,
                             "max_abs_diff": dmax, "max_rel_diff": dmax / scale_out, "diag_equal": diag,
                             "mismatched_rows": bad, "explained": bad == 0 and dmax == 0.0, "fragile_elements": 0})
    return rows


def _engine_seed(tally: Tally, spec: Mapping, tensors: Mapping, seed: int) -> None:
    """Every group of cases, one Δ stack each, at the engine shape."""
    eng = spec["engine"]
    shape = eng["shape"]
    base = base_tensors(tensors, seed, shape["n"], shape["d"], spec["sigma"])
    groups: dict[str, list] = {}
    for case in spec["cases"]:
        groups.setdefault(case["group"], []).append(case)
    for group, cases in groups.items():
        q, k, values, svs_list, sink = _stack(base, cases[0]["kind"], spec["ksink"], eng["delta"], eng["sink_v_scale"])
        t0 = time.perf_counter()
        rows = engine_rows(q, k, values, svs_list, sink, eng["delta"], cases,
                           {"n": shape["n"], "d": shape["d"], "seed": seed})
        bad = sum(not r["explained"] for r in rows)
        log.log(logging.WARNING if bad else logging.INFO, "engine %s seed %d: %d rows, %d differ (%.1f s)", group,
                seed, len(rows), bad, time.perf_counter() - t0)
        tally.rows += rows
        tally.backends.add("emulator")


def run_conformance_shard(spec: Mapping, inputs_path: str | os.PathLike, out_csv: str | os.PathLike,
                          timing_csv: str | os.PathLike, *, threads: int = 1, n_shards: int | None = None) -> dict:
    """The kernel grid on every seed of the shard; the covering cases and the engine rows on its seeds below
    ``engine.seeds``. One row per ``CONFORMANCE_KEY``; returns the timing row."""
    torch.set_num_threads(max(1, int(threads)))
    t_start = time.perf_counter()
    tensors = load_inputs(inputs_path, spec)
    tally = Tally()
    for seed in spec["seeds"]:
        _grid_rows(tally, spec, tensors, seed)
        if spec.get("engine") and seed < spec["engine"]["seeds"]:
            _cover_rows(tally, spec, tensors, seed)
            _engine_seed(tally, spec, tensors, seed)
    tally.rows.sort(key=lambda r: tuple(r[c] for c in CONFORMANCE_KEY))
    tally.runs = len(tally.rows)
    wall = time.perf_counter() - t_start
    tally.kernel_s = wall
    timing = write_shard(spec, tally, CONFORMANCE_COLUMNS, out_csv, timing_csv, wall)
    note = " -- the Triton kernel ran INTERPRETED on the CPU" if "triton-interpreted" in tally.backends else ""
    bad = sum(not r["explained"] for r in tally.rows)
    engine = sum(r["check"] == "engine" for r in tally.rows)
    progress(f"[pcast] conformance shard {shard_of(spec['shard'], n_shards)}: {len(tally.rows) - engine} kernel and "
             f"{engine} engine comparisons in {wall:.1f} s, {bad} unexplained, kernel backend "
             f"{timing['backend']}{note}")
    return timing
