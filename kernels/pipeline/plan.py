"""The run plan, printed before the first job: runs, shards, estimated CPU time and the peak memory
of the largest job of each experiment; a grid whose largest job cannot fit in memory is refused.

Torch-free except :func:`calibrate` (which workflow/rules/common.smk calls once per machine and
caches). The estimates are models, written out here so that a reader can check them:

Memory of the largest job of a sweep-like experiment (collapse, scales, threshold, policies, fp4,
conformance), with ``W = batch·heads·n·d·4`` bytes (one float32 tensor of a shape) and
``U = batch·heads·n²`` (the scores of one item):

* the shard's stored inputs, all loaded at once: ``seeds_per_shard · Σ_(shape, sigma) 3·W``;
* the largest stack of Δ items (:func:`pcast.pipeline.runs.delta_chunks`: ``L`` Δ values, each
  with one value tensor per ``sink_v_scale``, ``nv`` of them): q and k stacked (2), per value
  tensor the sink-applied parts (3), the stacked v (1) and the float64 reference (2), the float64
  error of one output (4), and the outputs of every call of one :func:`pcast.attention_calls`
  at once (``nc`` calls: orders × scales of a sweep; a policies job's largest batch of calls with
  one q/k cast, its policies and the V-cast floor; an fp4 job's largest batch of casts with one
  first-level scale, times its orders): ``L·W·(6 + 6·nv + nv·nc)``;
* the scores an anchor item shares with its stack (float32, ``4·U``) and the float64 reference's
  scores, exponentials and probabilities of one item (``3·8·U``): ``28·U``;
* the interpreter and its libraries: :data:`BASE_BYTES` (a shard at n = 128 peaked at 263 MB);
* the conformance check's engine part: the same model for its Δ stack at its shape (every Δ x sink value
  norm of ``engine``), with ``nc`` the largest group of calls one :func:`pcast.attention_calls` takes;
  the job's peak is the larger of that and its kernel grid.

Against the ``benchmark:`` max RSS of shard 0 of each experiment in a default run (see the README's
runtime table for the run): the model is for refusing grids that are far too big, not for tight
limits; tests/pipeline/test_plan.py allows 0.6-1.5× of a measured peak.
The ``inputs`` job holds the same stored inputs before writing them. The realmodel experiment's
jobs are bounded by the schema (at most 512 tokens, 6 layers) and not modelled.

CPU time of the emulator and the reference per score (``U`` above), in parts that :func:`calibrate`
measures on this machine on one thread, as jobs run, on a Δ stack at the default shape (n = 1024,
d = 64), as the jobs build them (:func:`pcast.attention_calls`, :func:`pcast.reference.reference_stack`):

* ``c_q``: step 1 in full (q·kᵀ), once per stack for every call with the same q/k cast (an item
  that shares its non-sink scores pays its 64-key slice inside ``c_p``), and once per item for a
  call whose per-tensor q/k cast differs between items (the policies' deployed variant);
* ``c_p``: steps 1-2 of an item that shares its scores (the slice, the copy, running max, exp),
  once per item and order (a sweep) or distinct call (policies);
* ``c_s``: steps 3-4 (the cast and row sum), once per item, order and scale;
* ``c_v``: steps 5-6 (P·V), once per run (item, order, scale, value tensor);
* ``c_refa``: the reference of a stack's first item and the non-sink partial sums, once per stack
  and value tensor; ``c_ref``: each further item's sink terms, once per item and value tensor.

Plus fixed costs in seconds, not per score, which tiny shapes are made of, each counted where the
per-score part of the same work is (:func:`calibrate` measures them on stacks at n = 32, d = 16):
``o_call`` per :func:`pcast.attention_calls` (argument checks, layouts; where ``c_q`` is), ``o_p`` per
item and order or call (steps 1-2, with the item's own bookkeeping; where ``c_p`` is), ``o_s`` per item,
order and scale (steps 3-6; where ``c_s`` is), ``o_v`` per further value tensor of a run (where ``c_v``
is), ``o_refa`` per reference stack and ``o_ref`` per item and value tensor of the reference; and
``o_proc`` once per shard: a fresh process's first calls (lazy imports, torch's first use), measured
in a fresh interpreter. Without the per-scale and per-process parts the smoke preset's shards (0.05-0.2 s)
measured 3-7x their estimate.
Per score: the elementwise parts (``c_p``, ``c_s``) do not depend on d; the matmul parts (``c_q``,
``c_v``, ``c_refa``, ``c_ref``) are scaled by d over the calibration's d (64). Without that scaling
a paper-preset slice (n = 4096, d = 128) measured 1.7-1.9× the estimate. A sweep of ``rows`` runs has ``I = rows / (orders·
scales·nv)`` items in ``I / nΔ · chunks`` stacks. A policies stack runs ``policies·variants`` calls
(the V-cast floors are shared between policies, 1.02 runs a row in the default preset), each
``c_p + c_s + nv·c_v`` per item; in a stack of learned sink logits (one q, k, v for every item)
only the first item pays that in a call whose sink does not seed the max (``sink_mode="final"``:
the others reuse its steps 1-5), and the scores are one item's. The fp4 experiment is counted as a sweep whose
scales are its P casts (one attention_calls a stack): steps 1-2 (``c_p``) once per item, order and unit of
casts that share them (the static scales of one format), and steps 3-4 ``c_s_mx`` for a microscaled cast
(calibrated on NVFP4), ``c_s`` for an FP8 one. The dynamic experiment is counted as the fp4 experiment, each
dynamic scale (the emulator's eager path) at :data:`EAGER_FACTOR` × ``c_p + c_s``. The conformance check runs the Triton kernel, interpreted on a
CPU, which is not calibrated; the statistics, figures and tables are not estimated either.

The decode experiment (Nq = 1: its scores are rows x keys, not n²) has its own parts, measured by
:func:`calibrate` on its own Δ stacks through every configuration of the default grid: ``c_dec`` per
(configuration, decode row, key) at n = 8192, reference included, scaled by d over 16; ``c_dec_p`` per (call, row, key, d) of its P-cast error calls (:func:`_decode_cpu`). Its memory:
:func:`_decode_memory`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pcast.contract import (CONFORMANCE, DECODE_EXPERIMENT, DYNAMIC_EXPERIMENT, EXPERIMENTS, FP4_EXPERIMENT,
                            POLICY_EXPERIMENT, TENSORCORE_EXPERIMENT)
from pcast.pipeline.calibration import calibrate, calibration_path, load_calibration
from pcast.pipeline.conformance_cases import engine_spec
from pcast.pipeline.config import ConfigError, delta_values, expected_rows, listed, n_shards
from pcast.pipeline.decode_config import calls, partition_cases
from pcast.pipeline.dynamic_config import casts as dynamic_casts
from pcast.pipeline.fp4_config import casts
from pcast.pipeline.policy_config import resolve_policies

__all__ = ["BASE_BYTES", "EAGER_FACTOR", "TENSORCORE_S_PER_PRODUCT", "tensorcore_row", "deployed_row", "DEPLOYED_FINGERPRINT_S", "decode_as_sweep", "job_memory", "inputs_memory", "machine_memory", "plan_rows", "format_plan", "check_memory", "calibrate",
           "calibration_path", "load_calibration"]

#: An FP8 dynamic P scale runs the emulator's eager path: its steps 1-4 cost this many times the compiled path's
#: (measured: four dynamic calls 35 s against four static ones 12 s, n = 1024, d = 64, 33 Δ, one core).
EAGER_FACTOR = 3.0

#: The interpreter, torch and numpy before any tensor: a sweep shard's max RSS less its tensors.
BASE_BYTES = 300 * 2**20


def _w(exp: Mapping, shape: Mapping) -> int:
    return int(exp["batch"]) * int(exp["heads"]) * int(shape["n"]) * int(shape["d"]) * 4


def _calls(name: str, exp: Mapping) -> int:
    """Calls of one attention_calls of the experiment's jobs (the outputs held at once)."""
    if name == POLICY_EXPERIMENT:
        return len(exp["policies"]) + 1  # one q/k cast's policies and their V-cast floor
    if name in (FP4_EXPERIMENT, DYNAMIC_EXPERIMENT):  # every cast of a stack in one attention_calls (fp4_runs)
        return len(listed(exp["order"])) * len(_fp4_casts(exp) if name == FP4_EXPERIMENT else dynamic_casts(exp))
    return len(listed(exp.get("order", ["forward"]))) * len(listed(exp["scale"]))


def _fp4_casts(exp: Mapping) -> list[dict]:
    """The fp4 experiment's P casts (pcast.pipeline.fp4_config)."""
    return casts(exp)


def decode_as_sweep(exp: Mapping) -> dict:
    """The decode section with the keys the stored-inputs model reads (one shape, batch 1, one sigma)."""
    return {**exp, "shapes": [{"n": int(exp["n"]), "d": int(exp["d"])}], "batch": 1, "sigma": [float(exp["sigma"])]}


def _decode_memory(exp: Mapping) -> tuple[int, str]:
    """A decode job: its stored inputs, one Δ stack's k and v copies (2 per sink kind's stack), and the
    P-cast error calls' k and values (rows x n x min(n, 256) float32 each, 1 + n/256 of them); a default
    run's shards peaked at 306 MB against this model's 406 MB."""
    stored = inputs_memory(decode_as_sweep(exp)) - BASE_BYTES
    L = min(len(delta_values(exp["delta"])), int(exp.get("max_batch_items", 64)))
    stack = 2 * 2 * L * int(exp["heads"]) * int(exp["n"]) * int(exp["d"]) * 4
    rows = int(exp["partition"]["rows"]) if exp.get("partition") else 0
    part = max([rows * c["n"] * min(c["n"], 256) * 4 * (1 + -(-c["n"] // 256)) for c in partition_cases(exp)],
               default=0)
    return BASE_BYTES + stored + max(stack, part), f"experiments.{DECODE_EXPERIMENT}.n"


def _decode_cpu(exp: Mapping, cal: Mapping) -> float:
    """A decode run's CPU seconds: per seed, sink kind and Δ stack, every configuration's fixed cost
    (``o_call``) and its rows x keys (``c_dec``, reference included); the P-cast error calls (``c_dec_p`` per
    call, row, key and d); each shard's first calls (``o_proc``). A calibration without the decode parts
    (``c_dec``) takes the sweep's per-score parts for one order and scale."""
    nc, seeds, kinds = len(calls(exp)) + len(exp.get("policies", [])), int(exp["seeds"]), len(exp["sink_kinds"])
    n_deltas = len(delta_values(exp["delta"]))
    stacks = -(-n_deltas // max(1, int(exp.get("max_batch_items", 64))))
    c_dec = cal.get("c_dec", cal["c_q"] + cal["c_p"] + cal["c_s"] + cal["c_v"] + cal["c_ref"])
    keys = seeds * kinds * nc * (n_deltas * int(exp["heads"]) * int(exp["n"]) * c_dec * int(exp["d"]) / 16
                                 + stacks * cal.get("o_call", 0.0))
    part = sum(2 * int(exp["partition"]["rows"]) * c["n"] * min(c["n"], 256) * cal.get("c_dec_p", c_dec / 16)
               for c in partition_cases(exp)) * seeds
    return n_shards(exp) * cal.get("o_proc", 0.0) + keys + part


def job_memory(name: str, exp: Mapping, engine: Mapping | None = None) -> tuple[int, str]:
    """Peak bytes of the experiment's largest job (module docstring's model), and the config key of
    the shape that drives it (``experiments.<name>.shapes[i]``). ``engine``: the conformance check's
    engine part (:func:`pcast.pipeline.conformance_cases.engine_spec`), modelled as a stack of its own."""
    if name == DECODE_EXPERIMENT:
        return _decode_memory(exp)
    if engine:
        eng = engine["engine"]
        groups: dict = {}
        for c in engine["cases"]:
            groups[c["group"]] = groups.get(c["group"], 0) + 1
        shape = {**eng["shape"], "block_m": 0, "block_n": 0}
        big = {**exp, "delta": eng["delta"], "sink_v_scale": eng["sink_v_scale"], "shapes": [shape],
               "max_batch_items": len(eng["delta"]) * len(eng["sink_v_scale"])}
        grid, key = job_memory(name, exp)
        mem = job_memory("engine", big)[0] + _w(big, shape) * len(eng["delta"]) * len(eng["sink_v_scale"]) * (
            max(groups.values()) - _calls(name, exp))
        return (grid, key) if grid >= mem else (mem, f"experiments.{name}.engine.shape")
    stored = inputs_memory(exp) - BASE_BYTES
    n_deltas = len(delta_values(exp["delta"])) if isinstance(exp["delta"], (list, Mapping)) else 1
    nv = len(listed(exp["sink_v_scale"]))
    per_stack = max(1, int(exp.get("max_batch_items", 64)) // max(1, nv))
    L = min(n_deltas, per_stack)
    i = max(range(len(exp["shapes"])), key=lambda j: _w(exp, exp["shapes"][j]))
    shape = exp["shapes"][i]
    stack = L * _w(exp, shape) * (6 + 6 * nv + nv * _calls(name, exp))
    scores = 28 * int(exp["batch"]) * int(exp["heads"]) * int(shape["n"]) ** 2
    return BASE_BYTES + stored + stack + scores, f"experiments.{name}.shapes[{i}]"


def inputs_memory(exp: Mapping) -> int:
    """Peak bytes of one ``inputs`` job of the experiment: the interpreter and one shard's stored inputs."""
    sigmas = len(listed(exp["sigma"]))
    return BASE_BYTES + int(exp["seeds_per_shard"]) * sigmas * sum(3 * _w(exp, s) for s in exp["shapes"])


def machine_memory() -> int:
    """Physical memory of this machine, in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _units(exp: Mapping) -> list[int]:
    """Nq·Nk·batch·heads (scores) of each shape."""
    return [int(exp["batch"]) * int(exp["heads"]) * int(s["n"]) ** 2 for s in exp["shapes"]]


def _stacks(exp: Mapping, nv: int) -> float:
    """Stacks per item: Δ chunks (:func:`pcast.pipeline.runs.delta_chunks`) over Δ values."""
    n_deltas = len(delta_values(exp["delta"]))
    per = max(1, int(exp.get("max_batch_items", 64)) // max(1, nv))
    return -(-n_deltas // per) / n_deltas


def _resolved(exp: Mapping, user: Mapping | None) -> dict:
    """The policies experiment's policies, resolved to their keywords (config checks made them valid)."""
    return resolve_policies(exp, user)


#: The parts of the model that are matmuls (q·kᵀ, P·V, the reference's): their cost per score grows with d.
MATMUL_PARTS = ("c_q", "c_v", "c_refa", "c_ref")


def _cpu_s(name: str, exp: Mapping, cal: Mapping | None, user: Mapping | None = None) -> float | None:
    """Estimated CPU seconds of the experiment's kernel and reference work (None: not estimated): the
    model for each shape, its matmul parts scaled by d over the calibration's d, averaged over shapes
    (each shape runs the same grid)."""
    if cal is None or name == CONFORMANCE:
        return None
    if name == DECODE_EXPERIMENT:
        return _decode_cpu(exp, cal)
    # each shard is a process of its own, whose first calls pay lazy imports and torch's first-use costs
    total = n_shards(exp) * cal.get("o_proc", 0.0) * len(exp["shapes"])
    for shape, units in zip(exp["shapes"], _units(exp)):
        f = int(shape["d"]) / int(cal.get("d", 64))
        scaled = {k: v * f if k in MATMUL_PARTS else v for k, v in cal.items() if k.startswith("c_")}
        total += _cpu_per_score(name, exp, scaled, user) * units
        # the fixed costs of calls, items and runs and of the reference (what tiny shapes are made of)
        fixed = {f"c_{part}": cal.get(f"o_{part}", 0.0) / units for part in ("q", "p", "s", "v", "refa", "ref")}
        fixed["c_q"] = cal.get("o_call", 0.0) / units
        total += _cpu_per_score(name, exp, fixed, user) * units
    return total / len(exp["shapes"])


def _cpu_per_score(name: str, exp: Mapping, cal: Mapping, user: Mapping | None) -> float:
    """The model's seconds per score of one shape (module docstring), all shapes' runs counted."""
    rows = expected_rows(name, exp)
    if name == POLICY_EXPERIMENT:
        n_deltas = len(delta_values(exp["delta"]))
        items = (int(exp["seeds"]) * len(exp["shapes"]) * len(listed(exp["causal"])) * len(listed(exp["sigma"]))
                 * n_deltas)
        variants = len(exp["variants"])
        seeding = sum(1 for kw in _resolved(exp, user).values() if kw.get("sink_mode") == "init")
        cost = 0.0
        for kind in exp["sink_kinds"]:
            nv = len(listed(exp["sink_v_scale"])) if kind == "keys" else 1
            stacks = items * _stacks(exp, nv)
            cast = sum(1 for c in exp["variants"].values() if c.get("qk_fmt") is not None)
            if kind == "keys":  # every item its own sink keys: a per-item q/k cast differs, and so does P
                scores = cast * items + (variants - cast) * stacks
                runs = items * len(exp["policies"]) * variants
            else:  # one q, k, v for the stack: one item's work per call, unless the sink seeds the max
                scores = variants * stacks
                runs = (seeding * items + (len(exp["policies"]) - seeding) * stacks) * variants
            cost += (scores * cal["c_q"] + runs * (cal["c_p"] + cal["c_s"] + nv * cal["c_v"])
                     + stacks * nv * cal["c_refa"] + items * nv * cal["c_ref"])
        return cost
    # a sweep: one attention_calls a stack; fp4: its casts as the sweep's scales, steps 1-2 once per unit
    units, scales = 1, len(listed(exp.get("scale", [])))
    cast_cost = scales * cal["c_s"]  # steps 3-4 of one item and order, every cast
    if name in (FP4_EXPERIMENT, DYNAMIC_EXPERIMENT):
        casts = _fp4_casts(exp) if name == FP4_EXPERIMENT else dynamic_casts(exp)
        mx = sum(1 for c in casts if c["fmt"] in ("nvfp4", "mxfp4"))
        dyn = sum(1 for c in casts if c["fmt"] not in ("nvfp4", "mxfp4") and c["scale_mode"] != "multiply")
        units, scales = len({(c["fmt"], c["scale_mode"]) for c in casts}), len(casts)
        cast_cost = (mx * cal.get("c_s_mx", cal["c_s"]) + dyn * EAGER_FACTOR * (cal["c_p"] + cal["c_s"])
                     + (scales - mx - dyn) * cal["c_s"])
    orders, nv = len(listed(exp["order"])), len(listed(exp["sink_v_scale"]))
    items = rows / (orders * scales * nv)
    stacks = items * _stacks(exp, nv)
    cost = (stacks * (cal["c_q"] + nv * cal["c_refa"])
            + items * (units * orders * cal["c_p"] + orders * cast_cost + nv * cal["c_ref"])
            + rows * cal["c_v"])
    return cost


def plan_rows(config: Mapping, cal: Mapping | None) -> list[dict]:
    """One row per sweep-like experiment: shards, runs (rows of its tidy table), CPU seconds (or
    None), the largest job's peak bytes and the key of its shape."""
    rows = []
    for name in EXPERIMENTS + (POLICY_EXPERIMENT, FP4_EXPERIMENT, DYNAMIC_EXPERIMENT, DECODE_EXPERIMENT):
        if name not in config["experiments"]:
            continue
        exp = config["experiments"][name]
        engine = None
        if name == CONFORMANCE:
            engine = engine_spec(exp, config["experiments"], config.get("policies"))
        mem, key = job_memory(name, exp, engine)
        runs = expected_rows(name, exp, experiments=config["experiments"], policies=config.get("policies"))
        rows.append({"experiment": name, "shards": n_shards(exp), "runs": runs,
                     "cpu_s": _cpu_s(name, exp, cal, config.get("policies")), "peak_bytes": mem, "key": key})
    return rows


#: CPU seconds per product (query · key · d) of a tensor-core run of the tensorcore experiment, all of its
#: work counted (the float32 runs, the reference, the mmasim check): 19 s for 1.9·10^9 products at n = 512,
#: d = 64 on the 2-core machine the default preset is budgeted on.
TENSORCORE_S_PER_PRODUCT = 1.0e-8


def tensorcore_row(config: Mapping) -> dict:
    """The tensorcore experiment's plan row (one job, not a shard experiment): its tensor-core runs (rows of
    its tidy table), CPU seconds (:data:`TENSORCORE_S_PER_PRODUCT` per product) and peak bytes: the float64
    reference's scores of one item (``3·8·n²``) and step 5's float64 chunk products and exponents
    (``6·8·n·d·32``) over :data:`BASE_BYTES`."""
    exp = config["experiments"][TENSORCORE_EXPERIMENT]
    n, d = int(exp["n"]), int(exp["d"])
    runs = (int(exp["seeds"]) * len(delta_values(exp["delta"])) * len(exp["order"]) * len(exp["scale"])
            * len(exp["pv_arith"]))
    return {"experiment": TENSORCORE_EXPERIMENT, "shards": 1, "runs": runs,
            "cpu_s": runs * n * n * d * TENSORCORE_S_PER_PRODUCT, "peak_bytes": BASE_BYTES + 24 * n * n + 1536 * n * d,
            "key": f"experiments.{TENSORCORE_EXPERIMENT}.n"}


#: CPU seconds of table T10 (pcast.deployed under Triton's interpreter) per adapter: its fingerprint on the
#: small probe set (a fixed cost), and per (head · query row · key) of the real heads it runs. Measured on the
#: smoke preset (2 heads x 32 rows x 128 keys): 46 s of CPU in all (132 s wall on 2 cores shared with three
#: other jobs: 12, 70 and 42 s per adapter), the split kernels' fingerprints the most.
DEPLOYED_FINGERPRINT_S = {"vllm-unified": 4.0, "vllm-triton-decode": 23.0, "sglang-decode": 14.0}
DEPLOYED_S_PER_ROW_KEY = 1.0e-4


def deployed_row(config: Mapping, keys: int = 512, fetched: bool = True) -> dict:
    """Table T10's plan row (one job): the interpreter's cost (:data:`DEPLOYED_FINGERPRINT_S` and
    :data:`DEPLOYED_S_PER_ROW_KEY`, measured on the 2 loaded cores of the machine the default preset is
    budgeted on) for every adapter; none without the fetched wheels (the job then writes INCONCLUSIVE rows)."""
    exp = config["experiments"]["deployed"]
    rows = int(exp["heads"]) * int(exp["rows"])
    cpu = sum(s + rows * keys * DEPLOYED_S_PER_ROW_KEY for s in DEPLOYED_FINGERPRINT_S.values()) if fetched else 0.0
    return {"experiment": "deployed", "shards": 1, "runs": len(DEPLOYED_FINGERPRINT_S), "cpu_s": cpu,
            "peak_bytes": BASE_BYTES, "key": "experiments.deployed.heads"}


def _dur(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 5400 else (f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s")


def format_plan(rows: list[dict], preset: str, mem_total: int, cal: Mapping | None) -> str:
    """The plan as printed before the first job."""
    lines = [f"pcast-fp8 plan, preset {preset!r} (before any job; pcast.pipeline.plan):"]
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
                "max_batch_items (the memory model: pcast.pipeline.plan)")
