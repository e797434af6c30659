"""The pipeline's tables: fixed text form, shard tables merged into one sorted tidy table, timing.

Column lists come from :mod:`pcast.contract` (``TIDY_COLUMNS``, ``CONFORMANCE_COLUMNS``,
``POLICY_TIDY_COLUMNS``, ``FP4_TIDY_COLUMNS``, ``DECODE_TIDY_COLUMNS``, ``TIMING_COLUMNS``). Values are formatted once, by the shard that computed them
(:func:`format_value`: floats ``%.10g``); merging copies them as text, so a tidy table is
byte-deterministic. Writes are atomic (:mod:`pcast.host.files`).
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pcast.contract import (
    CONFIG_COLUMNS, CONFORMANCE, CONFORMANCE_COLUMNS, CONFORMANCE_KEY, DIAGNOSTICS, FP4_CONFIG_COLUMNS,
    FP4_EXPERIMENT, FP4_TIDY_COLUMNS, DECODE_CONFIG_COLUMNS, DECODE_EXPERIMENT, DECODE_TIDY_COLUMNS, DYNAMIC_CONFIG_COLUMNS,
    DYNAMIC_EXPERIMENT, DYNAMIC_TIDY_COLUMNS, POLICY_CONFIG_COLUMNS, POLICY_EXPERIMENT, POLICY_TIDY_COLUMNS, TIDY_COLUMNS,
    TIMING_COLUMNS,
)
from pcast.host.files import atomic_write_text

__all__ = [
    "format_value", "csv_text", "parse_value", "read_csv", "tidy_layout", "merge_tidy", "merge_timing",
    "benchmark_groups", "summarize_benchmarks",
]

# How a column's text parses back (for sorting and duplicate checks); any other column is text.
_INT_COLUMNS = {"seed", "n", "d", "block_m", "block_n", "ksink", *DIAGNOSTICS, "mismatched_rows",
                "fragile_elements", "shard", "runs", "underflow_elem", "groups", "head", "num_splits", "p_rows"}
_FLOAT_COLUMNS = {"delta", "sigma", "sink_v_scale", "scale", "mse", "rel_mse", "max_abs_err",
                  "underflow_frac", "underflow_sink_frac", "max_abs_diff", "max_rel_diff", "wall_s",
                  "reference_s", "kernel_s", "rescale_threshold", "floor_mse", "floor_rel_mse",
                  "saturated_frac", "underflow_scale_frac", "underflow_elem_frac", "groups_flushed_frac"}
_BOOL_COLUMNS = {"causal", "diag_equal", "explained"}


def format_value(v: Any) -> str:
    """Fixed text form: bools ``True``/``False``, ints as digits, floats ``%.10g`` (``nan``, ``inf``)."""
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "%.10g" % v
    return str(v)


def csv_text(columns: Sequence[str], rows: Iterable[Mapping[str, Any] | Sequence[str]]) -> str:
    """CSV text with a header: mapping rows through :func:`format_value`, sequence rows as given."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for row in rows:
        if isinstance(row, Mapping):
            w.writerow([format_value(row[c]) for c in columns])
        else:
            w.writerow(row)
    return buf.getvalue()


def parse_value(column: str, text: str):
    """The value behind ``text`` in ``column``: int, float, bool (``True``/``False`` only) or text."""
    if column in _INT_COLUMNS:
        return int(text)
    if column in _FLOAT_COLUMNS:
        return float(text)
    if column in _BOOL_COLUMNS:
        if text not in ("True", "False"):
            raise ValueError(f"column {column}: {text!r} is not True/False")
        return text == "True"
    return text


def read_csv(path: str | os.PathLike, columns: Sequence[str]) -> list[list[str]]:
    """The rows of ``path`` as text; raises unless its header is exactly ``columns``."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    if not rows or tuple(rows[0]) != tuple(columns):
        raise RuntimeError(f"{path}: header {rows[0] if rows else None} is not {list(columns)}")
    return rows[1:]


def tidy_layout(experiment: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(columns, sort key) of an experiment's tidy table: conformance, policies, fp4 (and dynamic, the same) and
    decode have their own."""
    if experiment == CONFORMANCE:
        return CONFORMANCE_COLUMNS, CONFORMANCE_KEY
    if experiment == FP4_EXPERIMENT:
        return FP4_TIDY_COLUMNS, FP4_CONFIG_COLUMNS + ("seed",)
    if experiment == DYNAMIC_EXPERIMENT:
        return DYNAMIC_TIDY_COLUMNS, DYNAMIC_CONFIG_COLUMNS + ("seed",)
    if experiment == DECODE_EXPERIMENT:
        return DECODE_TIDY_COLUMNS, DECODE_CONFIG_COLUMNS + ("seed", "head")
    if experiment == POLICY_EXPERIMENT:
        return POLICY_TIDY_COLUMNS, POLICY_CONFIG_COLUMNS + ("seed",)
    return TIDY_COLUMNS, CONFIG_COLUMNS + ("seed",)


def merge_tidy(paths: Sequence[str | os.PathLike], out_csv: str | os.PathLike, *, conformance: bool = False,
               expected: int | None = None, experiment: str | None = None) -> int:
    """Concatenate shard tables, sort them by configuration then seed, and write ``out_csv`` atomically.

    ``experiment`` picks the columns and sort key (:func:`tidy_layout`; ``conformance=True`` is
    ``experiment="conformance"``). Values are copied as text (they were formatted once, by the
    shard), so the table is byte-deterministic. Raises on a wrong header, a duplicate
    (configuration, seed) or a row count other than ``expected``.
    """
    columns, key_cols = tidy_layout(CONFORMANCE if conformance else experiment)
    idx = [columns.index(c) for c in key_cols]
    rows = [r for p in paths for r in read_csv(p, columns)]
    keyed = [(tuple(parse_value(columns[i], r[i]) for i in idx), r) for r in rows]
    keyed.sort(key=lambda kr: kr[0])
    for (a, _), (b, _) in zip(keyed, keyed[1:]):
        if a == b:
            raise RuntimeError(f"duplicate row for {dict(zip(key_cols, a))}")
    if expected is not None and len(keyed) != expected:
        raise RuntimeError(f"{out_csv}: {len(keyed)} rows, expected {expected}")
    atomic_write_text(out_csv, csv_text(columns, [r for _, r in keyed]))
    return len(keyed)


def merge_timing(paths: Sequence[str | os.PathLike], out_csv: str | os.PathLike) -> int:
    """Concatenate shard timing tables in shard order and write ``out_csv`` atomically."""
    rows = [r for p in paths for r in read_csv(p, TIMING_COLUMNS)]
    rows.sort(key=lambda r: int(r[1]))
    atomic_write_text(out_csv, csv_text(TIMING_COLUMNS, rows))
    return len(rows)


# ----------------------------------------------------------------------------- benchmarks


def benchmark_groups(bench_dir: str | os.PathLike = "results/benchmarks") -> dict[str, list[float]]:
    """The wall seconds of every job in Snakemake's ``benchmark:`` files, grouped by step.

    Steps are the benchmark paths without the shard: ``sweeps/collapse`` holds its shards' times,
    ``claims/fig_collapse`` one job's, ``realmodel/realmodel_heads`` one per layer.
    """
    groups: dict[str, list[float]] = {}
    root = os.fspath(bench_dir)
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith(".tsv"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), root)
            parts = rel[:-4].split(os.sep)
            if parts[-1].startswith(("shard", "layer")):
                parts = parts[:-1]
            with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                rows = list(csv.reader(fh, delimiter="\t"))
            if len(rows) >= 2:
                groups.setdefault("/".join(parts), []).append(float(rows[-1][0]))
    return groups


def summarize_benchmarks(bench_dir: str | os.PathLike = "results/benchmarks") -> str:
    """A Markdown table of the wall time per step from Snakemake's ``benchmark:`` files.

    Steps as :func:`benchmark_groups` makes them. Columns: jobs, total seconds, slowest job.
    """
    groups = benchmark_groups(bench_dir)
    lines = ["| step | jobs | total s | slowest job s |", "| --- | ---: | ---: | ---: |"]
    for key in sorted(groups):
        ts = groups[key]
        lines.append(f"| {key} | {len(ts)} | {sum(ts):.1f} | {max(ts):.1f} |")
    total = sum(sum(ts) for ts in groups.values())
    lines.append(f"| **all jobs (sum of job wall times; the run overlaps them)** | {sum(map(len, groups.values()))} "
                 f"| {total:.1f} | |")
    return "\n".join(lines) + "\n"
