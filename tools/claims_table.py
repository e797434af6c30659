"""The README's claims table, checked against a finished run: each claim's verdict and job time.

After a run (``snakemake --cores all``), ``python tools/claims_table.py`` reads ``figures/claims.json``
and the ``benchmark:`` files in ``results/benchmarks/`` and prints, per claim, its verdict and the job
time of the steps its command runs (the sum of their jobs' wall times: what the command costs on one
core; two cores overlap them). ``--json docs/data/default_run.json`` writes the same summary; the
README's runtime and verdict columns are checked against that file by ``tests/project/test_docs.py``.

The verdict cell of each claim is generated, never typed: its verdict, then the preset's expected-verdict
``why`` (``presets.<name>.expected_verdicts`` in config.yaml, stored in claims.json), a template whose
slots are filled from the run's numbers (:mod:`pcast.analysis.verdicts.templates`). ``--readme README.md``
writes those cells and the runtimes into the README's claims table, from the run or, with ``--summary
docs/data/default_run.json``, from a summary written earlier.

Usage: python tools/claims_table.py [--run DIR | --summary PATH] [--json PATH] [--readme PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from pcast.analysis.verdicts.templates import verdict_cell
from pcast.pipeline.tables import benchmark_groups

README_TABLE = ("<!-- claims-table -->", "<!-- /claims-table -->")


def _chain(experiment: str) -> list[str]:
    """The steps that make an experiment's tidy table: its inputs, its shards, the merge."""
    shards = "conformance/conformance" if experiment == "conformance" else f"sweeps/{experiment}"
    return [f"inputs/{experiment}", shards, f"tidy/{experiment}"]


_REALMODEL = ["realmodel/realmodel_capture", "realmodel/realmodel_heads", "realmodel/realmodel_outputs",
              "claims/stats_realmodel"]

#: The benchmark steps each claim's command runs, as the rules' inputs in workflow/rules/ chain them.
STEPS: dict[str, list[str]] = {
    "C1": _chain("collapse") + ["claims/stats_collapse", "claims/fig_collapse"],
    "C2": _chain("collapse") + ["claims/stats_collapse", "claims/fig_collapse"],
    "C3": _chain("scales") + ["claims/stats_scales", "claims/fig_theory_scale", "claims/table_scales"],
    "C4": _chain("threshold") + _chain("collapse") + ["claims/stats_threshold", "claims/stats_paired",
                                                      "claims/fig_threshold", "claims/table_thresholds"],
    "C5": _chain("collapse") + _chain("scales") + ["claims/stats_collapse", "claims/stats_paired",
                                                   "claims/stats_scales", "claims/fig_mse",
                                                   "claims/fig_improvement", "claims/table_paired_tests"],
    "C6": _chain("collapse") + ["claims/stats_collapse", "claims/stats_paired", "claims/table_paired_tests",
                                "claims/fig_mse"],
    "conformance": _chain("conformance") + ["claims/fig_conformance", "claims/table_conformance"],
    "audit": _chain("policies") + ["claims/stats_policies", "claims/fig_policies", "claims/table_policies"],
    "realmodel": _REALMODEL + ["claims/fig_realmodel_heads", "claims/fig_realmodel_theory",
                               "claims/fig_realmodel_outputs", "claims/table_realmodel"],
    "fp4": _chain("fp4") + ["claims/stats_fp4", "claims/fig_fp4", "claims/table_fp4"],
    "cases": ["claims/table_cases"],
    "deployed": ["realmodel/realmodel_capture", "claims/table_deployed"],
    "tensorcore": ["claims/tensorcore", "claims/fig_tensorcore"],
    "decode": _chain("decode") + ["claims/stats_decode", "claims/fig_decode", "claims/table_decode"],
}
#: The steps of each finding beyond the paper (claims.json's ``findings``; no claim and no README row): their job
#: time counts in the run's total only.
FINDING_STEPS: dict[str, list[str]] = {
    "dynamic": _chain("dynamic") + ["claims/stats_dynamic", "claims/fig_dynamic"],
}
#: The paper's numbers come from the statistics behind C1, C3, C4 and C5 (and the claims job itself).
STEPS["paper"] = list(dict.fromkeys(STEPS["C1"] + STEPS["C3"] + STEPS["C4"] + STEPS["C5"] + ["claims/claims"]))


def fmt_seconds(s: float) -> str:
    """Seconds as the README writes them: ``46 s``, ``2 min 05 s``."""
    s = round(s)
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60:02d} s"


def summarize(run: str | os.PathLike = ".") -> dict:
    """Verdict, evidence and job time per claim, and the job time of every step, of the run in ``run``."""
    with open(os.path.join(run, "figures", "claims.json"), encoding="utf-8") as fh:
        doc = json.load(fh)
    groups = benchmark_groups(os.path.join(run, "results", "benchmarks"))
    missing = sorted({s for steps in STEPS.values() for s in steps} - set(groups))
    if missing:
        raise ValueError(f"no benchmark files for steps {missing} in {run}/results/benchmarks")
    claims = {}
    cells = verdict_cells(doc)
    for cid, c in doc["claims"].items():
        if cid not in STEPS:
            raise ValueError(f"claim {cid!r} of claims.json has no entry in tools/claims_table.py STEPS")
        claims[cid] = {"verdict": c["verdict"], "evidence": list(c["evidence"]), "cell": cells[cid],
                       "job_s": round(sum(sum(groups[s]) for s in STEPS[cid]), 1)}
    steps = {k: {"jobs": len(v), "total_s": round(sum(v), 1), "slowest_s": round(max(v), 1)}
             for k, v in sorted(groups.items())}
    total = round(sum(sum(v) for v in groups.values()), 1)
    return {"preset": doc["preset"], "claims": claims, "steps": steps, "all_job_s": total,
            "all_jobs": sum(len(v) for v in groups.values())}


def verdict_cells(doc: dict) -> dict[str, str]:
    """Claim -> the README's verdict cell, from claims.json (``doc``): verdict and the filled ``why`` template."""
    expected = doc.get("expected") or {}
    return {cid: verdict_cell(cid, doc["claims"], (expected.get(cid) or {}).get("why")) for cid in doc["claims"]}


def write_readme(path: str | os.PathLike, summary: dict) -> int:
    """Write the runtime and verdict columns of the README's claims table from ``summary`` (as
    :func:`summarize` returns it); returns the cells changed. A row's claim is the first word of its first
    cell (``C1 forward order ...``, ``audit: ...``); the ``all`` row gets the run's total job time."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    head, rest = text.split(README_TABLE[0], 1)
    table, tail = rest.split(README_TABLE[1], 1)
    claims = summary["claims"]
    out, changed = [], 0
    for line in table.split("\n"):
        cols = _split_row(line)
        cid = cols[0].split()[0].rstrip(":") if cols and cols[0].split() else ""
        if len(cols) == 5 and (cid in claims or cid == "all"):
            new = list(cols)
            if cid == "all":
                new[3] = fmt_seconds(summary["all_job_s"])
            else:
                new[3], new[4] = fmt_seconds(claims[cid]["job_s"]), claims[cid]["cell"]
            changed += sum(a != b for a, b in zip(cols, new))
            line = "| " + " | ".join(new) + " |"
        out.append(line)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(head + README_TABLE[0] + "\n".join(out) + README_TABLE[1] + tail)
    return changed


def _split_row(line: str) -> list[str]:
    """The cells of a Markdown table row (an escaped ``\\|`` stays inside its cell)."""
    if not line.strip().startswith("|"):
        return []
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", default=".", help="the finished run's root (holding figures/ and results/)")
    ap.add_argument("--json", help="write the summary here (docs/data/default_run.json for the default preset)")
    ap.add_argument("--summary", help="read a summary written earlier by --json instead of a run")
    ap.add_argument("--readme", help="write each claim's runtime and generated verdict cell into this README's "
                    "claims table")
    args = ap.parse_args(argv)
    if args.summary:
        with open(args.summary, encoding="utf-8") as fh:
            summary = json.load(fh)
    else:
        summary = summarize(args.run)
    if args.readme:
        n = write_readme(args.readme, summary)
        print(f"{args.readme}: {n} runtime and verdict cells changed")
    for cid, c in summary["claims"].items():
        print(f"{cid:12s} {c['verdict']:13s} {fmt_seconds(c['job_s']):>12s}  {' '.join(c['evidence'])}")
    print(f"{'all':12s} {'':13s} {fmt_seconds(summary['all_job_s']):>12s}  ({summary['all_jobs']} jobs)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(summary, fh, indent=1, sort_keys=True, ensure_ascii=False)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
