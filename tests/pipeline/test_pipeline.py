"""The Snakemake pipeline end to end on the smoke preset: determinism, resume, partial reruns.

Every workflow run happens in a temporary copy of the repository (tracked and untracked-but-not-
ignored files, see :func:`copy_repo`), never in the working tree.

* the session's smoke run (``--cores 2``, the ``smoke_run`` fixture of ``conftest.py``) and a
  clean run with ``--cores 1`` give byte-identical tidy tables and byte-identical figure data
  (every CSV under ``results/tidy`` and ``figures/``);
* a run whose snakemake process group is SIGKILLed mid-way, then unlocked (``--unlock``, as
  Snakemake asks after a kill) and started again, completes with the same tidy tables;
* dry runs (``-n``) after a complete run prove the partial reruns: nothing to do; a changed grid
  reruns only that experiment's jobs; a changed script reruns only the rules that use it; a
  single table is a target that runs only what it needs (the plot-only rerun is in
  ``test_figures``);
* ``snakemake --lint`` is clean, the Snakemake files are snakefmt-formatted, the report builds.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from pcast import contract
from pcast.host import files
from pcast.pipeline import config, inputs, runs, tables

from repo_copy import copy_repo

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake not installed")

SMOKE = ["--config", "preset=smoke"]
MY_RULES = {"inputs", "sweep_shard", "tidy_table", "conformance_shard"}
SMK_FILES = ["Snakefile", "workflow/"]


def smk(cwd: Path, *args: str, check: bool = True, timeout: int = 600) -> subprocess.CompletedProcess:
    res = subprocess.run(["snakemake", *args, *SMOKE], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({res.returncode}):\n{res.stdout[-6000:]}\n"
                             f"{res.stderr[-6000:]}")
    return res


def jobs(dry_run_output: str) -> list[dict]:
    """Jobs listed by ``snakemake -n``: rule, wildcards and reason of each."""
    found = []
    for block in re.split(r"\n(?=\[[^\]]+\]\n(?:local)?rule )", "\n" + dry_run_output):
        m = re.search(r"^(?:local)?rule (\w+):$", block, re.M)
        if not m:
            continue
        wc = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        reason = re.search(r"^\s+reason: (.*)$", block, re.M)
        wildcards = dict(kv.split("=", 1) for kv in wc.group(1).split(", ")) if wc else {}
        found.append({"rule": m.group(1), "wildcards": wildcards, "reason": reason.group(1) if reason else ""})
    return found


def touch_later(path: Path) -> None:
    t = time.time() + 5
    os.utime(path, (t, t))


# ---------------------------------------------------------------------------------------------
# a complete run


@pytest.mark.smoke_reader
def test_smoke_run_writes_complete_tables(smoke_run):
    cfg = config.resolve_preset({**yaml.safe_load((smoke_run / "config.yaml").read_text()), "preset": "smoke"})
    for name in contract.EXPERIMENTS:
        text = (smoke_run / "results/tidy" / f"{name}.csv").read_text()
        lines = text.splitlines()
        cols = contract.CONFORMANCE_COLUMNS if name == contract.CONFORMANCE else contract.TIDY_COLUMNS
        assert lines[0] == ",".join(cols)
        assert len(lines) - 1 == config.expected_rows(name, cfg["experiments"][name], experiments=cfg["experiments"],
                                                      policies=cfg.get("policies"))
        assert (smoke_run / "results/timing" / f"{name}.csv").exists()
    # backend actually run is recorded; on a machine without an FP8 GPU the log says so plainly
    log = (smoke_run.parent / "snakemake.log").read_text()
    tidy = (smoke_run / "results/tidy/collapse.csv").read_text()
    if ",emulator," in tidy:
        assert "ran on the EMULATOR" in log
    conf = (smoke_run / "results/tidy/conformance.csv").read_text()
    if "triton-interpreted" in conf:
        assert "ran INTERPRETED" in log
    with open(smoke_run / "results/tidy/conformance.csv", newline="") as fh:
        unexplained = [r for r in csv.DictReader(fh) if r["explained"] != "True"]
    assert not unexplained, f"kernel and emulator differ beyond what rounding explains: {unexplained}"
    checks = {line.split(",")[0] for line in conf.splitlines()[1:]}
    assert checks == {"kernel", "engine"}  # the multi-call engine is checked as well as the kernel
    # every job wrote its log and benchmark; no temporary files are left anywhere
    assert list((smoke_run / "results/logs").rglob("*.log"))
    assert list((smoke_run / "results/benchmarks").rglob("*.tsv"))
    assert not [p for p in (smoke_run / "results").rglob("*.tmp")]
    # inputs: Δ-free bases in safetensors, far below the 1 GB budget
    sizes = [p.stat().st_size for p in (smoke_run / "results/inputs").rglob("*.safetensors")]
    assert sizes and sum(sizes) < 50e6


def test_nothing_to_do_after_a_complete_run(smoke_run):
    res = smk(smoke_run, "-n")
    assert "Nothing to be done" in res.stdout, res.stdout


# ---------------------------------------------------------------------------------------------
# determinism and resume


@pytest.mark.smoke_reader
def test_two_clean_runs_are_byte_identical_with_1_and_2_cores(smoke_run, tmp_path):
    """A clean 1-core run of the tidy tables against the 2-core smoke run. The core count changes only
    the order in which the shard and merge jobs run; every later job is one single-threaded script of
    files this compares, and their outputs are compared across two separately scheduled clean runs by
    the SLURM test (tests/cluster, all tidy, statistics, figure, table and verdict files)."""
    tidy = sorted(str(p.relative_to(smoke_run)) for p in (smoke_run / "results/tidy").glob("*.csv"))
    names = {*contract.EXPERIMENTS, contract.POLICY_EXPERIMENT, contract.FP4_EXPERIMENT}
    assert {f"results/tidy/{n}.csv" for n in names} <= set(tidy)
    b = copy_repo(tmp_path / "b")
    smk(b, "--cores", "1", *tidy)
    assert sorted(str(p.relative_to(b)) for p in (b / "results/tidy").glob("*.csv")) == tidy
    for t in tidy:
        assert (b / t).read_bytes() == (smoke_run / t).read_bytes(), f"{t} differs between --cores 2 and --cores 1"
    shards = sorted(str(p.relative_to(b)) for p in (b / "results/inputs").rglob("shard*.safetensors"))
    assert shards
    for t in shards:  # the input jobs of two runs: the same bytes, metadata included
        assert (b / t).read_bytes() == (smoke_run / t).read_bytes(), f"{t} differs between two runs"


@pytest.mark.smoke_reader
def test_resume_after_sigkill_gives_the_same_tables(smoke_run, tmp_path):
    c = copy_repo(tmp_path / "c")
    tidy = [f"results/tidy/{n}.csv" for n in contract.EXPERIMENTS]  # the tidy tables only, to save time
    proc = subprocess.Popen(["snakemake", "--cores", "2", *tidy, *SMOKE], cwd=c, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            if list((c / "results/shards").rglob("shard*.csv")) if (c / "results/shards").exists() else []:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)  # snakemake and the jobs it started
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    missing = [n for n in contract.EXPERIMENTS if not (c / "results/tidy" / f"{n}.csv").exists()]
    assert missing, "the run was not interrupted mid-way"
    smk(c, "--unlock")
    smk(c, "--cores", "2", *tidy)
    for t in tidy:
        assert (c / t).read_bytes() == (smoke_run / t).read_bytes(), f"{t} differs after kill and resume"
    assert not [p for p in (c / "results").rglob("*.tmp")]


def test_a_rewrite_removes_the_temporary_left_by_a_killed_writer(tmp_path):
    stale = tmp_path / ".a.csv.k1ll3d.tmp"
    stale.write_text("partial")
    neighbour = tmp_path / ".b.csv.w0rk1n.tmp"  # another output's writer, still at work
    neighbour.write_text("partial")
    files.atomic_write_text(tmp_path / "a.csv", "x\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".b.csv.w0rk1n.tmp", "a.csv"]
    assert (tmp_path / "a.csv").read_text() == "x\n"


# ---------------------------------------------------------------------------------------------
# partial reruns (dry runs after the complete run)


def test_changing_one_grid_reruns_only_that_experiment(smoke_run, tmp_path):
    override = tmp_path / "grid.yaml"
    override.write_text(yaml.safe_dump({"experiments": {"collapse": {"delta": {"start": 0, "stop": 16, "step": 2}}}}))
    listed = jobs(smk(smoke_run, "-n", "--configfile", str(override)).stdout)
    mine = [j for j in listed if j["rule"] in MY_RULES]
    assert {(j["rule"], j["wildcards"]["experiment"]) for j in mine} == {("sweep_shard", "collapse"),
                                                                          ("tidy_table", "collapse")}
    for j in listed:
        if j["rule"] == "sweep_shard":
            assert j["reason"].startswith("Params have changed"), j
        elif j["rule"] != "all":  # everything else reruns only because its input is being remade
            assert j["reason"].startswith("Input files updated by another job"), j


def test_changing_the_tost_margin_reruns_only_the_jobs_that_read_it(smoke_run, tmp_path):
    """Each statistics job's params hold only the keys it reads (pcast.analysis.registry.STATISTICS_READS): a
    new TOST margin reruns stats_paired and the jobs that read it or its output, no other statistics job."""
    from pcast.analysis import registry

    override = tmp_path / "margin.yaml"
    override.write_text(yaml.safe_dump({"statistics": {"tost_margin": 0.05}}))
    listed = jobs(smk(smoke_run, "-n", "--configfile", str(override)).stdout)
    by_params = {j["rule"] for j in listed if "Params have changed" in j["reason"]}
    readers = {f"stats_{k}" if not k.startswith("table_") else k for k, keys in registry.STATISTICS_READS.items()
               if "tost_margin" in keys}
    assert readers == {"stats_paired", "table_paired_tests"}
    # claims reads the statistics section for its robustness tables; a job also downstream of paired.csv may list
    # only "Input files updated" (Snakemake names one reason first)
    assert "stats_paired" in by_params and by_params <= readers | {"claims"}, listed
    rules = {j["rule"] for j in listed}
    assert not {r for r in rules if r.startswith("stats_")} - {"stats_paired"}, rules
    assert not {"inputs", "sweep_shard", "tidy_table", "conformance_shard"} & rules
    for j in listed:
        if j["rule"] not in by_params | {"all"}:
            assert j["reason"].startswith("Input files updated by another job"), j


def test_changing_a_script_reruns_only_the_rules_that_use_it(smoke_run):
    merge = smoke_run / "workflow/scripts/tidy_table.py"
    old = merge.stat()
    touch_later(merge)
    try:
        listed = jobs(smk(smoke_run, "-n").stdout)
    finally:
        os.utime(merge, ns=(old.st_atime_ns, old.st_mtime_ns))
    direct = {j["rule"] for j in listed if not j["reason"].startswith("Input files updated by another job")}
    assert direct - {"all"} == {"tidy_table"}, listed
    assert {j["wildcards"]["experiment"] for j in listed if j["rule"] == "tidy_table"} == \
        set(contract.EXPERIMENTS) | {contract.POLICY_EXPERIMENT, contract.FP4_EXPERIMENT, contract.DECODE_EXPERIMENT,
                                     contract.DYNAMIC_EXPERIMENT}
    assert not {"inputs", "sweep_shard", "conformance_shard"} & {j["rule"] for j in listed}


def test_a_single_table_is_a_target_that_runs_only_what_it_needs(tmp_path):
    clean = copy_repo(tmp_path / "clean")
    listed = jobs(smk(clean, "-n", "results/tidy/scales.csv").stdout)
    assert {(j["rule"], j["wildcards"].get("experiment")) for j in listed} == {
        ("inputs", "scales"), ("sweep_shard", "scales"), ("tidy_table", "scales")}
    listed = jobs(smk(clean, "-n", "results/tidy/conformance.csv").stdout)  # the same merge rule
    assert {(j["rule"], j["wildcards"].get("experiment")) for j in listed} == {
        ("inputs", "conformance"), ("conformance_shard", "conformance"), ("tidy_table", "conformance")}


def test_a_deleted_table_is_remade_from_its_shards(smoke_run, tmp_path):
    """On a copy of the smoke run (its readers on other workers keep the table): Snakemake's metadata
    and the outputs' modification times travel with the copy."""
    copy = tmp_path / "copy"
    shutil.copytree(smoke_run, copy, symlinks=True)
    (copy / "results/tidy/threshold.csv").unlink()
    listed = jobs(smk(copy, "-n").stdout)
    mine = {(j["rule"], j["wildcards"].get("experiment")) for j in listed if j["rule"] in MY_RULES}
    assert mine == {("tidy_table", "threshold")}


# ---------------------------------------------------------------------------------------------
# lint, format, report


def test_lint_reports_nothing(smoke_run):
    res = smk(smoke_run, "--lint")
    assert "Congratulations, your workflow is in a good condition" in res.stdout + res.stderr, res.stdout


@pytest.mark.skipif(shutil.which("snakefmt") is None, reason="snakefmt not installed")
def test_snakemake_files_are_snakefmt_formatted():
    res = subprocess.run(["snakefmt", "--check", *SMK_FILES], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_report_builds_with_captions(smoke_run, tmp_path):
    smk(smoke_run, "--report", str(tmp_path / "report.html"), timeout=300)
    html = (tmp_path / "report.html").read_text(errors="replace")
    assert "Tidy results of the collapse experiment" in html
    assert "Triton kernel against the emulator" in html
    # one tidy_table rule for every experiment; the conformance table keeps its own label
    assert '"table": "Triton kernel vs emulator"' in html and '"table": "tidy results"' in html


# ---------------------------------------------------------------------------------------------
# library pieces without Snakemake


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "t.csv"
    with pytest.raises(RuntimeError):
        with files.atomic_path(target) as tmp:
            Path(tmp).write_text("partial")
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_gives_the_usual_permissions(tmp_path):
    target = tmp_path / "t.csv"
    files.atomic_write_text(target, "x\n")
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


def test_merge_rejects_duplicates_and_wrong_counts(tmp_path):
    row = {c: 0 for c in contract.TIDY_COLUMNS} | {"experiment": "x", "causal": False, "order": "forward",
                                                   "fmt": "e4m3fn", "rowsum": "unrounded", "combo": "forward S=1",
                                                   "backend": "emulator", "delta": 1.0, "scale": 1.0}
    a = tmp_path / "a.csv"
    files.atomic_write_text(a, tables.csv_text(contract.TIDY_COLUMNS, [row]))
    with pytest.raises(RuntimeError, match="duplicate"):
        tables.merge_tidy([a, a], tmp_path / "out.csv")
    with pytest.raises(RuntimeError, match="expected 2"):
        tables.merge_tidy([a], tmp_path / "out.csv", expected=2)
    assert not (tmp_path / "out.csv").exists()


def test_sweep_shard_rows_on_a_tiny_grid(tmp_path):
    exp = {"seeds": 2, "seeds_per_shard": 2, "shapes": [{"n": 64, "d": 16, "block_m": 16, "block_n": 16}],
           "causal": [False], "ksink": [4], "sigma": [1.0], "sink_v_scale": [0.0, 1.0], "delta": [0.0, 12.0],
           "order": ["forward", "reverse"], "scale": [1, 256], "backend": "emulator"}
    spec = config.shard_spec("collapse", exp, 0)
    inputs.write_inputs(config.inputs_spec("collapse", exp, 0), tmp_path / "in.safetensors")
    runs.run_sweep_shard(spec, tmp_path / "in.safetensors", tmp_path / "rows.csv", tmp_path / "t.csv")
    tables.merge_tidy([tmp_path / "rows.csv"], tmp_path / "tidy.csv", expected=config.expected_rows("collapse", exp))
    import pandas as pd

    df = pd.read_csv(tmp_path / "tidy.csv")
    assert list(df.columns) == list(contract.TIDY_COLUMNS)
    assert (df.backend == "emulator").all() and (df.terms == 64 * 60).all() and (df.terms_sink == 64 * 4).all()
    strong = df[(df.delta == 12) & (df.sink_v_scale == 0)].set_index(["combo", "seed"])
    # C1/C2: forward S=1 loses most non-sink P values under a strong sink; reverse S=256 loses
    # none outside the sinks' own KV block (64 rows x the 12 non-sink keys of block 0)
    assert (strong.loc["forward S=1"].underflow_frac > 0.5).all()
    assert (strong.loc["reverse S=256"].underflow <= 64 * 12).all()
    assert (strong.loc["forward S=1"].mse > strong.loc["reverse S=256"].mse).all()
    again = tmp_path / "rows2.csv"
    runs.run_sweep_shard(spec, tmp_path / "in.safetensors", again, tmp_path / "t2.csv")
    assert again.read_bytes() == (tmp_path / "rows.csv").read_bytes()
