"""The SLURM profile's checks against the cluster itself (workflow/profiles/slurm; docs/slurm.md).

* :func:`bound_for_slurm`: whether this Snakemake run submits its jobs to SLURM, from its command
  line (``--executor slurm``, or a profile whose ``executor`` is ``slurm``), known before the
  workflow is parsed to the end.
* :func:`parse_sinfo`, :func:`largest_nodes`, :func:`refusal`: before any job, every job's ``mem_mb``
  against the largest node of its partition, as ``sinfo`` lists them; a job no node can hold is
  refused with one message naming it, its config key, what it asks for and the largest node.
* :func:`parse_squeue`, :func:`stuck`: after submission, a job of this run pending for a reason
  that will not clear by waiting (:data:`STUCK_REASONS`) is reported with squeue's reason and
  cancelled, and the run stops as after any failed job (workflow/rules/common.smk polls).

Pure text in, text out: the commands themselves are run by workflow/rules/common.smk.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

import yaml

__all__ = ["ACCOUNT_GUESS_WARNINGS", "SINFO", "SQUEUE", "STUCK_REASONS", "bound_for_slurm", "parse_sinfo", "largest_nodes", "refusal",
           "parse_squeue", "stuck", "stuck_message", "SLURM_ENV", "slurm_env_error"]

#: One line per node and partition: name, partition (the default one marked with an asterisk), MB, CPUs.
SINFO = ("sinfo", "--noheader", "--Node", "--format=%N|%P|%m|%c")
#: One line per pending job of this user: id, comment (the executor's ``rule_<name>...``), reason, CPUs, memory,
#: submit time, working directory.
SQUEUE = ("squeue", "--me", "--noheader", "--states=PENDING", "--format=%i|%k|%r|%C|%m|%V|%Z")

#: squeue reasons a pending job keeps until its request changes: larger than any node or the
#: partition's limits, a feature or account SLURM does not know, a dependency that failed.
STUCK_REASONS = frozenset({
    "PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints", "InvalidAccount",
    "InvalidQOS", "DependencyNeverSatisfied", "QOSMaxMemoryPerJob", "QOSMaxCpuPerJobLimit",
    "QOSMaxWallDurationPerJobLimit", "AssocMaxWallDurationPerJobLimit", "AssocMaxCpuPerJobLimit",
})


#: The executor plugin's warnings when no account is given (each message's start).
ACCOUNT_GUESS_WARNINGS = ("No SLURM account given, trying to guess.",
                          "No account was given, not able to get a SLURM account via sacct",
                          "Unable to guess SLURM account. Trying to proceed without.")


def _profile_executor(path: str) -> str | None:
    try:
        with open(os.path.join(path, "config.yaml")) as fh:
            profile = yaml.safe_load(fh) or {}
    except (OSError, yaml.YAMLError):
        return None
    return profile.get("executor") if isinstance(profile, Mapping) else None


def bound_for_slurm(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> bool:
    """True when this command line runs its jobs through the slurm executor: ``--executor``/``-e``
    names it, or else a ``--profile``/``--workflow-profile`` (or ``$SNAKEMAKE_PROFILE``) directory does.
    A dry run (``-n``) counts as bound too: it shows what the real run would check."""
    environ = os.environ if environ is None else environ
    executor, profiles = None, []
    args = list(argv)
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        if name in ("--executor", "-e"):
            executor = value
        elif name in ("--profile", "--workflow-profile"):
            profiles.append(value)
    if executor is not None:
        return executor == "slurm"
    if environ.get("SNAKEMAKE_PROFILE"):
        profiles.insert(0, environ["SNAKEMAKE_PROFILE"])
    found = [e for e in (_profile_executor(p) for p in profiles) if e is not None]
    return bool(found) and found[-1] == "slurm"


def parse_sinfo(text: str) -> tuple[dict[str, list[dict]], str | None]:
    """``sinfo`` output in :data:`SINFO`'s format -> (partition -> its nodes {name, mem_mb, cpus}, the
    default partition or None)."""
    parts: dict[str, list[dict]] = {}
    default = None
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 4:
            continue
        node, partition, mem, cpus = (f.strip() for f in fields)
        if partition.endswith("*"):
            partition = partition[:-1]
            default = partition
        try:
            parts.setdefault(partition, []).append({"name": node, "mem_mb": int(mem.rstrip("+")),
                                                    "cpus": int(cpus.rstrip("+"))})
        except ValueError:
            continue
    return parts, default


def largest_nodes(parts: Mapping[str, list[dict]], default: str | None) -> dict[str, dict]:
    """partition -> its node with the most memory; ``""`` stands for the default partition."""
    out = {p: max(nodes, key=lambda n: n["mem_mb"]) for p, nodes in parts.items() if nodes}
    if default in out:
        out[""] = out[default]
    return out


def _partition_name(partition: str, default: str | None) -> str:
    return f"'{partition}'" if partition else f"'{default}' (the default)"


def refusal(jobs: Iterable[Mapping], parts: Mapping[str, list[dict]], default: str | None) -> str | None:
    """The message refusing the largest job that no node of its partition can hold, or None.

    ``jobs``: {job, where, mem_mb, partition, why} each (``where``: the config key or rule that sets
    its size, ``why``: how mem_mb was reached). Partitions
    sinfo does not list are left to sbatch, which refuses them by name."""
    largest = largest_nodes(parts, default)
    over = [j for j in jobs if j["partition"] in largest and int(j["mem_mb"]) > largest[j["partition"]]["mem_mb"]]
    if not over:
        return None
    j = max(over, key=lambda job: int(job["mem_mb"]))
    node = largest[j["partition"]]
    others = f" ({len(over) - 1} more jobs do not fit either)" if len(over) > 1 else ""
    return (f"{j['where']}: the {j['job']} job asks SLURM for {int(j['mem_mb']):,} MB ({j['why']}), more "
            f"than the largest node of partition {_partition_name(j['partition'], default)} has: {node['name']}, "
            f"{node['mem_mb']:,} MB (sinfo){others}; no job was submitted. Allowed: a smaller grid at that key, "
            "a partition with larger nodes (PCAST_SLURM_PARTITION, PCAST_SLURM_GPU_PARTITION), or "
            "--set-resources RULE:mem_mb=N (docs/slurm.md)")


def parse_squeue(text: str) -> list[dict]:
    """``squeue`` output in :data:`SQUEUE`'s format -> {id, comment, reason, cpus, mem, submit, workdir}."""
    keys = ("id", "comment", "reason", "cpus", "mem", "submit", "workdir")
    rows = []
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) == len(keys):
            rows.append(dict(zip(keys, (f.strip() for f in fields))))
    return rows


def _stuck_reason(reason: str) -> bool:
    """A reason that waiting will not clear; ReqNodeNotAvail only when no node is named unavailable
    (the request matches no node, rather than nodes that are down for now)."""
    head, _, rest = reason.partition(",")
    if head.strip() == "ReqNodeNotAvail":
        return rest.strip() in ("", "UnavailableNodes:")
    return head.strip() in STUCK_REASONS


def stuck(rows: Iterable[Mapping], workdir: str, since: str) -> list[dict]:
    """This run's pending jobs (this working directory, submitted at or after ``since``, an ISO time
    as squeue prints it, comment ``rule_...``) whose reason will not clear."""
    real = os.path.realpath(workdir)
    return [dict(r) for r in rows
            if r["comment"].startswith("rule_") and os.path.realpath(r["workdir"]) == real
            and r["submit"] >= since and _stuck_reason(r["reason"])]


def stuck_message(row: Mapping) -> str:
    """What the run says when it cancels a job that cannot start."""
    return (f"SLURM job {row['id']} ({row['comment']}) cannot start: squeue's reason is '{row['reason']}' "
            f"(it asks for {row['cpus']} CPUs and {row['mem']} of memory), which waiting will not clear; "
            "cancelled it, and the run stops. Ask for less (--set-threads, --set-resources) or name a "
            "partition whose nodes can hold it (docs/slurm.md)")


# ----------------------------------------------------------------------------- the profile's environment

#: The environment variables workflow/profiles/slurm reads (name, what it holds, what empty means).
SLURM_ENV = (
    ("PCAST_SLURM_ACCOUNT", "the account to charge", "the executor plugin guesses your default account"),
    ("PCAST_SLURM_PARTITION", "the partition of every job", "the cluster's default partition"),
    ("PCAST_SLURM_GPU_PARTITION", "the partition of the kernel jobs, which then ask for one GPU each",
     "no job asks for a GPU; kernel jobs run on PCAST_SLURM_PARTITION"),
)


def slurm_env_error(environ: Mapping[str, str]) -> str | None:
    """The message to stop a run under the ``slurm`` executor with, or None when all are set.

    workflow/profiles/slurm puts ``'$NAME'`` into resource values; Snakemake leaves an unset
    variable as the literal text, which SLURM would then be handed as an account or partition.
    """
    missing = [(name, what, empty) for name, what, empty in SLURM_ENV if name not in environ]
    if not missing:
        return None
    lines = "; ".join(f"{name} ({what}; empty: {empty})" for name, what, empty in missing)
    return (f"the SLURM profile reads its account and partitions from the environment, and "
            f"{', '.join(m[0] for m in missing)} {'is' if len(missing) == 1 else 'are'} not set. Set each, "
            f"empty allowed: {lines}. Example: export PCAST_SLURM_ACCOUNT= PCAST_SLURM_PARTITION=cpu "
            "PCAST_SLURM_GPU_PARTITION=  (README, Scale-out)")
