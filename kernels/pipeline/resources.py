"""What each job asks a cluster for (the SLURM profile, workflow/profiles/slurm): memory and time from
the run plan's models (:mod:`pcast.pipeline.plan`), with the safety factors and floors below, and
one thread per job. Torch-free; the rule files call :func:`rule_resources` for every rule.

* ``mem_mb`` (MB of 10^6 bytes, as SLURM's ``--mem``) = max(:data:`MEM_FLOOR_MB`, :data:`MEM_FACTOR` ×
  the plan's peak of the experiment's largest job). The memory model lies within 0.6-1.5× of the
  measured peaks (tests/pipeline/test_plan.py), and a job past its ``--mem`` is killed, hence 1.5×;
  the floor is the interpreter with torch, numpy and Snakemake's script wrapper, with room to spare.
  ``sweep_shard`` and ``conformance_shard`` use :func:`pcast.pipeline.plan.job_memory`,
  ``inputs`` :func:`pcast.pipeline.plan.inputs_memory`.
* ``runtime`` (minutes, as ``sbatch -t``) = max(:data:`RUNTIME_FLOOR_MIN`, :data:`RUNTIME_FACTOR` × the
  plan's CPU seconds of the experiment's largest shard / 60), rounded up. The plan's CPU estimate is
  for one thread on the machine that calibrated it (the one that schedules); a cluster's node may be
  slower, a job past its time is killed and loses its work, hence 3×; the floor covers a job's own
  start (Python, torch, the job's Snakemake: seconds) many times over.
* ``threads`` = 1 for every rule: the plan's CPU time is for one thread, the emulator's matmuls are
  small (more threads speed a job up little and spin on a shared node), and one thread per job is
  how the local profile runs, so the cluster's outputs are the local run's, byte for byte.

Jobs the plan does not model (:data:`UNMODELLED`: the conformance check's interpreted Triton kernel,
the real model, the statistics, the tensorcore experiment) ask for fixed amounts: the real model's jobs peaked at 1.2 GB in a
default run, the statistics at a few hundred MB; the schema bounds the real model (at most 512 tokens,
6 layers) and the statistics read tables of at most a few hundred thousand rows. Override any value
with ``--set-resources RULE:mem_mb=...`` or ``--set-threads RULE=N``.

The tidy tables, figures, tables and the verdict (:data:`LOCAL_RULES`) are local rules (``localrule``): seconds
each on small CSVs, they run beside the scheduling Snakemake instead of waiting in SLURM's queue.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pcast.contract import CONFORMANCE, DECODE_EXPERIMENT
from pcast.pipeline.config import shard_seeds
from pcast.pipeline.plan import decode_as_sweep, inputs_memory, plan_rows

__all__ = ["MEM_FACTOR", "MEM_FLOOR_MB", "RUNTIME_FACTOR", "RUNTIME_FLOOR_MIN", "UNMODELLED", "THREADS", "mem_mb", "runtime_min",
           "KERNEL_RULES", "LOCAL_RULES", "is_local", "shard_resources", "inputs_resources", "rule_resources", "resource_table",
           "cluster_jobs", "format_requests"]

MEM_FACTOR = 1.5
MEM_FLOOR_MB = 1000
RUNTIME_FACTOR = 3.0
RUNTIME_FLOOR_MIN = 10
THREADS = 1

#: Fixed (mem_mb, runtime in minutes) of the jobs the plan does not model, by rule name or prefix.
UNMODELLED = {
    "conformance_shard": (None, 120),  # memory modelled; the interpreted Triton kernel's time is not
    "realmodel_": (3000, 60),
    "stats_": (2000, 30),
    "tensorcore": (2000, 30),  # the tensorcore experiment: one job, n = 512 by default (plan: its CPU time)
    "table_deployed": (2000, 30),  # T10 runs the deployed kernels interpreted: about a minute of CPU by default
}
#: Rules (names or prefixes) that run where Snakemake schedules (``localrule: True``), never on SLURM.
LOCAL_RULES = ("tidy_table", "fig_", "table_", "claims")


def mem_mb(peak_bytes: int) -> int:
    """``--mem`` for a job whose modelled peak is ``peak_bytes``: the factor, the floor, whole MB."""
    return max(MEM_FLOOR_MB, math.ceil(MEM_FACTOR * peak_bytes / 1e6))


def runtime_min(cpu_s: float | None) -> int:
    """``-t`` minutes for a job of ``cpu_s`` estimated CPU seconds (None: not estimated, the floor)."""
    if cpu_s is None:
        return RUNTIME_FLOOR_MIN
    return max(RUNTIME_FLOOR_MIN, math.ceil(RUNTIME_FACTOR * cpu_s / 60))


def _largest_shard(exp: Mapping) -> float:
    """The largest shard's share of the experiment's seeds (its share of the CPU time)."""
    shards = shard_seeds(exp)
    return max(len(s) for s in shards) / sum(len(s) for s in shards)


def shard_resources(config: Mapping, cal: Mapping | None) -> dict[str, dict]:
    """experiment -> the resources of each of its shard jobs (``sweep_shard``, ``conformance_shard``),
    with the plan's numbers they come from (peak_bytes, cpu_s of the largest shard, key)."""
    out = {}
    for row in plan_rows(config, cal):
        name = row["experiment"]
        exp = config["experiments"][name]
        cpu = None if row["cpu_s"] is None else row["cpu_s"] * _largest_shard(exp)
        runtime = UNMODELLED["conformance_shard"][1] if name == CONFORMANCE else runtime_min(cpu)
        out[name] = {"mem_mb": mem_mb(row["peak_bytes"]), "runtime": runtime, "threads": THREADS,
                     "peak_bytes": row["peak_bytes"], "cpu_s": cpu, "key": row["key"]}
    return out


def inputs_resources(config: Mapping) -> dict[str, dict]:
    """experiment -> the resources of each of its ``inputs`` jobs (one shard's stored inputs)."""
    out = {}
    for name, exp in config["experiments"].items():
        if name == DECODE_EXPERIMENT:
            exp = decode_as_sweep(exp)
        if "shapes" not in exp or "seeds_per_shard" not in exp:
            continue
        peak = inputs_memory(exp)
        out[name] = {"mem_mb": mem_mb(peak), "runtime": RUNTIME_FLOOR_MIN, "threads": THREADS,
                     "peak_bytes": peak, "cpu_s": None, "key": f"experiments.{name}.shapes"}
    return out


def rule_resources(rule: str) -> dict:
    """The fixed resources of a rule the plan does not model (:data:`UNMODELLED`)."""
    for prefix, (mem, runtime) in UNMODELLED.items():
        if mem is not None and (rule == prefix or (prefix.endswith("_") and rule.startswith(prefix))):
            return {"mem_mb": mem, "runtime": runtime, "threads": THREADS, "peak_bytes": None, "cpu_s": None,
                    "key": None}
    raise KeyError(f"rule {rule!r} has no fixed resources; allowed: {', '.join(UNMODELLED)}")


def resource_table(config: Mapping, cal: Mapping | None) -> list[dict]:
    """One row per kind of job (rule, experiment or None): what it asks for and the plan's numbers."""
    rows = []
    shards = shard_resources(config, cal)
    for name, res in inputs_resources(config).items():
        if name in shards:
            rows.append({"rule": "inputs", "experiment": name, **res})
    for name, res in shards.items():
        rule = "conformance_shard" if name == CONFORMANCE else "sweep_shard"
        rows.append({"rule": rule, "experiment": name, **res})
    for rule in ("realmodel_", "stats_"):
        rows.append({"rule": rule + "*", "experiment": None, **rule_resources(rule + "x")})
    rows.append({"rule": "tensorcore", "experiment": None, **rule_resources("tensorcore")})
    return rows


def is_local(rule: str) -> bool:
    """Whether the rule is one of :data:`LOCAL_RULES` (a rule with fixed resources in :data:`UNMODELLED` never is)."""
    if rule in UNMODELLED:
        return False
    return any(rule == p or (p.endswith("_") and rule.startswith(p)) for p in LOCAL_RULES)


#: The rules that run the kernels: on PCAST_SLURM_GPU_PARTITION when it names one (workflow/profiles/slurm).
KERNEL_RULES = ("sweep_shard", "conformance_shard", "realmodel_heads", "realmodel_outputs")


def _override(overrides: Mapping, rule: str) -> int | None:
    """A --set-resources RULE:mem_mb=N the user gave, as an int (None: none, or not a number)."""
    value = (overrides.get(rule) or {}).get("mem_mb")
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def cluster_jobs(rows: list[dict], environ: Mapping[str, str], overrides: Mapping) -> list[dict]:
    """Each kind of job of :func:`resource_table` as :func:`pcast.pipeline.slurm.refusal` reads it:
    {job, where, mem_mb, partition, why}, the partitions as the profile sets them from the environment
    ("" for the cluster's default) and ``--set-resources`` overrides (``overrides``: rule -> {name: value})."""
    part = environ.get("PCAST_SLURM_PARTITION", "")
    gpu_part = environ.get("PCAST_SLURM_GPU_PARTITION", "") or part
    jobs = []
    for r in rows:
        rule = r["rule"].rstrip("*")
        given = _override(overrides, rule)
        if r["experiment"]:
            job, where = f"largest {r['experiment']} {rule}", f"config key '{r['key']}'"
        else:
            job, where = f"{r['rule']}", f"rule {r['rule']} (pcast.pipeline.resources.UNMODELLED)"
        if given is not None:
            why = f"--set-resources {rule}:mem_mb"
        elif r["peak_bytes"] is not None and r["mem_mb"] > MEM_FLOOR_MB:
            why = f"{MEM_FACTOR} x the plan's {r['peak_bytes'] / 1e6:,.0f} MB"
        else:
            why = "the floor" if r["peak_bytes"] is not None else "fixed"
        jobs.append({"job": job, "where": where, "mem_mb": r["mem_mb"] if given is None else given, "why": why,
                     "partition": gpu_part if rule in KERNEL_RULES else part})
    return jobs


def format_requests(rows: list[dict]) -> str:
    """The resources each kind of job asks for, as printed before the first job under SLURM."""
    lines = ["SLURM requests per job (pcast.pipeline.resources; --set-resources/--set-threads override; "
             f"{', '.join(p + '*' if p.endswith('_') else p for p in LOCAL_RULES)} run here, not on SLURM):"]
    for r in rows:
        what = f"{r['rule']} {r['experiment'] or ''}".strip()
        cpu = "" if r["cpu_s"] is None else f", plan {r['cpu_s']:,.0f} s CPU"
        peak = "" if r["peak_bytes"] is None else f", plan {r['peak_bytes'] / 1e6:,.0f} MB"
        lines.append(f"  {what:<28} mem_mb {r['mem_mb']:>7,}  runtime {r['runtime']:>4} min  threads "
                     f"{r['threads']}{peak}{cpu}")
    return "\n".join(lines)
