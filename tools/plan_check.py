"""The run plan's CPU-time estimate against a finished run's measured kernel and reference seconds.

    python tools/plan_check.py RUN_DIR [--preset smoke] [--config-json '{"experiments": ...}']

RUN_DIR is a checkout where ``snakemake --cores all`` ran (its ``results/timing/{experiment}.csv``: the
shards' ``reference_s + kernel_s``). The estimate is :func:`pcast.pipeline.plan.plan_rows` for RUN_DIR's
config.yaml under the preset, with this machine's calibration (made now if there is none), as the plan
printed before the run. Prints one line per estimated experiment with the ratio estimate / measured, and
exits 1 when a ratio lies outside ``--within`` (1.5 by default). Run it on an idle
machine: a busy one stretches the measured side, not the estimate.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import yaml

from pcast.pipeline import plan
from pcast.pipeline.config import deep_merge, resolve_preset


def measured_seconds(run_dir: Path, name: str) -> float | None:
    """Σ reference_s + kernel_s over the shards of ``results/timing/{name}.csv``, None without that file."""
    path = run_dir / "results" / "timing" / f"{name}.csv"
    if not path.exists():
        return None
    with open(path) as fh:
        return sum(float(r["reference_s"]) + float(r["kernel_s"]) for r in csv.DictReader(fh))


def compare(run_dir: Path, preset: str, cal: dict, extra: dict | None = None) -> list[dict]:
    """One row per experiment the plan estimates and the run measured: estimate, measured, ratio."""
    raw = yaml.safe_load((run_dir / "config.yaml").read_text())
    raw = deep_merge(raw, extra or {})
    raw["preset"] = preset
    rows = []
    for r in plan.plan_rows(resolve_preset(raw), cal):
        meas = measured_seconds(run_dir, r["experiment"])
        if r["cpu_s"] is None or not meas:
            continue
        rows.append({"experiment": r["experiment"], "estimate_s": r["cpu_s"], "measured_s": meas,
                     "ratio": r["cpu_s"] / meas})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--preset", default="default")
    ap.add_argument("--config-json", default=None, help="overrides merged over config.yaml, as --configfile would")
    ap.add_argument("--within", type=float, default=1.5)
    args = ap.parse_args(argv)
    if args.within < 1:
        ap.error(f"--within={args.within} is not allowed; allowed: a factor >= 1")
    rows = compare(args.run_dir, args.preset, plan.load_calibration(),
                   json.loads(args.config_json) if args.config_json else None)
    if not rows:
        print(f"no estimated experiment has timings under {args.run_dir / 'results' / 'timing'}", file=sys.stderr)
        return 1
    bad = 0
    for r in rows:
        ok = 1 / args.within <= r["ratio"] <= args.within
        bad += not ok
        print(f"{r['experiment']:<12} estimate {r['estimate_s']:9.3f} s  measured {r['measured_s']:9.3f} s  "
              f"ratio {r['ratio']:.2f}{'' if ok else '  OUTSIDE'}")
    print(f"{len(rows) - bad} of {len(rows)} within {args.within}x")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
