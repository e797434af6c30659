"""Table T10: each deployed kernel of :mod:`pcast.deployed` fingerprinted, and measured on a real model's heads.

Per adapter (one row): its release, file and function; the policy its fingerprint names among every preset on
:func:`pcast.probes.small_probes` (laid out at the captured heads' d, float32, H = 2 over H_kv = 1) and the
probe rows outside its preset; then the kernel's output on one layer of the captured heads (the first
``heads`` heads of passage 0, the first ``rows`` query rows against all keys) against its preset's output
through the emulator (the prediction): the rows outside the probes' tolerance, and both relative MSEs against
the float64 reference. A row is PASS when the fingerprint names the preset and no real-head row lies outside;
INCONCLUSIVE, with the fetch command as its reason, when the wheels are not in the cache.

The interpreter runs every kernel program in Python: the cost grows with the probes' keys and the heads'
rows, which ``heads`` and ``rows`` bound (:func:`pcast.pipeline.plan.deployed_row` is the plan's estimate).
"""

from __future__ import annotations

import time

import torch

import pcast

from pcast.deployed import ADAPTERS, FETCH_COMMAND, WHEELS, load, missing

from pcast.policies import POLICIES

from pcast.probes import fingerprint, row_mismatches, small_probes

__all__ = ["T10_COLUMNS", "t10_rows"]

T10_COLUMNS = ("kernel", "release", "file", "function", "preset", "fingerprint", "probe_rows_outside", "probe_rows",
               "heads", "real_rows_outside", "real_rows", "rel_mse_measured", "rel_mse_predicted",
               "status", "reason")


def _rel_mse(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    return float(((out.double() - ref) ** 2).mean() / (ref ** 2).mean())


def _heads(tensors: dict, layer: int, heads: int, rows: int):
    q, k, v = (torch.as_tensor(tensors[f"layer{layer}/{t}"]).float()[:1, :heads] for t in "qkv")
    return q[:, :, :rows].contiguous(), k.contiguous(), v.contiguous()


def _row(name: str, tensors: dict, layer: int, heads: int, rows: int) -> dict:
    a = ADAPTERS[name]
    w = WHEELS[a.wheel]
    row = {"kernel": name, "release": f"{w.dist} {w.version}", "file": a.file, "function": a.function,
           "preset": a.preset}
    t0 = time.perf_counter()
    fn = load(name)
    q, k, v = _heads(tensors, layer, heads, rows)
    fp = fingerprint(fn, small=True, params=False, d=int(q.shape[-1]), heads=2, kv_heads=1)
    chk = fp.distance[a.preset]
    named = fp.policy if isinstance(fp.policy, str) else ("/".join(fp.policy) if fp.policy else "none")
    out = fn(q, k, v)
    pred = pcast.attention(q, k, v, policy=POLICIES[a.preset], backend="emulator").out
    ref = pcast.attention(q, k, v, backend="reference").out
    err = row_mismatches(out.reshape(-1, q.shape[-1]), pred.reshape(-1, q.shape[-1]), out.dtype)
    n_probe = sum(p.shape[0] for p in small_probes()) * 2  # rows: query rows x the 2 heads
    row.update(fingerprint=named, probe_rows_outside=int(round(chk * n_probe)), probe_rows=n_probe,
               heads=f"layer {layer}, heads 0-{q.shape[1] - 1}, {q.shape[2]} x {k.shape[2]}",
               real_rows_outside=int((err > 1).sum()), real_rows=int(err.numel()),
               rel_mse_measured=_rel_mse(out, ref), rel_mse_predicted=_rel_mse(pred, ref),
               seconds=round(time.perf_counter() - t0, 1))
    ok = named == a.preset and row["real_rows_outside"] == 0
    why = [] if named == a.preset else [f"the fingerprint names {named}, not {a.preset}"]
    if row["real_rows_outside"]:
        why.append(f"{row['real_rows_outside']} of {row['real_rows']} real-head rows outside the tolerance")
    row.update(status="PASS" if ok else "FAIL", reason="; ".join(why))
    return row


def t10_rows(tensors: dict, *, layer: int = 0, heads: int = 2, rows: int = 32, kernels=None) -> list[dict]:
    """T10's rows (:data:`T10_COLUMNS`, and ``seconds`` for the log only: a timing never enters the table's bytes);
    INCONCLUSIVE rows naming the fetch command without the wheels."""
    gone = set(missing())
    out = []
    for name in kernels or ADAPTERS:
        a = ADAPTERS[name]
        if a.wheel in gone:
            w = WHEELS[a.wheel]
            out.append({c: "" for c in T10_COLUMNS} | {
                "kernel": name, "release": f"{w.dist} {w.version}", "file": a.file, "function": a.function,
                "preset": a.preset, "status": "INCONCLUSIVE",
                "reason": f"the deployed-kernel wheels are not fetched: run `{FETCH_COMMAND}`"})
            continue
        out.append(_row(name, tensors, layer, heads, rows))
    return out
