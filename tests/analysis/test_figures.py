"""Figures: data saved next to them, fixed colors, byte-identical renders; and, on the smoke preset
(the session's ``smoke_run`` of tests/conftest.py), every statistics, figure and table rule of the
pipeline producing well-formed, non-empty outputs, and a plot-only change rerunning only that plot."""

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
import pandas as pd
import pytest

import synthetic_tables as data
from pcast.analysis import plots as P
from pcast.analysis import registry
from pcast.analysis.paired import paired_tests
from pcast.analysis.decode import decode_curves, decode_partition
from pcast.analysis.dynamic import dynamic_summary
from pcast.analysis.fp4 import fp4_summary
from pcast.analysis.policies import policy_summary
from pcast.analysis.realmodel import head_summary
from pcast.analysis.tensorcore import tensorcore_summary
from pcast.analysis.registry import FIGURES, TABLES
from pcast.analysis.summaries import (
    collapse_summary, knee_summary, scales_summary, threshold_summary, write_csv,
)

STATS_RULES = ["stats_collapse", "stats_paired", "stats_scales", "stats_threshold", "stats_policies", "stats_realmodel",
               "stats_fp4", "stats_decode", "stats_dynamic"]


# One worker runs this module, so the constructed tables below (seconds of bootstrap) are built once per run.
pytestmark = pytest.mark.xdist_group("figures")


@pytest.fixture(scope="module")
def summaries(tmp_path_factory):
    """The results/stats/*.csv of constructed data, written once."""
    out = tmp_path_factory.mktemp("stats")
    collapse = data.make_collapse(svs_values=(0.0, 0.25, 1.0), seeds=6)
    paired = paired_tests(collapse, [("forward S=1", "forward S=256"), ("forward S=1", "reverse S=1"),
                                     ("forward S=1", "reverse S=256"), ("forward S=256", "reverse S=256"),
                                     ("reverse S=1", "reverse S=256")], n_resamples=200)
    tables = {
        "collapse": collapse_summary(collapse),
        "paired": paired,
        "knees": knee_summary(paired),
        "scales": scales_summary(data.make_scales(), n_resamples=200),
        "thresholds": threshold_summary(data.make_threshold(), n_resamples=200),
        "conformance": data.make_conformance(unexplained=1),
        "policies": policy_summary(data.make_policies(dcs={("forward-s1", "keys"): 6.0}), n_resamples=200),
        "realmodel_heads": head_summary(data.make_realmodel_heads()),
        "realmodel_outputs": data.make_realmodel_outputs(),
        "fp4": fp4_summary(data.make_fp4(), n_resamples=200),
        "dynamic": dynamic_summary(data.make_dynamic(), n_resamples=200),
        "decode_curves": decode_curves(data.make_decode()),
        "decode_partition": decode_partition(data.make_decode(), boot={"n_resamples": 200, "confidence_level": 0.95,
                                                                      "method": "percentile", "seed": 0}),
        "tensorcore": tensorcore_summary(pd.DataFrame(
            [{"pv_arith": pv, "order": o, "scale": sc, "combo": f"{o} S={sc}", "delta": float(dl), "seed": 0,
              "mse": 1.0 + a, "mse_fp32": 1.0, "mse_pcast": 1.0, "acc_mse": a, "underflow_frac": 0.0}
             for pv, a in (("wgmma-sm90", 1e-3), ("tcgen05-sm100", 1e-9)) for o in ("forward", "reverse")
             for sc in (1, 256) for dl in (0, 8, 16)])),
    }
    for name, df in tables.items():
        write_csv(df, out / f"{name}.csv")
    return out


RENDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    import pandas as pd
    from pcast.analysis import plots as P
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    t = {p.stem: pd.read_csv(p) for p in src.glob("*.csv")}
    figs = {
        "fig_theory_scale": lambda: P.fig_theory_scale(t["scales"]),
        "fig_collapse": lambda: P.fig_collapse(t["collapse"]),
        "fig_mse": lambda: P.fig_mse(t["collapse"], t["paired"]),
        "fig_improvement": lambda: P.fig_improvement(t["paired"], t["scales"], t["collapse"],
                                                     moderate=[[0.01, 0.5], [0.5, 0.99]]),
        "fig_threshold": lambda: P.fig_threshold(t["thresholds"], t["knees"], onset_fraction=0.01),
        "fig_conformance": lambda: P.fig_conformance(t["conformance"]),
        "fig_policies": lambda: P.fig_policies(t["policies"]),
        "fig_realmodel_heads": lambda: P.fig_realmodel_heads(t["realmodel_heads"]),
        "fig_realmodel_theory": lambda: P.fig_realmodel_theory(t["realmodel_heads"]),
        "fig_realmodel_outputs": lambda: P.fig_realmodel_outputs(t["realmodel_outputs"]),
        "fig_fp4": lambda: P.fig_fp4(t["fp4"]),
        "fig_decode": lambda: P.fig_decode(t["decode_curves"], t["decode_partition"]),
        "fig_tensorcore": lambda: P.fig_tensorcore(t["tensorcore"], 0.01),
        "fig_dynamic": lambda: P.fig_dynamic(t["dynamic"]),
    }
    names = sys.argv[3].split(",") if len(sys.argv) > 3 else list(figs)
    for name in names:
        fig, d = figs[name]()
        P.save_figure(fig, d, dst / f"{name}.pdf", dst / f"{name}.png", dst / f"{name}.csv")
""")


def _render_both(src: Path, dsts: list[Path], hashseeds: list[str], names=()) -> list[dict[str, str]]:
    """Render the figures ``names`` (every figure when empty) in separate processes (run side by side),
    one per hash seed."""
    procs = []
    for dst, seed in zip(dsts, hashseeds):
        dst.mkdir()
        env = dict(os.environ, PYTHONHASHSEED=seed, MPLBACKEND="Agg")
        argv = [sys.executable, "-c", RENDER, str(src), str(dst)] + ([",".join(names)] if names else [])
        procs.append(subprocess.Popen(argv, env=env))
    assert all(p.wait(timeout=300) == 0 for p in procs)
    return [{p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())} for d in dsts]


# a line figure, a seaborn one and a hatched-band one: the inner loop's sample of the renderers
SAMPLE = ("fig_collapse", "fig_realmodel_heads", "fig_improvement")


def test_two_renders_of_a_sample_are_byte_identical(summaries, tmp_path):
    """Separate processes with different hash seeds give the same PDF, PNG and CSV bytes."""
    a, b = _render_both(summaries, [tmp_path / "a", tmp_path / "b"], ["1", "12345"], SAMPLE)
    assert len(a) == 3 * len(SAMPLE) and a == b
    pdf = (tmp_path / "a" / "fig_collapse.pdf").read_bytes()
    assert b"CreationDate" not in pdf and b"ModDate" not in pdf


@pytest.mark.heavy  # every figure twice (about a minute); the sample above checks the same in seconds
def test_two_renders_are_byte_identical(summaries, tmp_path):
    """Separate processes with different hash seeds give the same PDF, PNG and CSV bytes."""
    a, b = _render_both(summaries, [tmp_path / "a", tmp_path / "b"], ["1", "12345"])
    assert len(a) == 3 * len(FIGURES)
    assert a == b
    pdf = (tmp_path / "a" / "fig_collapse.pdf").read_bytes()
    assert b"CreationDate" not in pdf and b"ModDate" not in pdf
    png = (tmp_path / "a" / "fig_collapse.png").read_bytes()
    assert b"Software" not in png and png.startswith(b"\x89PNG")


def _load(summaries):
    return {p.stem: pd.read_csv(p) for p in summaries.glob("*.csv")}


def test_figures_draw_what_the_verdicts_test(summaries):
    """F5 (c) shades the knee window C4 accepts (Δc ± the onset span); F4 hatches C5's windows of 'moderate',
    read on the baseline's predicted underflow exactly as C5 reads them, beside the claimed band."""
    from pcast.analysis.verdicts import baseline_fraction
    from pcast.analysis.verdicts.mse import moderate_windows
    from pcast.analysis.verdicts.threshold import onset_span

    t = _load(summaries)
    _, d = P.fig_threshold(t["thresholds"], t["knees"], onset_fraction=0.01)
    w = d[d["series"] == "knee window (C4): Δc ± onset span"]
    assert len(w) == 2 and ((w["y_hi"] - w["y"]).round(9) == round(onset_span(0.01), 9)).all()
    _, none = P.fig_threshold(t["thresholds"], t["knees"])
    assert not none["series"].str.startswith("knee window").any()
    moderate = [[0.01, 0.5], [0.5, 0.99]]
    _, d = P.fig_improvement(t["paired"], t["scales"], t["collapse"], moderate=moderate)
    grid = sorted(t["paired"]["delta"].unique())
    expect = moderate_windows([tuple(m) for m in moderate], baseline_fraction(t["collapse"], "forward S=1"), grid)
    for (lo, hi), (_, ds) in zip(moderate, expect):
        rows = d[d["series"] == f"C5 window [{lo:g}, {hi:g}]"]
        assert ds and list(rows["x"]) == [min(ds), max(ds)] and (rows["y_lo"] == 3).all() and (rows["y_hi"] == 10).all()
    plt.close("all")


def test_figures_mark_the_tolerances_and_windows_the_verdicts_read(summaries):
    """F2 shades C1's tolerance around the Φ law (claims.C1.allowance × the first neglected term) and draws C2's
    sink-block share; F4's windows of 'moderate' are told apart by colour, not only by hatch."""
    from matplotlib.colors import to_hex

    from pcast.analysis.verdicts.underflow import leading_order_tolerance

    t = _load(summaries)
    _, d = P.fig_collapse(t["collapse"], allowance=2.0)
    r = t["collapse"].iloc[0]
    share = (int(r["block_n"]) - int(r["ksink"])) / (int(r["n"]) - int(r["ksink"]))
    assert (d.loc[d["series"] == "C2 sink-block share", "y"] == share).all()
    tol = d[d["series"].str.contains("C1 tolerance")]
    assert len(tol) and f"± {2.0 * leading_order_tolerance(int(r['ksink'])):.3g}" in tol["series"].iloc[0]
    fig, _ = P.fig_improvement(t["paired"], t["scales"], t["collapse"], moderate=[[0.01, 0.5], [0.5, 0.99]])
    edges = {to_hex(p.get_edgecolor()) for ax in fig.axes[:1] for p in ax.patches if p.get_hatch()}
    assert len(edges) == 2, edges  # one colour per window
    plt.close("all")


def test_figure_data_tables(summaries):
    t = _load(summaries)
    built = [P.fig_theory_scale(t["scales"]), P.fig_collapse(t["collapse"]), P.fig_mse(t["collapse"], t["paired"]),
             P.fig_improvement(t["paired"], t["scales"]), P.fig_threshold(t["thresholds"], t["knees"]),
             P.fig_conformance(t["conformance"]), P.fig_realmodel_heads(t["realmodel_heads"]),
             P.fig_realmodel_theory(t["realmodel_heads"]), P.fig_realmodel_outputs(t["realmodel_outputs"])]
    for fig, d in built:
        assert list(d.columns[:6]) == P.DATA_COLUMNS
        assert len(d) > 0 and d["series"].notna().all()
        plt.close(fig)


def test_one_fixed_color_per_combination(summaries):
    """Every line labelled with a combination uses that combination's color, in every figure."""
    t = _load(summaries)
    colors = [v["color"] for v in P.COMBO_STYLE.values()]
    assert len(set(colors)) == 4
    seen = 0
    for fig, _ in (P.fig_mse(t["collapse"], t["paired"]), P.fig_collapse(t["collapse"])):
        for ax in fig.axes:
            for line in ax.get_lines():
                label = line.get_label()
                if label in P.COMBO_STYLE:
                    seen += 1
                    assert mcolors.same_color(line.get_color(), P.COMBO_STYLE[label]["color"])
        handles = [h for leg in fig.legends for h in leg.legend_handles]
        for h in handles:
            if h.get_label() in P.COMBO_STYLE:
                seen += 1
                assert mcolors.same_color(h.get_color(), P.COMBO_STYLE[h.get_label()]["color"])
        plt.close(fig)
    assert seen >= 8


def test_band_intervals():
    # log-linear interpolation: ln 3 between ln 2 and ln 5 at x = 1 + 0.4425, ln 10 at 2.5 (rising),
    # then 10 at 3 + ln 2 / ln 20 = 3.2314 and 3 at 3 + ln(20/3) / ln 20 = 3.6333 (falling)
    got = P.band_intervals([0, 1, 2, 3, 4], [1, 2, 5, 20, 1], 3, 10)
    assert [x for ab in got for x in ab] == pytest.approx([1.4425, 2.5, 3.2314, 3.6333], abs=0.005)
    assert P.band_intervals([0, 1], [1, 1], 3, 10) == []


# ----------------------------------------------------------------------------- the smoke pipeline


def test_the_registry_names_every_figure_and_table():
    """The outputs' names under figures/ are the paper's; the registry lists each once."""
    assert FIGURES == ("fig_theory_scale", "fig_collapse", "fig_mse", "fig_improvement", "fig_threshold",
                       "fig_conformance", "fig_policies", "fig_realmodel_heads", "fig_realmodel_theory",
                       "fig_realmodel_outputs", "fig_fp4", "fig_decode", "fig_tensorcore", "fig_dynamic")
    assert TABLES == ("table_paired_tests", "table_scales", "table_thresholds", "table_conformance", "table_policies",
                      "table_realmodel", "table_fp4", "table_decode", "table_cases", "table_deployed")


def test_every_registered_output_has_a_rule_a_script_and_a_caption():
    """The registry, the rule files, the scripts and the report captions name the same outputs."""
    root = Path(__file__).resolve().parents[2]
    rules = "".join((root / "workflow" / "rules" / f"{f}.smk").read_text() for f in ("figures", "tables", "verdict", "tensorcore"))
    for o in registry.OUTPUTS:
        assert f"\nrule {o.name}:\n" in rules, o.name
        assert (root / "workflow" / "scripts" / f"{o.name}.py").exists(), o.name
        assert (root / "workflow" / "report" / f"{o.name}.rst").exists(), o.name
    assert sorted(o.name for o in registry.OUTPUTS) == sorted(FIGURES + TABLES + (registry.VERDICT,))


@pytest.mark.smoke_reader
def test_smoke_every_figure_and_table(smoke_run):
    fig_dir = smoke_run / "figures"
    logs = smoke_run / "results" / "logs" / "claims"
    for name in FIGURES:
        pdf, png, csv = (fig_dir / f"{name}.{e}" for e in ("pdf", "png", "csv"))
        assert pdf.read_bytes().startswith(b"%PDF") and pdf.stat().st_size > 5000, name
        assert png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 5000, name
        d = pd.read_csv(csv)
        # the smoke preset's real-model input is a cached layer (no model to run): F10 has no data and says so
        assert (len(d) == 0) == (name == "fig_realmodel_outputs"), name
        assert list(d.columns[:6]) == P.DATA_COLUMNS, name
        assert "data rows" in (logs / f"{name}.log").read_text(), name  # written through rule_log
    for name in TABLES:
        assert len(pd.read_csv(fig_dir / f"{name}.csv")) > 0, name
        tex = (fig_dir / f"{name}.tex").read_text()
        assert all(t in tex for t in (r"\toprule", r"\midrule", r"\bottomrule", r"\end{tabular}")), name
        md = (fig_dir / f"{name}.md").read_text()
        assert "|" in md and "---" in md, name
        assert (logs / f"{name}.log").exists(), name
    for name in STATS_RULES:
        assert "wrote" in (logs / f"{name}.log").read_text(), name
    verdict = json.loads((fig_dir / "claims.json").read_text())
    assert verdict["preset"] == "smoke"
    assert set(verdict["claims"]) == {"C1", "C2", "C3", "C4", "C5", "C6", "paper", "audit", "realmodel", "fp4", "decode",
                                      "tensorcore", "cases", "deployed", "conformance"}
    assert all(c["verdict"] in ("PASS", "PARTIAL", "FAIL", "INCONCLUSIVE") for c in verdict["claims"].values())
    assert "## C1:" in (fig_dir / "claims.md").read_text()
    assert "C1: " in (logs / "claims.log").read_text()


def test_smoke_changing_a_plot_script_reruns_only_that_plot(smoke_run):
    """The one test of a plot-only change: editing fig_mse's script reruns fig_mse and nothing else."""
    script = smoke_run / "workflow" / "scripts" / "fig_mse.py"
    original, stat = script.read_bytes(), script.stat()
    script.write_bytes(original + b"\n# a change to the plotting code\n")
    try:
        proc = subprocess.run(["snakemake", "-n", "--cores", "1", "--config", "preset=smoke"], cwd=smoke_run,
                              capture_output=True, text=True, timeout=120)
    finally:
        script.write_bytes(original)  # put back as it was: bytes and modification time
        os.utime(script, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert "Job stats:" in out, out[-3000:]
    lines = [line for line in out.split("Job stats:")[1].splitlines() if line.strip()]
    jobs = []
    for line in lines[2:]:  # after the header and the dashes
        name = line.split()[0]
        if name == "total":
            break
        if name != "all":
            jobs.append(name)
    assert jobs == ["fig_mse"], out[-3000:]


def test_f14_draws_every_cast_in_both_orders_with_the_theory(summaries):
    """F14: MSE and underflow for forward and reverse x {S=1, S=256, tile_max, row_block_max}, the theory dashed
    beside each measured underflow curve, each cast in its fixed color."""
    from pcast.analysis.plots.dynamic import CAST_STYLE

    t = _load(summaries)
    fig, d = P.fig_dynamic(t["dynamic"])
    for order in ("forward", "reverse"):
        for cast in ("S=1", "S=256", "tile_max", "row_block_max"):
            for what in ("MSE", "underflow", "theory"):
                assert (d["series"] == f"{cast} {order} {what}").sum() == 9, (cast, order, what)
    colors = {mcolors.to_hex(line.get_color()) for ax in fig.axes for line in ax.get_lines()}
    assert {mcolors.to_hex(CAST_STYLE[c]["color"]) for c in ("S=1", "S=256", "tile_max", "row_block_max")} <= colors
    plt.close(fig)
