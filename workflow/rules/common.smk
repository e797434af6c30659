# Config handling and helper functions shared by every rule file (no rules in this file).
#
# Order of events, all before any job is scheduled:
#   0. the `pcast` the rules' scripts import must have this checkout's code (pcast.pipeline.provenance),
#      else stop with the command that fixes it;
#   1. validate config.yaml (plus --config / --configfile overrides) against the JSON schema;
#   2. merge presets[preset] over it (--config preset=smoke|default|paper), then the command-line
#      overrides again (so --config/--configfile values beat the preset's), and validate again,
#      the statistics and claims sections against their schema too;
#   3. the checks the schemas cannot express (pcast.pipeline.config.check_config; the policies
#      experiment's policy names, variants and the user's `policies:` section included; every
#      combination, scale and variant that `statistics:` and `claims:` name is one an experiment
#      runs, bands ordered: pcast.pipeline.claims_config);
#   4. in the scheduling process: the largest job of each experiment must fit in this machine's
#      memory, then the run plan is printed (pcast.pipeline.plan; dry runs too). A run bound for
#      SLURM (pcast.pipeline.slurm.bound_for_slurm) checks each job's mem_mb against the largest
#      node of its partition (sinfo) instead, and prints what each job asks for.
# Each rule's mem_mb and runtime come from the plan (pcast.pipeline.resources): SHARD_RES, INPUTS_RES,
# fixed_resources(); under SLURM a job pending for a reason that will not clear is cancelled and
# reported (watch_pending, started in onstart).
# Any failure raises WorkflowError naming the config key and what is allowed; nothing is written.
#
# Shared with every rules file -- EXPERIMENT_CFG (the config sections), SWEEPS, CONFORMANCE,
# POLICY_EXPERIMENT, FP4_EXPERIMENT, DYNAMIC_EXPERIMENT, DECODE_EXPERIMENT, SHARD_EXPERIMENTS (the sweeps, policies,
# fp4, dynamic and decode,
# whose shards sweep_shard runs),
# ALL_EXPERIMENTS (names from pcast.contract), STATS_CFG, CRITERIA; library_code() (every rule's `code`
# param: the hash of the library modules its script runs); input functions shard_files(),
# shard_spec, inputs_spec, expected_rows, gpu_resource, category, tidy_labels, realmodel_spec; the
# realmodel experiment's REALMODEL_CFG, REALMODEL_INPUTS, REALMODEL_DIR, REALMODEL_LAYERS; paths TIDY,
# POLICY_TIDY (results/tidy/policies.csv), FP4_TIDY (results/tidy/fp4.csv), DYNAMIC_TIDY (results/tidy/dynamic.csv),
# DECODE_TIDY (results/tidy/decode.csv), TIDY_TABLES, TIMING_TABLES, STATS_DIR, ANALYSIS_LOGS,
# ANALYSIS_BENCH; outputs figure_outputs(),
# table_outputs(), verdict_outputs(), ANALYSIS_TARGETS (every figure, table and the verdict, from
# the claims registry pcast.analysis.registry).

import importlib.util
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger as snakemake_logger
from snakemake.utils import min_version

# This checkout, and its own kernels/pipeline/provenance.py, loaded from its file: the check below
# must work when the imported `pcast` is another checkout's (or missing).
CHECKOUT = Path(workflow.basedir).resolve()
_spec = importlib.util.spec_from_file_location(
    "pcast_provenance", CHECKOUT / "kernels" / "pipeline" / "provenance.py"
)
provenance = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(provenance)


def check_checkout():
    """Stop unless the `pcast` the rules' scripts import has this checkout's code (the message
    says how to fix it). Snakemake puts this folder on its own path only, not on a job's.
    """
    imported = provenance.imported_by_jobs(sys.executable)
    message = provenance.checkout_mismatch(CHECKOUT, imported)
    if message:
        raise WorkflowError(f"pcast-fp8: {message}")


check_checkout()

from pcast import contract
from pcast.analysis import registry
from pcast.pipeline import config as pconfig
from pcast.pipeline import plan
from pcast.pipeline import resources
from pcast.pipeline import slurm
from pcast.pipeline import validation as pvalidation

min_version("9.0")


def load_config(cfg, overrides):
    """Validate, merge the preset (then the command line again), validate, check; return the
    result (pcast.pipeline.validation.load_config, which the tests run without Snakemake).
    """
    try:
        return pvalidation.load_config(
            cfg, overrides, os.path.join(workflow.basedir, "workflow", "schemas")
        )
    except pconfig.ConfigError as e:
        raise WorkflowError(str(e)) from None


_merged = load_config(config, workflow.config_settings.overwrite_config)
config.clear()
config.update(_merged)


def _sinfo():
    """(partition -> nodes, default partition) from sinfo, or None where sinfo does not answer."""
    try:
        proc = subprocess.run(slurm.SINFO, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return slurm.parse_sinfo(proc.stdout) if proc.returncode == 0 else None


def check_cluster(cfg, cal):
    """Refuse, before any job, a job that no node of its SLURM partition can hold; print the requests."""
    rows = resources.resource_table(cfg, cal)
    print(resources.format_requests(rows), file=sys.stderr)
    nodes = _sinfo()
    if nodes is None:
        print(
            "sinfo does not answer here: the jobs were not checked against the cluster's nodes",
            file=sys.stderr,
        )
        return
    overrides = workflow.resource_settings.overwrite_resources
    message = slurm.refusal(resources.cluster_jobs(rows, os.environ, overrides), *nodes)
    if message:
        raise WorkflowError(
            f"Invalid configuration (preset {cfg.get('preset')!r}): {message}"
        )


def deployed_fetched():
    """The deployed-kernel wheels in the cache (pcast.deployed): a param, so that fetching them reruns T10."""
    from pcast.deployed.cache import missing
    from pcast.deployed.registry import WHEELS

    gone = set(missing())
    return ", ".join(k for k in WHEELS if k not in gone) or "none"


def show_plan(cfg, cal):
    """Refuse a grid whose largest job cannot fit in this machine's memory (under SLURM: in the
    cluster's largest node, check_cluster), then print the run plan (runs, shards, estimated CPU
    time, peak memory per experiment: pcast.pipeline.plan).
    """
    mem = plan.machine_memory()
    if BOUND_FOR_SLURM:
        check_cluster(cfg, cal)
    else:
        try:
            plan.check_memory(
                plan.plan_rows(cfg, None) + [plan.tensorcore_row(cfg)], mem
            )
        except pconfig.ConfigError as e:
            raise WorkflowError(
                f"Invalid configuration (preset {cfg.get('preset')!r}): {e}"
            ) from None
    rows = plan.plan_rows(cfg, cal) + [plan.tensorcore_row(cfg)]
    if "deployed" in cfg["experiments"]:
        tokens = int(cfg["experiments"]["realmodel"]["tokens"])
        rows.append(
            plan.deployed_row(cfg, keys=tokens, fetched=deployed_fetched() != "none")
        )
    print(plan.format_plan(rows, cfg["preset"], mem, cal), file=sys.stderr)


# Once, in the process that schedules (not in a cluster job's own Snakemake), dry runs included; a
# job's own Snakemake does not calibrate, and asks for the runtime floor (SLURM has its -t already).
BOUND_FOR_SLURM = workflow.is_main_process and slurm.bound_for_slurm(sys.argv[1:])
CALIBRATION = plan.load_calibration() if workflow.is_main_process else None
if workflow.is_main_process:
    show_plan(config, CALIBRATION)

SHARD_RES = resources.shard_resources(config, CALIBRATION)
INPUTS_RES = resources.inputs_resources(config)


def shard_mem_mb(wildcards):
    return SHARD_RES[wildcards.experiment]["mem_mb"]


def shard_runtime(wildcards):
    return SHARD_RES[wildcards.experiment]["runtime"]


def inputs_mem_mb(wildcards):
    return INPUTS_RES[wildcards.experiment]["mem_mb"]


def fixed_resources(rule_name):
    """mem_mb and runtime of a rule the plan does not model (pcast.pipeline.resources.UNMODELLED)."""
    res = resources.rule_resources(rule_name)
    return {"mem_mb": res["mem_mb"], "runtime": res["runtime"]}


PRESET = config["preset"]
EXPERIMENT_CFG = config["experiments"]
SWEEPS = list(contract.SWEEP_EXPERIMENTS)
CONFORMANCE = contract.CONFORMANCE
POLICY_EXPERIMENT = contract.POLICY_EXPERIMENT
FP4_EXPERIMENT = contract.FP4_EXPERIMENT
DECODE_EXPERIMENT = contract.DECODE_EXPERIMENT
DYNAMIC_EXPERIMENT = contract.DYNAMIC_EXPERIMENT
SHARD_EXPERIMENTS = SWEEPS + [
    POLICY_EXPERIMENT,
    FP4_EXPERIMENT,
    DYNAMIC_EXPERIMENT,
    DECODE_EXPERIMENT,
]
ALL_EXPERIMENTS = list(contract.EXPERIMENTS) + [
    POLICY_EXPERIMENT,
    FP4_EXPERIMENT,
    DYNAMIC_EXPERIMENT,
    DECODE_EXPERIMENT,
]


def shard_ids(experiment):
    return [f"{i:03d}" for i in range(pconfig.n_shards(EXPERIMENT_CFG[experiment]))]


def shard_files(pattern):
    """Input function: one file per shard of the wildcard's experiment, from a pattern with {shard}."""

    def files(wildcards):
        return expand(
            pattern,
            experiment=wildcards.experiment,
            shard=shard_ids(wildcards.experiment),
        )

    return files


def shard_spec(wildcards):
    """The shard job's params: everything it computes, as canonical JSON (a params rerun trigger)."""
    spec = pconfig.shard_spec(
        wildcards.experiment,
        EXPERIMENT_CFG[wildcards.experiment],
        int(wildcards.shard),
        policies=config.get("policies"),
        experiments=EXPERIMENT_CFG,
    )
    return pconfig.spec_json(spec)


def inputs_spec(wildcards):
    spec = pconfig.inputs_spec(
        wildcards.experiment, EXPERIMENT_CFG[wildcards.experiment], int(wildcards.shard)
    )
    return pconfig.spec_json(spec)


def expected_rows(wildcards):
    return pconfig.expected_rows(
        wildcards.experiment,
        EXPERIMENT_CFG[wildcards.experiment],
        experiments=EXPERIMENT_CFG,
        policies=config.get("policies"),
    )


def gpu_resource(wildcards):
    """1 where this job would run on a CUDA GPU here (the default profile allows one at a time)."""
    experiment = wildcards.experiment
    return pconfig.gpu_jobs(
        EXPERIMENT_CFG[experiment], kernel=experiment == CONFORMANCE
    )


def category(wildcards):
    """Report category of a tidy table: the claims built from it (pcast.analysis.registry)."""
    return registry.EXPERIMENT_CATEGORY[wildcards.experiment]


def tidy_labels(wildcards):
    """Report labels of a tidy table: its experiment, and what the table compares."""
    experiment = wildcards.experiment
    what = "Triton kernel vs emulator" if experiment == CONFORMANCE else "tidy results"
    return {"experiment": experiment, "table": what}


TIDY = "results/tidy/{}.csv"
POLICY_TIDY = TIDY.format(POLICY_EXPERIMENT)
FP4_TIDY = TIDY.format(FP4_EXPERIMENT)
DYNAMIC_TIDY = TIDY.format(DYNAMIC_EXPERIMENT)
DECODE_TIDY = TIDY.format(DECODE_EXPERIMENT)
TIDY_TABLES = expand("results/tidy/{experiment}.csv", experiment=ALL_EXPERIMENTS)
TIMING_TABLES = expand("results/timing/{experiment}.csv", experiment=ALL_EXPERIMENTS)

# The realmodel experiment (workflow/rules/realmodel.smk): its section, paths and layers.
REALMODEL_CFG = EXPERIMENT_CFG[contract.REALMODEL]
REALMODEL_INPUTS = "results/inputs/realmodel"
REALMODEL_DIR = "results/realmodel"
REALMODEL_LAYERS = list(range(REALMODEL_CFG["layers"]))


def library_code(script):
    """A rule's `code` param: the sha256 of the pcast modules workflow/scripts/<script>.py runs
    (pcast.pipeline.provenance), so that editing one reruns exactly the rules that use it.
    """
    return provenance.code_digest(
        CHECKOUT, CHECKOUT / "workflow" / "scripts" / f"{script}.py"
    )


def realmodel_user_tensors(wildcards):
    """The user's own tensors file (experiments.realmodel.tensors) as an input, so that a new file reruns the
    capture; none when the model is captured."""
    return [REALMODEL_CFG["tensors"]] if REALMODEL_CFG.get("tensors") else []


def realmodel_spec(stage):
    """The realmodel job's params: what it computes, as canonical JSON (a params rerun trigger)."""
    return pconfig.realmodel_spec(REALMODEL_CFG, config.get("policies"), stage)


# ----------------------------------------------------------------------------- analysis
# Statistics (results/stats/), figures, tables and the verdict (figures/). Every criterion
# lives in the `statistics:` and `claims:` sections, validated by load_config with the rest.

STATS_CFG = config["statistics"]
CRITERIA = config["claims"]
# config.yaml's statistics and claims sections under this run's preset, before the command line's overrides: the
# robustness tables show the default beside an overridden value
_DEFAULT_CFG = pconfig.resolve_preset(
    {
        **yaml.safe_load(
            Path(workflow.basedir, "config.yaml").read_text(encoding="utf-8")
        ),
        "preset": config["preset"],
    }
)
ANALYSIS_DEFAULTS = {
    "statistics": _DEFAULT_CFG["statistics"],
    "claims": _DEFAULT_CFG["claims"],
}
STATS_DIR = "results/stats"
ANALYSIS_LOGS = "results/logs/claims"
ANALYSIS_BENCH = "results/benchmarks/claims"


def figure_outputs(name):
    """PDF for the paper, PNG for the report (captioned, grouped by claim), data CSV beside them."""
    return {
        "pdf": f"figures/{name}.pdf",
        "png": report(
            f"figures/{name}.png",
            caption=f"../report/{name}.rst",
            category=registry.category(name),
            labels={"output": name, "kind": "figure"},
        ),
        "csv": f"figures/{name}.csv",
    }


def table_outputs(name):
    """CSV (shown in the report), LaTeX booktabs and Markdown."""
    return {
        "csv": report(
            f"figures/{name}.csv",
            caption=f"../report/{name}.rst",
            category=registry.category(name),
            labels={"output": name, "kind": "table"},
        ),
        "tex": f"figures/{name}.tex",
        "md": f"figures/{name}.md",
    }


def verdict_outputs():
    """figures/claims.md (shown in the report) and figures/claims.json."""
    name = registry.VERDICT
    return {
        "md": report(
            f"figures/{name}.md",
            caption=f"../report/{name}.rst",
            category=registry.category(name),
            labels={"output": name, "kind": "verdict"},
        ),
        "json": f"figures/{name}.json",
    }


ANALYSIS_TARGETS = (
    [f"figures/{n}.{ext}" for n in registry.FIGURES for ext in ("pdf", "png", "csv")]
    + [f"figures/{n}.{ext}" for n in registry.TABLES for ext in ("csv", "tex", "md")]
    + [f"figures/{registry.VERDICT}.{ext}" for ext in ("md", "json")]
)


def backend_note():
    """A plain sentence on where the sweeps and the conformance kernel will run on this machine."""
    notes = []
    for name in SHARD_EXPERIMENTS:
        backend = EXPERIMENT_CFG[name].get("backend", "auto")
        if backend == "auto" and not pconfig.gpu_jobs(EXPERIMENT_CFG[name]):
            notes.append(f"{name}: backend auto -> EMULATOR (no CUDA GPU found)")
        else:
            notes.append(f"{name}: backend {backend}")
    kernel = (
        "compiled" if pconfig.gpu_jobs({}, kernel=True) else "INTERPRETED on the CPU"
    )
    notes.append(f"conformance: Triton kernel {kernel}")
    return f"pcast-fp8 preset {PRESET!r}; " + "; ".join(notes)


#: Seconds between squeue polls for jobs that cannot start; a job is cancelled on its second sighting.
PENDING_POLL_S = 10


def watch_pending(workdir, since):
    """Poll squeue for this run's pending jobs whose reason will not clear (pcast.pipeline.slurm.stuck);
    report and cancel each seen twice in a row, so that the executor reports it failed and the run stops.
    """
    seen = set()
    while True:
        time.sleep(PENDING_POLL_S)
        try:
            proc = subprocess.run(
                slurm.SQUEUE, capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if proc.returncode != 0:
            continue
        now = {
            r["id"]: r
            for r in slurm.stuck(slurm.parse_squeue(proc.stdout), workdir, since)
        }
        for job_id in sorted(now.keys() & seen):
            print(slurm.stuck_message(now[job_id]), file=sys.stderr, flush=True)
            subprocess.run(["scancel", job_id], capture_output=True, timeout=60)
        seen = set(now)


class _NoAccountGuess(logging.Filter):
    """Drops the executor plugin's warnings about guessing an account when PCAST_SLURM_ACCOUNT is
    empty: its guess (sacct through a shell pipe it does not run in a shell) always fails with
    'sacct: invalid option', and the job goes without -A, which is what the empty variable asks for:
    SLURM charges the user's default account."""

    def filter(self, record):
        return not str(record.msg).startswith(slurm.ACCOUNT_GUESS_WARNINGS)


onstart:
    # The SLURM profile's account and partitions come from the environment: stop before any
    # job is submitted when one is not set (pcast.pipeline.slurm.SLURM_ENV). Then watch for jobs
    # that cannot start.
    if getattr(workflow.executor_plugin, "name", None) == "slurm":
        message = slurm.slurm_env_error(os.environ)
        if message:
            raise WorkflowError(message)
        if not os.environ.get("PCAST_SLURM_ACCOUNT"):
            snakemake_logger.addFilter(_NoAccountGuess())
        since = time.strftime("%Y-%m-%dT%H:%M:%S")
        threading.Thread(
            target=watch_pending, args=(os.getcwd(), since), daemon=True
        ).start()
    print(backend_note(), file=sys.stderr)
