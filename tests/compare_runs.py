"""Prove that a change left the pipeline's results byte-identical: run two commits, compare hashes.

Usage (from the repository root)::

    python tests/compare_runs.py --before e8c366c                 # HEAD against e8c366c, default preset
    python tests/compare_runs.py --before e8c366c --after HEAD --preset smoke --cores 2
    python tests/compare_runs.py --before-dir /tmp/a --after-dir /tmp/b   # two finished runs, no rerun

Each commit is checked out with ``git worktree add --detach`` into a temporary folder and run with
``snakemake --cores N --config preset=P`` there, with ``PYTHONPATH`` set to that checkout so that
its own ``kernels`` package is imported (not the one ``pip install -e`` points to). Compared, by
SHA-256: ``results/tidy/*.csv``, ``figures/*.csv``, ``figures/table_*`` and ``figures/claims.md``
(PDF and PNG are byte-stable too, but they are renderings of the CSVs compared here). Running
times live apart in ``results/timing/`` and are not compared.

Prints one line per file (hash before, hash after, same/DIFFERENT/missing) and the wall time of
each run; exits 1 when any file differs or is missing on one side, 0 when all are identical.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PATTERNS = ("results/tidy/*.csv", "figures/*.csv", "figures/table_*", "figures/claims.md")
ROOT = Path(__file__).resolve().parents[1]


def hashes(run_dir: Path) -> dict[str, str]:
    """SHA-256 of every compared output of a finished run, keyed by its path in the run."""
    found = {}
    for pattern in PATTERNS:
        for path in sorted(run_dir.glob(pattern)):
            found[str(path.relative_to(run_dir))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def run_commit(rev: str, where: Path, preset: str, cores: int) -> tuple[Path, float]:
    """Check ``rev`` out into ``where`` and run the whole pipeline there; return (tree, seconds)."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), rev], check=True,
                   capture_output=True, text=True)
    env = dict(os.environ, PYTHONPATH=str(where))
    start = time.perf_counter()
    proc = subprocess.run(["snakemake", "--cores", str(cores), "--config", f"preset={preset}"], cwd=where,
                          env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"snakemake failed at {rev} (in {where}):\n{proc.stderr[-4000:]}")
    return where, seconds


def compare(before: dict[str, str], after: dict[str, str]) -> tuple[list[str], int]:
    """Report lines and the number of files that differ or exist on one side only."""
    lines, bad = [], 0
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        state = "same" if a == b else ("missing" if a is None or b is None else "DIFFERENT")
        bad += state != "same"
        lines.append(f"{state:9s} {name:40s} {(a or '-')[:16]}  {(b or '-')[:16]}")
    return lines, bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", help="commit to compare against (e.g. the parent of a refactor)")
    ap.add_argument("--after", default="HEAD", help="commit to check (default HEAD)")
    ap.add_argument("--before-dir", type=Path, help="a finished run's folder instead of --before")
    ap.add_argument("--after-dir", type=Path, help="a finished run's folder instead of --after")
    ap.add_argument("--preset", default="default", help="config preset (default: default)")
    ap.add_argument("--cores", type=int, default=2, help="snakemake --cores (default 2)")
    args = ap.parse_args(argv)
    if args.before_dir is None and args.before is None:
        ap.error("give --before REV or --before-dir DIR")
    with tempfile.TemporaryDirectory(prefix="compare-runs-") as tmp:
        dirs = {}
        try:
            for side, rev, given in (("before", args.before, args.before_dir), ("after", args.after, args.after_dir)):
                if given is not None:
                    dirs[side] = given
                    continue
                dirs[side], seconds = run_commit(rev, Path(tmp) / side, args.preset, args.cores)
                print(f"{side}: {rev} ran preset {args.preset!r} in {seconds:.0f} s", flush=True)
            lines, bad = compare(hashes(dirs["before"]), hashes(dirs["after"]))
        finally:
            for side in ("before", "after"):
                if (Path(tmp) / side).exists():
                    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(Path(tmp) / side)],
                                   capture_output=True)
    print(f"{'state':9s} {'file':40s} {'before':16s}  after")
    print("\n".join(lines))
    print(f"{len(lines) - bad} identical, {bad} different or missing")
    return 1 if bad or not lines else 0


if __name__ == "__main__":
    sys.exit(main())
