"""Measure a slice of the paper preset on this machine's CPU and check the run plan's estimate against it.

Usage (from the repository root)::

    python tools/paper_slice.py                       # one seed of each sweep-like experiment, 2 at a time
    python tools/paper_slice.py --experiments collapse --seeds 2 --jobs 1

For each experiment, the paper preset's grid (N = 4096, d = 128, its Δ grid and combinations) with
``seeds`` seeds in one shard: the run plan's estimate of its kernel and reference work
(:func:`pcast.pipeline.plan.plan_rows`, this machine's calibration), then the shard itself, as the
pipeline runs it (its inputs written, then :func:`pcast.pipeline.runs.run_sweep_shard`,
:func:`pcast.pipeline.policy_runs.run_policies_shard` or :func:`pcast.pipeline.fp4_runs.run_fp4_shard`, one
torch thread, a fresh process each,
``--jobs`` at a time, as ``snakemake --cores`` would). Measured: the kernel and reference seconds the
shard's timing table records. Prints one line per experiment with the estimate, the measurement,
their ratio and the paper preset's whole estimate for that experiment; exits 1 when a ratio is
outside [1/1.5, 1.5] (the estimate within a factor of 1.5).

The conformance check (the Triton interpreter) and the real model are not estimated by the plan, so
not measured here.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = ("collapse", "scales", "threshold", "policies", "fp4")
BAND = 1.5


def slice_config(name: str, seeds: int, preset: str = "paper") -> tuple[dict, dict]:
    """The preset's merged config, and experiment ``name`` cut to ``seeds`` seeds in one shard."""
    from pcast.pipeline import config as pconfig

    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    raw["preset"] = preset
    cfg = pconfig.resolve_preset(raw)
    exp = dict(cfg["experiments"][name], seeds=seeds, seeds_per_shard=seeds)
    return cfg, exp


def child(name: str, seeds: int, out: Path, preset: str) -> None:
    """Write the slice's inputs and run its one shard (a fresh process: one torch thread)."""
    from pcast.pipeline import config as pconfig
    from pcast.pipeline.fp4_runs import run_fp4_shard
    from pcast.pipeline.inputs import write_inputs
    from pcast.pipeline.policy_runs import run_policies_shard
    from pcast.pipeline.runs import run_sweep_shard

    cfg, exp = slice_config(name, seeds, preset)
    inputs = out / f"{name}.safetensors"
    write_inputs(pconfig.inputs_spec(name, exp, 0), inputs)
    spec = pconfig.shard_spec(name, exp, 0, policies=cfg.get("policies"))
    run = {"policies": run_policies_shard, "fp4": run_fp4_shard}.get(name, run_sweep_shard)
    run(spec, inputs, out / f"{name}.csv", out / f"{name}.timing.csv", threads=1, n_shards=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiments", nargs="+", default=list(SWEEPS), choices=SWEEPS)
    ap.add_argument("--seeds", type=int, default=1, help="seeds of each slice (default 1)")
    ap.add_argument("--jobs", type=int, default=2, help="slices run at a time (default 2)")
    ap.add_argument("--preset", default="paper", help="the preset to slice (default paper; smoke for a quick check)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help="folder for the slices' files (default: a temporary one)")
    args = ap.parse_args(argv)
    if args.seeds < 1 or args.jobs < 1:
        ap.error("--seeds and --jobs must be integers >= 1")
    if args.child:
        child(args.child, args.seeds, args.out, args.preset)
        return 0

    from pcast.pipeline import plan

    cal = plan.load_calibration()
    out = args.out or Path(tempfile.mkdtemp(prefix="paper-slice-"))
    out.mkdir(parents=True, exist_ok=True)
    estimates = {}
    for name in args.experiments:
        cfg, exp = slice_config(name, args.seeds, args.preset)
        estimates[name] = tuple(plan._cpu_s(name, e, cal, cfg.get("policies")) for e in (exp, cfg["experiments"][name]))
    t0 = time.perf_counter()
    pending, running = list(args.experiments), []
    while pending or running:
        while pending and len(running) < args.jobs:
            name = pending.pop(0)
            cmd = [sys.executable, __file__, "--child", name, "--seeds", str(args.seeds), "--out", str(out),
                   "--preset", args.preset]
            running.append((name, subprocess.Popen(cmd, cwd=ROOT)))
        time.sleep(1)
        for name, proc in list(running):
            if proc.poll() is not None:
                running.remove((name, proc))
                if proc.returncode:
                    print(f"{name}: the slice failed (exit {proc.returncode})", file=sys.stderr)
                    return 1
    wall = time.perf_counter() - t0
    ok, report = True, {}
    print(f"{args.preset} preset slice, {args.seeds} seed(s) each, {args.jobs} at a time, {wall:.0f} s wall "
          f"(calibration: {plan.calibration_path()})")
    print(f"{'experiment':<11} {'runs':>7} {'estimate s':>11} {'measured s':>11} {'est/meas':>9} "
          f"{'whole preset, estimated':>24}")
    for name in args.experiments:
        with open(out / f"{name}.timing.csv") as fh:
            t = next(csv.DictReader(fh))
        measured = float(t["kernel_s"]) + float(t["reference_s"])
        est, whole = estimates[name]
        ratio = est / measured
        ok &= 1 / BAND <= ratio <= BAND
        report[name] = {"runs": int(t["runs"]), "estimate_s": est, "measured_s": measured, "wall_s": float(t["wall_s"]),
                        "ratio": ratio, "whole_preset_estimate_s": whole}
        print(f"{name:<11} {int(t['runs']):>7,} {est:>11.1f} {measured:>11.1f} {ratio:>9.2f} "
              f"{whole / 3600:>20.2f} CPU h")
    total = sum(r["whole_preset_estimate_s"] for r in report.values())
    print(f"{args.preset} preset, these experiments: ~{total / 3600:.2f} CPU core-hours estimated "
          f"(kernel and reference work; one core each job)")
    (out / "paper_slice.json").write_text(json.dumps(report, indent=1, sort_keys=True))
    print("within the factor of 1.5" if ok else f"OUTSIDE the factor of {BAND}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
