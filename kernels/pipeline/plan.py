"""The run plan, printed before the first job: runs, shards, estimated CPU time and the peak memory
of the largest job of each experiment; a grid whose largest job cannot fit in memory is refused.

Torch-free except :func:`calibrate` (which workflow/rules/common.smk calls once per machine and
caches). The estimates are models, written out here so that a reader can check them:

Memory of the largest job of a sweep-like experiment (collapse, scales, threshold, policies,
conformance), with ``W = batch·heads·n·d·4`` bytes (one float32 tensor of a shape):

* the shard's stored inputs, all loaded at once: ``seeds_per_shard · Σ_(shape, sigma) 3·W``;
* the largest stack of Δ items (:func:`kernels.pipeline.runs.delta_chunks`: ``L`` Δ values, each
  with one value tensor per ``sink_v_scale``, ``nv`` of them): q and k stacked (2), per value
  tensor the sink-applied parts (3), the stacked v (1) and the float64 reference (2), the float64
  error of one output (4), and the outputs of every scale of an order at once (``ns`` scales,
  :func:`kernels.attention_scales`): ``L·W·(6 + 6·nv + nv·ns)`` (the policies experiment: ns = 1);
* the interpreter and its libraries: :data:`BASE_BYTES` (a shard at n = 128 peaked at 263 MB).

Against the peak RSS of a collapse shard (default grid: 3 sink_v_scale, 33 Δ, so L = 21) in a
fresh process, the model gave 1.14× the measured 263 MB at n = 128, d = 16; 0.99× of 598 MB at
n = 2048, d = 64; 1.20× of 1,202 MB at n = 4096, d = 128. Against the ``benchmark:`` max RSS of
shard 0 of each experiment in a default run: 1.02× (collapse, 451 MB), 0.98× (scales, 348 MB),
0.90× (threshold, 599 MB), 0.79× (policies, 593 MB), 0.92× (conformance, 327 MB). The same
1-seed collapse job at n = 1024 peaked at 673 MB once inside the full test suite (0.68×) and
within ±25% when run alone, so tests/test_plan.py allows 0.6-1.5×: the model is for refusing
grids that are far too big, not for tight limits.
The ``inputs`` job holds the same stored inputs before writing them. The realmodel experiment's
jobs are bounded by the schema (at most 512 tokens, 6 layers) and not modelled.

CPU time of the emulator, per stacked item and score (Nq·Nk·batch·heads), in three parts that
:func:`calibrate` measures on this machine on one thread, as jobs run, at the default shape
(n = 1024, d = 64): ``c_p``, steps 1-2 (scores, running max, exp), once per item and order;
``c_s``, steps 3-4 (the cast and row sum), once per item, order and scale; ``c_v``, steps 5-6 (P·V),
once per run (item, order, scale, value tensor); and ``c_ref``, the float64 reference, once per
item and value tensor. Per score, not per multiply-add: the elementwise steps dominate and BLAS
makes the matmuls cheap, so d changes the cost far less than n does. A sweep of ``rows`` runs has
``I = rows / (orders·scales·nv)`` items. A policies call (one per policy, variant and stack; the
V-cast floors are shared between variants, 1.02 runs a row in the default preset) is
``c_p + c_s + nv·c_v`` per item. The conformance check runs the Triton kernel, interpreted on a
CPU, which is not calibrated; the statistics, figures and tables are not estimated either.
Against shard 0 of each default-preset experiment run right after a calibration on one idle
2-core machine, the estimate was 1.09× the measured wall time (collapse, 23.9 s), 1.04× (scales,
10.7 s), 1.08× (threshold, 44.1 s) and 0.93× (policies, 83.9 s).
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Mapping

from ..contract import CONFORMANCE, EXPERIMENTS, POLICY_EXPERIMENT
from .config import ConfigError, delta_values, expected_rows, listed, n_shards

__all__ = ["BASE_BYTES", "job_memory", "machine_memory", "plan_rows", "format_plan", "check_memory", "calibrate",
           "calibration_path", "load_calibration"]

#: The interpreter, torch and numpy before any tensor: a sweep shard's max RSS less its tensors.
BASE_BYTES = 300 * 2**20
_CAL_FORMAT = "pcast-fp8 calibration v3"


def _w(exp: Mapping, shape: Mapping) -> int:
    return int(exp["batch"]) * int(exp["heads"]) * int(shape["n"]) * int(shape["d"]) * 4


def job_memory(name: str, exp: Mapping) -> tuple[int, str]:
    """Peak bytes of the experiment's largest job (module docstring's model), and the config key of
    the shape that drives it (``experiments.<name>.shapes[i]``)."""
    sigmas = len(listed(exp["sigma"]))
    stored = int(exp["seeds_per_shard"]) * sigmas * sum(3 * _w(exp, s) for s in exp["shapes"])
    n_deltas = len(delta_values(exp["delta"])) if isinstance(exp["delta"], (list, Mapping)) else 1
    nv = len(listed(exp["sink_v_scale"]))
    per_stack = max(1, int(exp.get("max_batch_items", 64)) // max(1, nv))
    L = min(n_deltas, per_stack)
    i = max(range(len(exp["shapes"])), key=lambda j: _w(exp, exp["shapes"][j]))
    ns = 1 if name == POLICY_EXPERIMENT else len(listed(exp["scale"]))
    stack = L * _w(exp, exp["shapes"][i]) * (6 + 6 * nv + nv * ns)
    return BASE_BYTES + stored + stack, f"experiments.{name}.shapes[{i}]"


def machine_memory() -> int:
    """Physical memory of this machine, in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _units(exp: Mapping) -> list[int]:
    """Nq·Nk·batch·heads (scores) of each shape."""
    return [int(exp["batch"]) * int(exp["heads"]) * int(s["n"]) ** 2 for s in exp["shapes"]]


def _cpu_s(name: str, exp: Mapping, cal: Mapping | None) -> float | None:
    """Estimated CPU seconds of the experiment's kernel and reference work (None: not estimated)."""
    if cal is None or name == CONFORMANCE:
        return None
    mean_units = sum(_units(exp)) / len(exp["shapes"])
    rows = expected_rows(name, exp)
    if name == POLICY_EXPERIMENT:
        n_deltas = len(delta_values(exp["delta"]))
        base = (int(exp["seeds"]) * len(exp["shapes"]) * len(listed(exp["causal"])) * len(listed(exp["sigma"]))
                * n_deltas)
        calls = len(exp["policies"]) * len(exp["variants"])
        cost = 0.0
        for kind in exp["sink_kinds"]:
            nv = len(listed(exp["sink_v_scale"])) if kind == "keys" else 1
            cost += base * (calls * (cal["c_p"] + cal["c_s"] + nv * cal["c_v"]) + nv * cal["c_ref"])
        return cost * mean_units
    orders, scales = len(listed(exp["order"])), len(listed(exp["scale"]))
    nv = len(listed(exp["sink_v_scale"]))
    items = rows / (orders * scales * nv)
    cost = items * (orders * cal["c_p"] + orders * scales * cal["c_s"] + nv * cal["c_ref"]) + rows * cal["c_v"]
    return cost * mean_units


def plan_rows(config: Mapping, cal: Mapping | None) -> list[dict]:
    """One row per sweep-like experiment: shards, runs (rows of its tidy table), CPU seconds (or
    None), the largest job's peak bytes and the key of its shape."""
    rows = []
    for name in EXPERIMENTS + (POLICY_EXPERIMENT,):
        exp = config["experiments"][name]
        mem, key = job_memory(name, exp)
        rows.append({"experiment": name, "shards": n_shards(exp), "runs": expected_rows(name, exp),
                     "cpu_s": _cpu_s(name, exp, cal), "peak_bytes": mem, "key": key})
    return rows


def _dur(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 5400 else (f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s")


def format_plan(rows: list[dict], preset: str, mem_total: int, cal: Mapping | None) -> str:
    """The plan as printed before the first job."""
    lines = [f"pcast-fp8 plan, preset {preset!r} (before any job; kernels.pipeline.plan):"]
    for r in rows:
        cpu = "not estimated" if r["cpu_s"] is None else f"~{_dur(r['cpu_s'])} CPU"
        lines.append(f"  {r['experiment']:<12} {r['runs']:>10,} runs in {r['shards']:>4} shards, {cpu:>18}; "
                     f"largest job ~{r['peak_bytes'] / 2**30:.2f} GiB")
    known = [r["cpu_s"] for r in rows if r["cpu_s"] is not None]
    source = ("calibrated on this machine" if cal else "no calibration")
    lines.append(f"  kernel and reference work ~{_dur(sum(known))} CPU in all ({source}; the conformance check, "
                 "the real model, statistics and figures come on top)")
    big = max(rows, key=lambda r: r["peak_bytes"])
    lines.append(f"  largest job: {big['experiment']} (~{big['peak_bytes'] / 2**30:.2f} GiB) of "
                 f"{mem_total / 2**30:.1f} GiB on this machine")
    return "\n".join(lines)


def check_memory(rows: list[dict], mem_total: int) -> None:
    """Refuse a grid whose largest job needs more memory than this machine has, naming the key."""
    for r in rows:
        if r["peak_bytes"] > mem_total:
            raise ConfigError(
                f"config key '{r['key']}': the largest {r['experiment']} job would need about "
                f"{r['peak_bytes'] / 2**30:,.1f} GiB, more than this machine's {mem_total / 2**30:.1f} GiB; allowed: "
                f"a smaller n or d there, or fewer of experiments.{r['experiment']}.seeds_per_shard or "
                "max_batch_items (the memory model: kernels.pipeline.plan)")


# ----------------------------------------------------------------------------- calibration


def _machine_key() -> dict:
    """What a calibration is valid for (read without importing torch)."""
    from importlib.metadata import version

    return {"format": _CAL_FORMAT, "host": platform.node(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "torch": version("torch")}


def calibration_path() -> str:
    """Where this machine's calibration is kept: one file per user, shared by every checkout."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "pcast-fp8", "calibration.json")


def calibrate(*, n: int = 1024, d: int = 64, items: int = 4, repeats: int = 3) -> dict:
    """Seconds per score (Nq·Nk) of steps 1-2 (``c_p``), 3-4 (``c_s``) and 5-6 (``c_v``) of one
    emulator item, and of the float64 reference (``c_ref``), on one thread, the best of ``repeats``
    (module docstring). Three :func:`kernels.attention_scales` calls of ``items`` stacked items
    separate the parts: one scale and one value tensor (p + s + v), three value tensors
    (p + s + 3v), three scales (p + 3s + 3v). About a second, plus importing torch."""
    import torch

    from .. import attention_scales
    from ..reference import reference_attention

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(items, 1, n, d, generator=g) for _ in range(3))
        calls = {"one": ([v], [256.0]), "values": ([v, v, v], [256.0]), "scales": ([v], [1.0, 16.0, 256.0])}
        best = dict.fromkeys([*calls, "ref"], float("inf"))
        for _ in range(repeats):
            for key, (values, scales) in calls.items():
                t0 = time.perf_counter()
                attention_scales(q, k, values, scales=scales, order="forward", ksink=4, backend="emulator")
                best[key] = min(best[key], time.perf_counter() - t0)
            t0 = time.perf_counter()
            reference_attention(q, k, v)
            best["ref"] = min(best["ref"], time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    units = items * n * n
    c_v = max((best["values"] - best["one"]) / 2, 0.0) / units
    c_s = max((best["scales"] - best["one"]) / 2 / units - c_v, 0.0)
    c_p = max(best["one"] / units - c_s - c_v, 0.0)
    return {**_machine_key(), "c_p": c_p, "c_s": c_s, "c_v": c_v, "c_ref": best["ref"] / units, "n": n, "d": d,
            "items": items}


def load_calibration(path: str | os.PathLike | None = None) -> dict:
    """This machine's calibration from ``path`` (default :func:`calibration_path`) if it was made
    here, else a new one (:func:`calibrate`), saved there."""
    path = calibration_path() if path is None else path
    try:
        with open(path) as fh:
            cal = json.load(fh)
        if all(cal.get(k) == v for k, v in _machine_key().items()):
            return cal
    except (OSError, ValueError):
        pass
    cal = calibrate()
    try:  # best effort: an unwritable cache only means calibrating again next time
        os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)
        tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
        with open(tmp, "w") as fh:
            json.dump(cal, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass
    return cal
