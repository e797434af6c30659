"""tools/claims_table.py on a synthetic run: steps grouped, job times summed per claim, bad runs refused."""

import json

import pytest

from claims_table import STEPS, fmt_seconds, main, summarize
from pcast.pipeline.tables import benchmark_groups

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def _bench(root, rel, seconds):
    f = root / "results" / "benchmarks" / f"{rel}.tsv"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(HEADER + f"{seconds}\t0:00:01\t1\t1\t1\t1\t0\t0\t1\t1\n")


def _run(tmp_path, claims=("C1", "C4")):
    """Every step of STEPS at 1 s per job, except two shards of sweeps/collapse (2.5 s and 4 s) and three
    realmodel_heads layers."""
    steps = {s for ids in STEPS.values() for s in ids}
    for s in steps - {"sweeps/collapse", "realmodel/realmodel_heads"}:
        _bench(tmp_path, s, 1.0)
    _bench(tmp_path, "sweeps/collapse/shard000", 2.5)
    _bench(tmp_path, "sweeps/collapse/shard001", 4.0)
    for layer in range(3):
        _bench(tmp_path, f"realmodel/realmodel_heads/layer{layer}", 1.0)
    (tmp_path / "figures").mkdir()
    doc = {"preset": "smoke", "claims": {c: {"verdict": "PASS", "evidence": ["fig_x"]} for c in claims}}
    (tmp_path / "figures" / "claims.json").write_text(json.dumps(doc))
    return len(steps)


def test_groups_drop_the_shard_and_the_layer(tmp_path):
    _run(tmp_path)
    groups = benchmark_groups(tmp_path / "results" / "benchmarks")
    assert sorted(groups["sweeps/collapse"]) == [2.5, 4.0]
    assert groups["realmodel/realmodel_heads"] == [1.0, 1.0, 1.0]
    assert "realmodel/realmodel_heads/layer0" not in groups


def test_job_time_per_claim_sums_its_steps(tmp_path):
    n_steps = _run(tmp_path)
    s = summarize(tmp_path)
    # C1: inputs, tidy, stats, fig at 1 s each, and the two collapse shards
    assert s["claims"]["C1"]["job_s"] == pytest.approx(4 + 6.5)
    assert s["claims"]["C4"]["job_s"] == pytest.approx(len(STEPS["C4"]) - 1 + 6.5)
    assert s["all_jobs"] == n_steps - 2 + 2 + 3
    assert s["steps"]["sweeps/collapse"] == {"jobs": 2, "total_s": 6.5, "slowest_s": 4.0}


def test_a_claim_without_steps_or_a_missing_step_is_refused(tmp_path):
    _run(tmp_path, claims=("C1", "C9"))
    with pytest.raises(ValueError, match="'C9'"):
        summarize(tmp_path)
    (tmp_path / "results" / "benchmarks" / "claims" / "fig_collapse.tsv").unlink()
    with pytest.raises(ValueError, match="claims/fig_collapse"):
        summarize(tmp_path)


def test_json_and_seconds_format(tmp_path, capsys):
    _run(tmp_path)
    out = tmp_path / "run.json"
    assert main(["--run", str(tmp_path), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["claims"]["C1"]["verdict"] == "PASS"
    assert "C4" in capsys.readouterr().out
    assert [fmt_seconds(x) for x in (0.4, 46, 59.6, 60, 125.2, 946.1)] == \
        ["0 s", "46 s", "1 min 00 s", "1 min 00 s", "2 min 05 s", "15 min 46 s"]


def test_readme_verdict_cells_are_filled_from_claims_json(tmp_path, capsys):
    """--readme writes each claim's job time, verdict and its expected-verdict template, filled from the run,
    into the README's claims table; a claim without a template gets its verdict and headline."""
    _run(tmp_path)
    doc = json.loads((tmp_path / "figures" / "claims.json").read_text())
    doc["claims"]["C1"].update(numbers={"points": 66}, headline="PASS the claim as stated")
    doc["expected"] = {"C1": {"verdict": "PASS", "why": "within tolerance at {C1.points} distinct points"}}
    (tmp_path / "figures" / "claims.json").write_text(json.dumps(doc))
    readme = tmp_path / "README.md"
    readme.write_text("x\n<!-- claims-table -->\n| claim | figure | command | runtime | verdict |\n|---|---|---|---|---|\n"
                      "| C1 law | F2 | `snakemake --cores 2 fig_collapse` | 1 s | PASS: typed 198 points |\n"
                      "| C4 knee | F5 | `snakemake --cores 2 fig_threshold` | 1 s | FAIL: typed |\n"
                      "<!-- /claims-table -->\ny\n")
    assert main(["--run", str(tmp_path), "--readme", str(readme)]) == 0
    text = readme.read_text()
    c4_s = len(STEPS["C4"]) - 1 + 6.5  # as test_job_time_per_claim_sums_its_steps sums them
    assert "| `snakemake --cores 2 fig_collapse` | 10 s | PASS: within tolerance at 66 distinct points |" in text
    assert "typed 198" not in text
    assert f"| C4 knee | F5 | `snakemake --cores 2 fig_threshold` | {fmt_seconds(c4_s)} | PASS |" in text
    assert text.startswith("x\n<!-- claims-table -->") and text.endswith("<!-- /claims-table -->\ny\n")
    assert "4 runtime and verdict cells changed" in capsys.readouterr().out


def test_readme_from_a_stored_summary_needs_no_run(tmp_path):
    """--summary reads what --json wrote, so the README's table follows docs/data/default_run.json alone."""
    _run(tmp_path)
    summary = tmp_path / "summary.json"
    assert main(["--run", str(tmp_path), "--json", str(summary)]) == 0
    readme = tmp_path / "README.md"
    readme.write_text("<!-- claims-table -->\n| claim | figure | command | runtime | verdict |\n|---|---|---|---|---|\n"
                      "| C1 law | F2 | `snakemake --cores 2 fig_collapse` | 9 min 00 s | typed |\n"
                      "| all | x | `snakemake --cores 2 claims` | 1 s | as above |\n<!-- /claims-table -->\n")
    assert main(["--summary", str(summary), "--run", str(tmp_path / "absent"), "--readme", str(readme)]) == 0
    rows = readme.read_text().splitlines()
    stored = json.loads(summary.read_text())
    assert rows[3].split(" | ")[3] == fmt_seconds(stored["claims"]["C1"]["job_s"])
    assert rows[3].endswith(f"| {stored['claims']['C1']['cell']} |")
    assert rows[4] == f"| all | x | `snakemake --cores 2 claims` | {fmt_seconds(stored['all_job_s'])} | as above |"
