"""pcast-bench: ``--sweep`` (pcast.attention_calls in runs/s against its P·V floor) and the
default mode's output, at tiny shapes. Never asserts speed: only what is measured and how it is reported."""

import json
import subprocess
import sys

import pytest
import torch

from pcast.cli import bench
from pcast.cli.bench import SWEEP_CALLS, floor_rows, main
from pcast.emulator import fused
from pcast.emulator.compiled import AVAILABLE
from pcast.emulator.core import CHUNK_ELEMS
from pcast.emulator.fused import FUSED_CHUNK_ELEMS

TINY = ["--sweep", "--n", "64", "--d", "16", "--deltas", "2", "--reps", "1"]
ROW_KEYS = {"threads", "engine_runs_per_s", "floor_runs_per_s", "fraction_of_floor", "with_reference_runs_per_s",
            "eager_bound_fraction", "fused_bound_fraction", "seconds", "sharing"}


def _positive(x):
    return isinstance(x, (int, float)) and x > 0 and x == x and x != float("inf")


def test_sweep_json_counts_four_runs_per_delta_and_reports_positive_numbers(tmp_path, capsys):
    out = tmp_path / "bench.json"
    old = torch.get_num_threads()
    assert main([*TINY, "--threads", "1,2", "--json", str(out)]) == 0
    assert torch.get_num_threads() == old  # restored after the thread counts
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]  # atomic write: no temporary file left
    r = json.loads(out.read_text())
    assert {"n", "d", "ksink", "deltas", "calls", "runs", "reps", "statistic", "floor_rows", "scaling",
            "results"} <= set(r)
    assert (r["n"], r["d"], r["ksink"], r["deltas"], r["reps"]) == (64, 16, 4, 2, 1)
    assert r["calls"] == [{"order": o, "scale": s} for o in ("forward", "reverse") for s in (1.0, 256.0)]
    assert r["runs"] == 4 * 2
    assert [row["threads"] for row in r["results"]] == [1, 2]
    for row in r["results"]:
        assert set(row) == ROW_KEYS
        for key in ("engine_runs_per_s", "floor_runs_per_s", "fraction_of_floor", "with_reference_runs_per_s"):
            assert _positive(row[key]), (key, row[key])
        assert row["fraction_of_floor"] == pytest.approx(row["engine_runs_per_s"] / row["floor_runs_per_s"])
        assert row["with_reference_runs_per_s"] <= row["engine_runs_per_s"]  # the reference only adds time
        assert {k: len(v) for k, v in row["seconds"].items()} == {"engine": 1, "floor": 1, "reference": 1, "eager": 1,
                                                                  "fused": 1}
        sec = {k: v[0] for k, v in row["seconds"].items()}
        assert 0 < row["eager_bound_fraction"] < 1
        assert row["eager_bound_fraction"] == pytest.approx(sec["floor"] / (sec["floor"] + sec["eager"]))
        assert row["fused_bound_fraction"] == pytest.approx(sec["floor"] / (sec["floor"] + sec["fused"]))
        assert row["sharing"]["full"] > 0  # the engine call really ran the emulator's chunks
    text = capsys.readouterr().out
    assert "8 runs per call" in text and "engine/floor" in text and "with reference" in text
    assert "eager bound" in text and "fused bound" in text
    assert len([ln for ln in text.splitlines() if ln.split()[:1] in (["1"], ["2"])]) == 2  # one row per count


def test_sweep_runs_are_counted_from_what_attention_calls_returned(monkeypatch):
    s = bench._Sweep(64, 16, 3)
    assert s.engine() == len(SWEEP_CALLS) * 3 == s.runs
    from pcast.cli import bench_sweep

    def short(q, k, values, calls, **kw):  # an engine that drops a call must not pass as a full sweep
        return real(q, k, values, calls[:-1], **kw)

    real = bench_sweep.attention_calls
    monkeypatch.setattr(bench_sweep, "attention_calls", short)
    with pytest.raises(RuntimeError, match="ran 9 runs, expected 12"):
        bench._measure_at(s, None, 1)


def test_sweep_scaling_runs_a_grid_four_times_larger(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main([*TINY, "--threads", "1", "--scaling", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["scaling"] is True and r["runs"] == 8
    (row,) = r["results"]
    sc = row["scaling"]
    assert (sc["deltas"], sc["runs"]) == (8, 32)
    assert _positive(sc["engine_runs_per_s"]) and _positive(sc["ratio"])
    assert sc["ratio"] == pytest.approx(sc["engine_runs_per_s"] / row["engine_runs_per_s"])
    assert len(row["seconds"]["engine_4x"]) == 1
    assert "4x/1x" in capsys.readouterr().out


def test_floor_uses_the_emulators_chunk_of_rows(monkeypatch):
    elems = FUSED_CHUNK_ELEMS if AVAILABLE else CHUNK_ELEMS  # the compiled pass's chunks where it runs
    assert floor_rows(1024) == elems // 1024
    assert floor_rows(100) == elems // 128  # keys padded to a whole block of 64, as the emulator pads
    monkeypatch.setattr(fused, "ENABLED", False)
    assert floor_rows(1024) == CHUNK_ELEMS // 1024
    s = bench._Sweep(64, 16, 2)
    calls = []
    real = torch.matmul

    def counting(a, b, **kw):
        calls.append((tuple(a.shape), tuple(b.shape)))
        return real(a, b, **kw)

    monkeypatch.setattr(torch, "matmul", counting)
    s.floor()
    monkeypatch.undo()
    assert calls == [((64, 64), (64, 16))] * s.runs  # one P·V matmul per run at the runs' shapes


def test_eager_bound_does_each_units_exp_once_and_each_runs_passes_once(monkeypatch):
    """The eager bound: exp(s - m) once per (order, Δ, value) unit and chunk of rows, shared by the unit's
    scales; the cast's additions and the p_q > 0 count once per run and chunk, over every padded key in
    forward order and the leading block (64 keys) in reverse order, whose later blocks are the anchor's."""
    s = bench._Sweep(100, 16, 3)  # 100 keys: padded to 128, chunks of floor_rows(100) rows
    chunks = -(-100 // s.rows)
    assert s.units == 2 * 3 and s.runs == 4 * 3
    seen = {"sub": [], "add": [], "sign": []}
    for name in seen:
        real = getattr(torch, name)

        def counting(*a, _real=real, _name=name, **kw):
            seen[_name].append(tuple(a[0].shape))
            return _real(*a, **kw)

        monkeypatch.setattr(torch, name, counting)
    u, buf = s.eager_bound()
    monkeypatch.undo()
    assert len(seen["sub"]) == s.units * chunks and len(seen["add"]) == len(seen["sign"]) == s.runs * chunks
    widths = [sh[-1] for sh in seen["add"]]
    assert widths.count(128) == widths.count(64) == s.runs * chunks // 2  # forward: all 128; reverse: 64
    assert u.shape == buf.shape and u.shape[-1] == 64  # the last unit is reverse order's
    assert bool((u > 0).all()) and bool((u <= 1).all())  # p = exp(s - m) <= 1 under its block's max


@pytest.mark.parametrize("argv, option", [
    (["--n", "8"], "--n"),
    (["--d", "48"], "--d"),
    (["--d", "512"], "--d"),
    (["--deltas", "0"], "--deltas"),
    (["--reps", "0"], "--reps"),
    (["--threads", "0"], "--threads"),
    (["--threads", "1,x"], "--threads"),
    (["--threads", "1,-2"], "--threads"),
    (["--batch", "2"], "--batch"),
])
def test_bad_sweep_arguments_fail_naming_the_option_before_any_work(monkeypatch, capsys, argv, option):
    def no_work(*a, **kw):
        raise AssertionError("work started before the arguments were checked")

    monkeypatch.setattr(bench, "sweep_inputs", no_work)
    monkeypatch.setattr(bench, "measure_sweep", no_work)
    base = ["--sweep", "--n", "64", "--d", "16", "--deltas", "2", "--reps", "1"]
    with pytest.raises(SystemExit) as e:
        main([*base, *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert option in err.splitlines()[-1], err


@pytest.mark.parametrize("argv, option", [(["--deltas", "4"], "--deltas"), (["--scaling"], "--scaling"),
                                          (["--threads", "1,2"], "--threads"), (["--busy", "-1"], "--busy"),
                                          (["--json", "/no/such/folder/x.json"], "--json")])
def test_sweep_only_options_are_refused_without_sweep(monkeypatch, capsys, argv, option):
    monkeypatch.setattr(bench, "measure", lambda *a, **kw: pytest.fail("work started"))
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert option in capsys.readouterr().err.splitlines()[-1]


def test_bad_argument_through_the_module_entry_point():
    p = subprocess.run([sys.executable, "-m", "pcast.cli.bench", "--sweep", "--n", "4"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2
    assert p.stdout == ""
    assert "--n=4" in p.stderr.strip().splitlines()[-1]


def test_default_mode_output_is_unchanged_in_structure(one_thread, capsys, monkeypatch):
    # The printed figures are the measured ones, rounded (positive numbers are checked on what measure()
    # returned: at this tiny shape a ratio can round to 0.00 on a busy machine, which is no fault).
    measured = {}

    def spy(**kw):
        measured.update(real_measure(**kw))
        return measured

    real_measure = bench.measure
    monkeypatch.setattr(bench, "measure", spy)
    assert main(["--batch", "1", "--n", "64", "--d", "16", "--reps", "1", "--threads", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6
    assert lines[0].startswith("shape (1, 1, 64, 16), 1 torch threads, median of 1 interleaved runs; "
                               "0 busy processes beside, 1-minute load ")
    labels = ["  emulator attention", "  torch matmul pair", "  torch square matmul"]
    for line, label, key in zip(lines[1:4], labels, ("emulator", "matmul_pair", "square")):
        assert line.startswith(label) and "GFLOP/s" in line
        assert measured["gflops"][key] > 0
        assert float(line[len(label):].split()[0]) == pytest.approx(measured["gflops"][key], abs=0.05)
    for line, label, key in ((lines[4], "emulator / matmul pair = ", "ratio_vs_matmul_pair"),
                             (lines[5], "emulator / square      = ", "ratio_vs_square")):
        assert line.startswith(label) and measured[key] > 0
        assert float(line.split("= ")[1]) == pytest.approx(measured[key], abs=0.005)


def test_default_mode_beside_busy_processes_records_the_machine_and_load(one_thread, tmp_path, capsys):
    """``--busy K``: K busy processes run beside the measurement and are gone after it; the JSON names the
    machine (CPU model, vendor, ISA, BLAS) and the load."""
    import os

    out = tmp_path / "load.json"
    before = set(os.listdir("/proc"))
    assert main(["--batch", "1", "--n", "64", "--d", "16", "--reps", "1", "--threads", "1", "--busy", "2",
                 "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["busy"] == 2 and r["load_before"] >= 0 and r["load_after"] >= 0
    assert {"cpu", "vendor", "isa", "blas", "cores", "torch"} <= set(r["machine"])
    assert r["ratio_vs_matmul_pair"] > 0
    assert "2 busy processes beside" in capsys.readouterr().out
    def cmdline(pid):
        try:
            with open(f"/proc/{pid}/cmdline", errors="replace") as f:
                return f.read()
        except OSError:  # gone
            return ""

    left = [p for p in set(os.listdir("/proc")) - before if p.isdigit() and "while True" in cmdline(p)]
    assert not left  # the busy processes were stopped
