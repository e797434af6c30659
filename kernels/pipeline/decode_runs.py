"""The decode experiment's shard job: decode rows under split-KV and partition-normalised P.

For every seed the shard takes the last query row of each of the stored base's ``heads`` heads (Nq = 1)
against all ``n`` keys, stacks the Δ values along the batch dimension and, for each sink kind, runs every
configuration of :func:`pcast.pipeline.decode_config.calls` on the same tensors in one
:func:`pcast.attention_calls`:

* ``keys``: ``ksink`` sink keys at Δ (:func:`pcast.pipeline.runs.value_stack`);
* ``logit``: no sink key; a learned sink logit Δ per row with ``sink_mode="init"``.

The decode presets of ``policies`` run in the same call, each with its own keywords (a preset's sink mode
replaces ``init`` for the logit kind); their rows carry the preset's name in ``policy`` (``-`` otherwise).

The float64 reference (with the sink logit where there is one) gives each row's MSE. One tidy row per
(seed, head, configuration, Δ); the diagnostics are the row's own.

The P-cast error rows (``kind = partition``): ``rows`` query rows per seed whose scores over one partition
of ``n`` keys are drawn iid N(0, sigma²) (``torch.Generator().manual_seed(seed)``) and set exactly (in
k's first coordinate, q one-hot, ``sm_scale = 1``; value tensors that map each key to one output coordinate:
:func:`_partition_tensors`), so ``out·S`` is
the cast P of the partition-normalised call and the same call with ``fmt=None`` gives the uncast P. One row
per (seed, n, S), with ``ksink = 0`` and ``delta = 0`` (no sink): ``p_err2 = Σ (P_q − P)²·S²``, ``p_x2 = Σ (P·S)²`` and ``p_rel_rms = sqrt(p_err2 / p_x2)``.

Rows are ``pcast.contract.DECODE_TIDY_COLUMNS``, sorted by ``DECODE_CONFIG_COLUMNS``, seed and head.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping

import torch

from pcast import attention_calls
from pcast.contract import DECODE_CONFIG_COLUMNS, DECODE_TIDY_COLUMNS
from pcast.pipeline.inputs import base_tensors
from pcast.pipeline.runs import run_seeds, Tally, delta_chunks, finish_shard, value_stack
from pcast.reference import reference_attention

__all__ = ["run_decode_shard"]

_NO_SINK_MODE = "-"


def _stack(kind: str, base, spec: Mapping, deltas: list, device):
    """q, k, v of one Δ stack of one sink kind, the reference, and the keywords the kind adds."""
    q1, k0, v0 = base
    q1 = q1[..., -1:, :].contiguous()
    if kind == "keys":
        q, k, (v,) = value_stack((q1, k0, v0), spec["ksink"], deltas, [1.0], device)
        extra, sink = {"ksink": spec["ksink"]}, None
    else:
        L = len(deltas)
        q, k, v = (t.expand(L, *t.shape[1:]).contiguous().to(device) for t in (q1, k0, v0))
        sink = torch.tensor(deltas, dtype=torch.float32, device=device)[:, None].expand(L, q.shape[1]).contiguous()
        extra = {"ksink": 0, "sink_logit": sink, "sink_mode": "init"}
    ref = reference_attention(q, k, v, sink_logit=sink)
    return q, k, v, ref, extra


def _policy_fields(p: Mapping, kind: str) -> dict:
    """The configuration columns of a decode preset's rows (its own block size, P format and, with a sink logit,
    sink mode)."""
    kw = p["kwargs"]
    out = {"policy": p["policy"], "num_splits": int(kw.get("num_splits", 1)),
           "split_layout": kw.get("split_layout", "contiguous"), "order": kw["order"],
           "p_normalize": kw.get("p_normalize", "online"), "scale": float(kw["scale"]), "block_n": int(kw["block_n"]),
           "fmt": kw["fmt"] if kw["fmt"] is not None else "none"}
    if kind == "logit":
        out["sink_mode"] = kw["sink_mode"]
    return out


def kind_rows(tally: Tally, spec: Mapping, kind: str, base, deltas: list, meta: Mapping, device) -> None:
    """Every configuration on one Δ stack of one sink kind; one row per (configuration, Δ, head)."""
    t0 = time.perf_counter()
    q, k, v, ref, extra = _stack(kind, base, spec, deltas, device)
    ref = ref.double()
    ref_sq = ref.square().mean(-1)[..., 0].cpu()  # [L, H]
    tally.reference_s += time.perf_counter() - t0
    pcalls = spec.get("policy_calls", [])
    t0 = time.perf_counter()
    results = attention_calls(q, k, [v], list(spec["calls"]) + [p["kwargs"] for p in pcalls], fmt=spec["fmt"],
                              block_n=spec["block_n"], backend=spec["backend"], **extra)
    tally.kernel_s += time.perf_counter() - t0
    heads = q.shape[1]
    tally.runs += len(results) * len(deltas) * heads
    labels = [{**c, "policy": "-"} for c in spec["calls"]] + [_policy_fields(p, kind) for p in pcalls]
    for call, (r,) in zip(labels, results):
        tally.backends.add(r.backend)
        mse = (r.out.double() - ref).square().mean(-1)[..., 0].cpu()
        cnt = {c: getattr(r, c)[..., 0].cpu().tolist() for c in ("underflow", "terms", "underflow_sink",
                                                                 "terms_sink", "saturated")}
        for i, dl in enumerate(deltas):
            for h in range(heads):
                m, r2 = float(mse[i, h]), float(ref_sq[i, h])
                uf, tm = int(cnt["underflow"][i][h]), int(cnt["terms"][i][h])
                tally.rows.append({**meta, **call, "head": h, "kind": kind, "delta": dl, "ksink": extra["ksink"],
                                   "sink_mode": call.get("sink_mode", extra.get("sink_mode", _NO_SINK_MODE)),
                                   "backend": r.backend, "mse": m, "rel_mse": m / r2 if r2 > 0 else math.nan,
                                   "underflow": uf, "terms": tm, "underflow_frac": uf / tm if tm else math.nan,
                                   "underflow_sink": int(cnt["underflow_sink"][i][h]),
                                   "terms_sink": int(cnt["terms_sink"][i][h]),
                                   "saturated": int(cnt["saturated"][i][h]), "p_rows": 0, "p_err2": math.nan,
                                   "p_x2": math.nan, "p_rel_rms": math.nan})


def _partition_tensors(scores, device):
    """q, k and the value tensors whose outputs are the rows' P (module docstring): q one-hot, the scores in k's
    first coordinate, and ``n / d`` value tensors that each map one range of ``d = min(n, 256)`` keys to the
    identity."""
    rows, n = scores.shape
    d = min(n, 256)
    q = torch.zeros(1, rows, 1, d)
    q[..., 0] = 1.0
    k = torch.zeros(1, rows, n, d)
    k[0, :, :, 0] = scores
    values = []
    for c in range(n // d):
        v = torch.zeros(n, d)
        v[c * d:(c + 1) * d] = torch.eye(d)
        values.append(v.expand(1, rows, n, d).contiguous().to(device))
    return q.to(device), k.to(device), values


def partition_rows(tally: Tally, spec: Mapping, seed: int, meta: Mapping, device) -> None:
    """The P-cast error rows of one seed (module docstring)."""
    part, sigma = spec["partition"], float(spec["sigma"][0])
    for n in sorted({c["n"] for c in part["cases"]}):
        scales = [c["scale"] for c in part["cases"] if c["n"] == n]
        scores = torch.randn(part["rows"], n, generator=torch.Generator().manual_seed(seed)) * sigma
        q, k, values = _partition_tensors(scores, device)
        calls = [{"scale": s, "fmt": f} for s in scales for f in (spec["fmt"], None)]
        t0 = time.perf_counter()
        res = attention_calls(q, k, values, calls, p_normalize="partition", block_n=min(n, 256), ksink=0,
                              sm_scale=1.0, backend=spec["backend"])
        tally.kernel_s += time.perf_counter() - t0
        tally.runs += len(calls) * part["rows"]
        for j, s in enumerate(scales):
            rq, rx = res[2 * j], res[2 * j + 1]
            tally.backends.add(rq[0].backend)
            pq = torch.cat([r.out.double() for r in rq], -1) * s
            x = torch.cat([r.out.double() for r in rx], -1) * s
            err2, x2 = float((pq - x).square().sum()), float(x.square().sum())
            uf, tm = int(rq[0].underflow.sum()), int(rq[0].terms.sum())
            tally.rows.append({**meta, "head": 0, "kind": "partition", "policy": "-", "n": n, "d": min(n, 256),
                               "block_n": min(n, 256), "ksink": 0, "num_splits": 1, "split_layout": "contiguous",
                               "order": "forward", "p_normalize": "partition", "scale": s,
                               "sink_mode": _NO_SINK_MODE, "delta": 0.0, "backend": rq[0].backend, "mse": math.nan,
                               "rel_mse": math.nan, "underflow": uf, "terms": tm, "underflow_frac": uf / tm,
                               "underflow_sink": 0, "terms_sink": 0, "saturated": int(rq[0].saturated.sum()),
                               "p_rows": part["rows"], "p_err2": err2, "p_x2": x2, "p_rel_rms": math.sqrt(err2 / x2)})


def _decode_seed(tally: Tally, spec: Mapping, tensors: Mapping, seed: int, device) -> None:
    shape, sigma = spec["shapes"][0], spec["sigma"][0]
    base = base_tensors(tensors, seed, shape["n"], shape["d"], sigma)
    meta = {"experiment": spec["experiment"], "seed": seed, "n": shape["n"], "d": shape["d"],
            "block_n": spec["block_n"], "sigma": sigma, "fmt": spec["fmt"]}
    for kind in spec["sink_kinds"]:
        for deltas in delta_chunks(spec["delta"], 1, spec["max_batch_items"]):
            kind_rows(tally, spec, kind, base, list(deltas), meta, device)
    if spec["partition"]:
        partition_rows(tally, spec, seed, meta, device)


def _sort_key(row: Mapping):
    return tuple(row[c] for c in DECODE_CONFIG_COLUMNS) + (row["seed"], row["head"])


def run_decode_shard(spec: Mapping, inputs_path: str | os.PathLike, out_csv: str | os.PathLike,
                     timing_csv: str | os.PathLike, *, threads: int = 1, n_shards: int | None = None) -> dict:
    """Run one shard of the decode experiment and write its tidy rows and timing; returns the timing row."""
    tally, t_start = run_seeds(spec, inputs_path, threads, _decode_seed)
    return finish_shard(spec, tally, t_start, DECODE_TIDY_COLUMNS, _sort_key, out_csv, timing_csv, n_shards,
                        f"{tally.runs} runs ({len(spec['calls'])} configurations x {len(spec['sink_kinds'])} sink "
                        "kinds)")
