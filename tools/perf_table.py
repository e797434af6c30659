"""The emulator's figures on each machine measured: measure them into docs/data/bench.json, and write the table
of docs/performance.md between ``<!-- bench-table -->`` and ``<!-- /bench-table -->`` from it.

Each machine's entry records what ``pcast-bench --json`` records: the CPU model, vendor, torch's vector ISA, the
BLAS, cores, torch, and the 1-minute load before and after each measurement. ``tests/project/test_docs.py``
checks that the table is the rendering of the file.

Usage:
    python tools/perf_table.py measure     # this machine: three pcast-bench runs, its entry replaced
    python tools/perf_table.py write       # the table from the file
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "bench.json"
PAGE = ROOT / "docs" / "performance.md"
MARK = ("<!-- bench-table -->", "<!-- /bench-table -->")
PAIR = ["--n", "2048", "--d", "128", "--batch", "2", "--threads", "2"]
RUNS = {"pair": PAIR, "sweep": ["--sweep", "--threads", "1,2"], "loaded": [*PAIR, "--busy", "2"]}


def _bench(args: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "b.json"
        subprocess.run([sys.executable, "-m", "pcast.cli.bench", *args, "--json", str(out)], check=True)
        return json.loads(out.read_text())


def measure() -> dict:
    """This machine's entry: the three runs of :data:`RUNS`, one after the other."""
    got = {name: _bench(args) for name, args in RUNS.items()}
    return {"machine": got["pair"]["machine"], **got}


def _load(r: dict) -> str:
    return f"load {r['load_before']:g}→{r['load_after']:g}"


def rows(entry: dict) -> dict:
    """The table's cells of one machine, by row label."""
    p, s, ld = entry["pair"], entry["sweep"], entry["loaded"]
    sw = {r["threads"]: r for r in s["results"]}
    cells = {"emulator / its matmul pair, N = 2,048, d = 128, batch 2, 2 threads (target ≥ 0.8)":
             f"{p['ratio_vs_matmul_pair']:.2f} ({_load(p)})"}
    for t in sorted(sw):
        r = sw[t]
        cells[f"sweep engine / its P·V floor, {t} thread{'s' if t > 1 else ''} (target ≥ 0.5 at 2): runs/s "
              "(floor runs/s)"] = (f"{r['fraction_of_floor']:.3f}: {r['engine_runs_per_s']:.1f} "
                                   f"({r['floor_runs_per_s']:.1f}) ({_load(s)})")
    cells["the first row beside 2 busy processes (target ≥ 0.5)"] = (
        f"{ld['ratio_vs_matmul_pair']:.2f} ({_load(ld)})")
    return cells


def render(data: dict) -> str:
    machines = data["machines"]
    heads = [f"{m['machine']['cpu']} ({m['machine']['vendor']}, {m['machine']['isa']}, {m['machine']['blas']}, "
             f"{m['machine']['cores']} cores, torch {m['machine']['torch']})" for m in machines]
    table = [rows(m) for m in machines]
    labels = list(table[0])
    lines = ["| measure | " + " | ".join(heads) + " |", "|---|" + "---:|" * len(heads)]
    lines += [f"| {lab} | " + " | ".join(t.get(lab, "") for t in table) + " |" for lab in labels]
    return "\n".join(lines)


def write() -> None:
    text = PAGE.read_text(encoding="utf-8")
    head, rest = text.split(MARK[0], 1)
    _, tail = rest.split(MARK[1], 1)
    PAGE.write_text(f"{head}{MARK[0]}\n{render(json.loads(DATA.read_text()))}\n{MARK[1]}{tail}", encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("measure", "write"))
    args = ap.parse_args(argv)
    if args.what == "measure":
        data = json.loads(DATA.read_text()) if DATA.exists() else {"machines": []}
        entry = measure()
        data["machines"] = [m for m in data["machines"] if m["machine"]["cpu"] != entry["machine"]["cpu"]] + [entry]
        DATA.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
