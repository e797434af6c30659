"""Prove that a change left the pipeline's results byte-identical (or, with --rel, numerically equal).

Usage (from the repository root)::

    python tools/compare_runs.py --before e8c366c                 # HEAD against e8c366c, default preset
    python tools/compare_runs.py --before e8c366c --after HEAD --preset smoke --cores 2
    python tools/compare_runs.py --before-dir /tmp/a --after-dir /tmp/b   # two finished runs, no rerun
    python tools/compare_runs.py --before e8c366c --rel 1e-9      # tidy tables equal up to 1e-9 relative
    python tools/compare_runs.py --before-dir /tmp/a --after-dir /tmp/b --rel 1e-9 --strict-others
    python tools/compare_runs.py --before e8c366c --rel 1e-9 --moved   # and list every cell that moved

Each commit is checked out with ``git worktree add --detach`` into a temporary folder and run with
``snakemake --cores N --config preset=P`` there, with ``PYTHONPATH`` set so that its own package
(``pcast``, from its ``kernels/``) is imported, not the one ``pip install -e`` points to
(:func:`pcast.pipeline.provenance.import_path`). Compared, by
SHA-256: ``results/tidy/*.csv``, ``figures/*.csv``, ``figures/table_*`` and ``figures/claims.md``
(PDF and PNG are byte-stable too, but they are renderings of the CSVs compared here). Running
times live apart in ``results/timing/`` and are not compared.

Prints one line per file (hash before, hash after, same/DIFFERENT/missing) and the wall time of
each run; exits 1 when any file differs or is missing on one side, 0 when all are identical.

With ``--rel REL`` (for a change that may move floats in their last bits, e.g. a reference summed
in another order) every ``results/tidy/*.csv`` is compared cell by cell instead of by hash: the
header, the number of rows and the row order must be the same; the float measurements of
``TOLERANT_COLUMNS`` (``mse``, ``rel_mse``, ``max_abs_err``, ``floor_mse``, ``floor_rel_mse``, and the
conformance table's ``max_abs_diff`` / ``max_rel_diff``) must agree within ``|a - b| <= REL·max(|a|, |b|)``
(evaluated exactly on the decimal text; NaN equals NaN, an infinity only the same infinity); every
other column (the configuration and key columns, the counts ``underflow``, ``terms``, ``saturated``, ...,
and the fractions of counts such as ``underflow_frac``) must be identical as text. One line per
table: ``identical`` (same bytes), ``within`` (with the largest relative difference of each float
column and its data row, 1-based, header not counted) or ``DIFFERENT`` (the first differing row and
column, and how many cells differ). The other compared files keep the hash comparison, but a
differing one is reported as ``differs`` (not checked numerically) and fails the run only with
``--strict-others``. A file missing on one side always fails; so does a run without tidy tables.
Exit 1 on any tidy failure.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import math
import os
import subprocess
import sys
import tempfile
import time
from decimal import Decimal, InvalidOperation
from pathlib import Path

PATTERNS = ("results/tidy/*.csv", "figures/*.csv", "figures/table_*", "figures/claims.md")
TIDY_PATTERN = PATTERNS[0]
ROOT = Path(__file__).resolve().parents[1]

from pcast.contract import CONFORMANCE_COLUMNS, POLICY_TIDY_COLUMNS, TIDY_COLUMNS
from pcast.pipeline.provenance import import_path

# ----------------------------------------------------------------------------- column classes (--rel)
# Every column of the tidy tables (pcast.contract), in order, each once.
CONTRACT_COLUMNS = tuple(dict.fromkeys(TIDY_COLUMNS + POLICY_TIDY_COLUMNS + CONFORMANCE_COLUMNS))
# Float measurements that a reordered sum moves in their last bits: compared within --rel.
TOLERANT_COLUMNS = ("mse", "rel_mse", "max_abs_err", "floor_mse", "floor_rel_mse", "max_abs_diff", "max_rel_diff")
# Floats that are ratios of two counts: identical as text, like the counts themselves.
COUNT_FRACTION_COLUMNS = tuple(c for c in CONTRACT_COLUMNS if c.endswith("_frac"))
# Every other column, of the contract or not (keys, configuration, counts, flags), is compared as text.
EXACT_COLUMNS = tuple(c for c in CONTRACT_COLUMNS if c not in TOLERANT_COLUMNS)
_unknown = sorted(set(TOLERANT_COLUMNS) - set(CONTRACT_COLUMNS))
if _unknown:  # a column renamed in pcast.contract must be renamed here too, not silently compared as text
    raise ImportError(f"compare_runs: TOLERANT_COLUMNS not in pcast.contract: {_unknown}")


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
    env = dict(os.environ, PYTHONPATH=import_path(where, Path(tempfile.mkdtemp(prefix="pcast-path-"))))
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


def _number(text: str) -> Decimal | None:
    """The exact value of a tidy cell (an empty cell is NaN, as pandas writes it); None if not a number."""
    text = text.strip()
    if not text:
        return Decimal("NaN")
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


def relative_difference(a: str, b: str) -> Decimal:
    """|a - b| / max(|a|, |b|) of two cells, exact on their decimal text.

    0 for the same text, two NaNs, the same infinity or two zeros; infinity when the cells cannot
    agree (a NaN and a number, an infinity and anything else, text that is not a number).
    """
    if a == b:
        return Decimal(0)
    x, y = _number(a), _number(b)
    if x is None or y is None:
        return Decimal("Infinity")
    if x.is_nan() or y.is_nan():
        return Decimal(0) if x.is_nan() and y.is_nan() else Decimal("Infinity")
    if x.is_infinite() or y.is_infinite():
        return Decimal(0) if x == y else Decimal("Infinity")
    scale = max(abs(x), abs(y))
    return Decimal(0) if scale == 0 else abs(x - y) / scale


def _read_table(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return (rows[0] if rows else []), rows[1:]


def compare_table(before: Path, after: Path, rel: float, moved: list | None = None) -> tuple[str, str]:
    """(state, detail) of one tidy table: ``identical``, ``within`` or ``DIFFERENT``.

    Same header, same number of rows, rows paired in order; ``TOLERANT_COLUMNS`` agree within
    ``rel`` (see :func:`relative_difference`), every other column is identical as text. Rows are
    numbered from 1 without the header (row i is line i + 1 of the file). ``moved``: a list that
    receives one line per differing cell (row, column, before, after).
    """
    if before.read_bytes() == after.read_bytes():
        return "identical", "same bytes"
    (head, rows_a), (head_b, rows_b) = _read_table(before), _read_table(after)
    if head != head_b:
        only_a, only_b = [c for c in head if c not in head_b], [c for c in head_b if c not in head]
        if only_a or only_b:
            return "DIFFERENT", f"header: columns only before {only_a}, only after {only_b}"
        return "DIFFERENT", "header: the same columns in another order"
    if len(rows_a) != len(rows_b):
        return "DIFFERENT", f"{len(rows_a)} rows before, {len(rows_b)} after"
    limit = Decimal(repr(float(rel)))
    worst = {j: (Decimal(0), 0) for j, name in enumerate(head) if name in TOLERANT_COLUMNS}  # (rel diff, row)
    first, bad = None, 0
    for i, (ra, rb) in enumerate(zip(rows_a, rows_b), start=1):
        if len(ra) != len(head) or len(rb) != len(head):
            bad += 1
            first = first or f"row {i}: {len(ra)} cells before, {len(rb)} after, {len(head)} columns"
            continue
        for j, name in enumerate(head):
            a, b = ra[j], rb[j]
            if j in worst:
                diff = relative_difference(a, b)
                if diff > worst[j][0]:
                    worst[j] = (diff, i)
                if diff <= limit:
                    continue
                why = f" (relative difference {float(diff):.3g} > {rel:g})"
            elif a == b:
                continue
            else:
                why = " (compared as text)"
            bad += 1
            first = first or f"row {i} column {name}: {a!r} before, {b!r} after{why}"
            if moved is not None:
                moved.append(f"row {i} column {name}: {a} -> {b}{why if j in worst else ''}")
    if first:
        return "DIFFERENT", f"{first}; {bad} cell(s) differ"
    largest = ", ".join(f"{head[j]} {float(diff):.3g}" + (f" at row {i}" if i else "")
                        for j, (diff, i) in worst.items())
    return "within", f"rel {rel:g}, {len(rows_a)} rows, largest relative difference: {largest or 'no float columns'}"


def compare_rel(before_dir: Path, after_dir: Path, rel: float, strict_others: bool = False,
                list_moved: bool = False) -> tuple[list[str], int]:
    """Report lines and the number of failures of a ``--rel`` comparison of two finished runs.

    Tidy tables go through :func:`compare_table`; the other compared files by hash, where a
    difference fails only with ``strict_others``. A file on one side only fails, and so does a
    comparison without any tidy table. ``list_moved``: every differing cell of a tidy table, one
    indented line each, under its table's line.
    """
    before, after = hashes(before_dir), hashes(after_dir)
    tidy = {str(p.relative_to(d)) for d in (before_dir, after_dir) for p in d.glob(TIDY_PATTERN)}
    lines, bad = [], 0
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a is None or b is None:
            state, detail = "missing", f"{(a or '-')[:16]}  {(b or '-')[:16]}"
        elif name in tidy:
            moved: list = []
            state, detail = compare_table(before_dir / name, after_dir / name, rel, moved)
        elif a == b:
            state, detail = "identical", f"{a[:16]}"
        else:
            state = "DIFFERENT" if strict_others else "differs"
            detail = f"{a[:16]}  {b[:16]}" + ("" if strict_others else "  (not checked numerically)")
        bad += state in ("missing", "DIFFERENT")
        lines.append(f"{state:9s} {name:40s} {detail}")
        if list_moved and name in tidy and a is not None and b is not None:
            lines.extend(f"          {line}" for line in moved)
    if not tidy:
        bad += 1
        lines.append(f"{'missing':9s} {TIDY_PATTERN:40s} no tidy table in either run")
    return lines, bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", help="commit to compare against (e.g. the parent of a refactor)")
    ap.add_argument("--after", default="HEAD", help="commit to check (default HEAD)")
    ap.add_argument("--before-dir", type=Path, help="a finished run's folder instead of --before")
    ap.add_argument("--after-dir", type=Path, help="a finished run's folder instead of --after")
    ap.add_argument("--preset", default="default", help="config preset (default: default)")
    ap.add_argument("--cores", type=int, default=2, help="snakemake --cores (default 2)")
    ap.add_argument("--rel", type=float, metavar="REL",
                    help="compare results/tidy/*.csv cell by cell: float measurements within REL relative, "
                         "everything else identical as text (e.g. 1e-9)")
    ap.add_argument("--strict-others", action="store_true",
                    help="with --rel: a differing non-tidy file (figures, claims) fails the run too")
    ap.add_argument("--moved", action="store_true",
                    help="with --rel: list every differing cell of the tidy tables (row, column, before -> after)")
    args = ap.parse_args(argv)
    if args.before_dir is None and args.before is None:
        ap.error("give --before REV or --before-dir DIR")
    if args.rel is not None and not (math.isfinite(args.rel) and args.rel >= 0):
        ap.error(f"--rel must be a finite number >= 0, not {args.rel}")
    if args.strict_others and args.rel is None:
        ap.error("--strict-others goes with --rel")
    if args.moved and args.rel is None:
        ap.error("--moved goes with --rel")
    with tempfile.TemporaryDirectory(prefix="compare-runs-") as tmp:
        dirs = {}
        try:
            for side, rev, given in (("before", args.before, args.before_dir), ("after", args.after, args.after_dir)):
                if given is not None:
                    dirs[side] = given
                    continue
                dirs[side], seconds = run_commit(rev, Path(tmp) / side, args.preset, args.cores)
                print(f"{side}: {rev} ran preset {args.preset!r} in {seconds:.0f} s", flush=True)
            if args.rel is None:
                lines, bad = compare(hashes(dirs["before"]), hashes(dirs["after"]))
            else:
                lines, bad = compare_rel(dirs["before"], dirs["after"], args.rel, args.strict_others, args.moved)
        finally:
            for side in ("before", "after"):
                if (Path(tmp) / side).exists():
                    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(Path(tmp) / side)],
                                   capture_output=True)
    if args.rel is None:
        print(f"{'state':9s} {'file':40s} {'before':16s}  after")
        print("\n".join(lines))
        print(f"{len(lines) - bad} identical, {bad} different or missing")
    else:
        print(f"{'state':9s} {'file':40s} detail")
        print("\n".join(lines))
        states = [line.split(maxsplit=1)[0] for line in lines]
        print(f"{states.count('identical')} identical, {states.count('within')} within rel {args.rel:g}, "
              f"{states.count('differs')} differ (not checked numerically), {bad} DIFFERENT or missing")
    return 1 if bad or not lines else 0


if __name__ == "__main__":
    sys.exit(main())
