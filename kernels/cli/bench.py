"""Benchmark: the emulator's attention throughput as a fraction of torch's float32 matmul throughput.

Run as ``pcast-bench`` (or ``python -m pcast.cli.bench``). Everything is measured in one
run on one machine, interleaved, so the ratio is robust to a noisy machine:

* emulator: ``pcast.attention(..., backend="emulator")`` on [B, 1, N, d] inputs,
  counted as 4·B·N²·d flops (QKᵀ and P·V);
* baseline "matmul pair": the same two float32 matmuls torch runs for plain attention
  at the same shapes (QKᵀ then S·V), i.e. torch's own throughput on this work;
* baseline "square": a large square float32 matmul (torch's peak on this machine).

The headline figure is emulator / matmul-pair throughput.

``pcast-bench --sweep`` measures instead the multi-run engine :func:`pcast.attention_calls` on a
collapse-shaped sweep, in runs per second, against its arithmetic floor:

* inputs built as the sweep shards build them: ``pcast.models.sinks.make_base(0, n=N, d=D)``, then
  ``pcast.pipeline.runs.value_stack`` at ksink 4 over a Δ grid 0, 1, ..., ``--deltas``-1 (one
  value tensor, sink_v_scale 1);
* engine: ONE ``attention_calls(q, k, values, calls, ksink=4, backend="emulator")`` with the four
  combinations order forward/reverse × scale 1/256, i.e. 4 × ``--deltas`` runs; "with reference"
  adds the float64 ``pcast.reference.reference_stack`` of the stack, once, as the shards do;
* floor: one float32 P·V matmul per run at the same shapes ([N, N] @ [N, D]), in the emulator's chunks
  of rows (:func:`pcast.cli.bench_sweep.floor_rows`: ``FUSED_CHUNK_ELEMS`` // padded N where the compiled pass
  runs, else ``CHUNK_ELEMS`` // padded N): the least matmul work a run must do;
* engine, floor and reference interleaved in one process, median of ``--reps``, at each thread count
  of ``--threads`` (default 1,2); ``--scaling`` adds the engine on a Δ grid 4× larger in the same
  interleave and reports the ratio of runs/s (4× grid / 1× grid; the issue wants it within ±15% of 1).

* eager bound (also interleaved): floor / (floor + the least elementwise work of an engine that forms every
  run's P in torch ops, one pass an op, sharing what the engine shares: reverse order's blocks past the sink
  block; :meth:`pcast.cli.bench_sweep.Sweep.eager_bound`): where engine / floor must stay below on this machine unless passes are
  fused or more of P is shared between runs.
* fused bound (also interleaved; with numba): floor / (floor + one exp per (order, Δ) and one cast per run over
  every padded key, at the compiled P path's own cost per element: its exp and its cast with the
  exact-decision test; :meth:`pcast.cli.bench_sweep.Sweep.fused_bound`): the least a fused engine adds to the floor.

The headline figure is engine / floor runs/s (the fraction of the floor reached). ``--json PATH``
writes the numbers (atomically), with the machine (:func:`machine`: CPU model, vendor, ISA, BLAS, cores, the
1-minute load before and after).

``--busy K`` runs either mode beside K busy processes (each a Python loop, started before the warm-up and
stopped after): the emulator's fraction of its matmul pair, both equally loaded.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from pcast import attention
from pcast.cli.bench_sweep import SWEEP_CALLS, SWEEP_DEFAULTS, SWEEP_KSINK, floor_rows, sweep_inputs
from pcast.cli.bench_sweep import Sweep as _Sweep
from pcast.contract import HEAD_DIMS
from pcast.emulator.calls import SHARING
from pcast.emulator.compiled import AVAILABLE


def machine() -> dict:
    """The machine a benchmark ran on: CPU model and vendor, torch's vector ISA, its BLAS, cores, torch."""
    info = {}
    try:
        for ln in open("/proc/cpuinfo").read().splitlines():
            key, _, val = ln.partition(":")
            key = key.strip()
            if key in ("model name", "vendor_id") and key not in info:
                info[key] = val.strip()
    except OSError:
        pass
    cfg = torch.__config__.show()
    blas = next((ln.split("=", 1)[1].strip() for ln in cfg.splitlines() if "BLAS_INFO=" in ln), "unknown")
    mkl = next((f"MKL {m.group(1)}" for ln in cfg.splitlines() if "Math Kernel Library" in ln
                for m in [re.search(r"Version ([\d.]+)", ln)] if m), None)
    return {"cpu": info.get("model name", platform.processor()), "vendor": info.get("vendor_id", "unknown"),
            "isa": torch.backends.cpu.get_cpu_capability(), "blas": mkl or blas, "cores": os.cpu_count(),
            "torch": torch.__version__, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}


@contextlib.contextmanager
def busy(k: int):
    """``k`` busy processes (Python loops) beside the block; the 1-minute load average at the end of the block
    is recorded in the yielded dict."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(k)]
    rec = {"busy": k, "load_before": round(os.getloadavg()[0], 2)}
    try:
        yield rec
        rec["load_after"] = round(os.getloadavg()[0], 2)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _flops(b, n, d):
    return 4.0 * b * n * n * d


def measure(batch=8, n=1024, d=64, reps=7, seed=0, scale=256.0, order="forward"):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(batch, 1, n, d, generator=g) for _ in range(3))
    a = torch.randn(2048, 2048, generator=g)
    b = torch.randn(2048, 2048, generator=g)

    def emu():
        attention(q, k, v, order=order, scale=scale, ksink=4, backend="emulator")

    def pair():
        torch.matmul(torch.matmul(q, k.transpose(-1, -2)), v)

    def square():
        torch.matmul(a, b)

    for f in (emu, pair, square):
        f()
    times = {"emulator": [], "matmul_pair": [], "square": []}
    for _ in range(reps):  # interleave so drifts in machine load hit all three alike
        for name, f in (("emulator", emu), ("matmul_pair", pair), ("square", square)):
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    med = {k_: statistics.median(v_) for k_, v_ in times.items()}
    fl = _flops(batch, n, d)
    gf = {"emulator": fl / med["emulator"] / 1e9, "matmul_pair": fl / med["matmul_pair"] / 1e9,
          "square": 2 * 2048**3 / med["square"] / 1e9}
    return {"gflops": gf, "ratio_vs_matmul_pair": gf["emulator"] / gf["matmul_pair"],
            "ratio_vs_square": gf["emulator"] / gf["square"], "threads": torch.get_num_threads(),
            "shape": (batch, 1, n, d)}


def _timed(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def _measure_at(main, big, reps):
    """Interleaved timings of ``main`` (and the engine on ``big``, a 4× Δ grid, when given) at torch's
    current thread count."""
    before = dict(SHARING)
    counted = main.engine()  # warm-up (BLAS, the emulator's slice probes) and the run count
    sharing = {k_: SHARING[k_] - before[k_] for k_ in SHARING}
    if counted != main.runs:
        raise RuntimeError(f"attention_calls ran {counted} runs, expected {main.runs}")
    main.floor()
    main.reference()
    main.eager_bound()
    fused = _compiled_available()
    if fused:
        main.fused_bound()
    if big is not None:
        big.engine()
    times = ({"engine": [], "floor": [], "reference": [], "eager": []} | ({"fused": []} if fused else {})
             | ({"engine_4x": []} if big is not None else {}))
    for _ in range(reps):  # interleaved: drifts in machine load hit every part alike
        times["engine"].append(_timed(main.engine))
        times["floor"].append(_timed(main.floor))
        times["reference"].append(_timed(main.reference))
        times["eager"].append(_timed(main.eager_bound))
        if fused:
            times["fused"].append(_timed(main.fused_bound))
        if big is not None:
            times["engine_4x"].append(_timed(big.engine))
    med = {k_: statistics.median(v_) for k_, v_ in times.items()}
    with_ref = statistics.median(e + r for e, r in zip(times["engine"], times["reference"]))
    row = {"threads": torch.get_num_threads(),
           "engine_runs_per_s": main.runs / med["engine"],
           "floor_runs_per_s": main.runs / med["floor"],
           "fraction_of_floor": med["floor"] / med["engine"],
           "with_reference_runs_per_s": main.runs / with_ref,
           "eager_bound_fraction": med["floor"] / (med["floor"] + med["eager"]),
           "fused_bound_fraction": med["floor"] / (med["floor"] + med["fused"]) if fused else None,
           "seconds": times, "sharing": sharing}
    if big is not None:
        row["scaling"] = {"deltas": len(big.deltas), "runs": big.runs,
                          "engine_runs_per_s": big.runs / med["engine_4x"],
                          "ratio": (big.runs / med["engine_4x"]) / row["engine_runs_per_s"]}
    return row


def _compiled_available() -> bool:
    return AVAILABLE


def measure_sweep(n=1024, d=64, deltas=16, reps=5, threads=(1, 2), scaling=False, seed=0):
    """``pcast-bench --sweep``'s numbers (module docstring): one dict per thread count under ``results``.
    torch's thread count is restored after."""
    main = _Sweep(n, d, deltas, seed)
    big = _Sweep(n, d, 4 * deltas, seed) if scaling else None
    old = torch.get_num_threads()
    results = []
    try:
        for t in threads:
            torch.set_num_threads(t)
            results.append(_measure_at(main, big, reps))
    finally:
        torch.set_num_threads(old)
    return {"n": n, "d": d, "ksink": SWEEP_KSINK, "deltas": len(main.deltas), "calls": [dict(c) for c in SWEEP_CALLS],
            "runs": main.runs, "reps": reps, "statistic": "median", "floor_rows": main.rows,
            "scaling": bool(scaling), "results": results}


def _write_json(path, data):
    """``data`` as JSON at ``path``: a temporary file in the same folder, then os.replace."""
    path = os.path.abspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".pcast-bench-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _print_sweep(r):
    print(f"attention_calls sweep: N={r['n']} d={r['d']} ksink={r['ksink']}, {r['deltas']} Δ x "
          f"{len(r['calls'])} (order, scale) = {r['runs']} runs per call; median of {r['reps']} interleaved reps")
    print(f"floor: one float32 P·V matmul per run ([{r['n']}, {r['n']}] @ [{r['n']}, {r['d']}] in chunks of "
          f"{r['floor_rows']} rows)")
    head = (f"{'threads':>7}  {'engine runs/s':>13}  {'floor runs/s':>12}  {'engine/floor':>12}  {'with reference':>14}"
            f"  {'eager bound':>11}  {'fused bound':>11}")
    if r["scaling"]:
        s0 = r["results"][0]["scaling"]
        head += f"  {str(s0['deltas']) + ' Δ runs/s':>14}  {'4x/1x':>6}"
    print(head)
    for row in r["results"]:
        line = (f"{row['threads']:>7}  {row['engine_runs_per_s']:>13.1f}  {row['floor_runs_per_s']:>12.1f}  "
                f"{row['fraction_of_floor']:>12.3f}  {row['with_reference_runs_per_s']:>14.1f}"
                f"  {row['eager_bound_fraction']:>11.3f}  " + (f"{row['fused_bound_fraction']:>11.3f}"
                                                               if row["fused_bound_fraction"] is not None else
                                                               f"{'-':>11}"))
        if r["scaling"]:
            sc = row["scaling"]
            line += f"  {sc['engine_runs_per_s']:>14.1f}  {sc['ratio']:>6.2f}"
        print(line)
    print("eager bound: floor / (floor + the least elementwise work of an engine that forms every run's P in "
          "torch ops, one pass an op: exp once per order and Δ, and per run the cast's two passes and the p_q > 0 "
          "count, over every key forward and the leading block reverse, and the alpha weights); engine/floor "
          "stays below it unless passes are fused or more of P is shared between runs; fused bound: floor / (floor + "
          "one compiled exp per order and Δ and one compiled cast per run over every key), the least a fused engine "
          "adds")


def _threads_list(ap, text):
    parts = [p.strip() for p in str(text).split(",")]
    try:
        vals = [int(p) for p in parts]
    except ValueError:
        vals = None
    if not vals or any(v < 1 for v in vals):
        ap.error(f"--threads={text!r}: must be positive integers separated by commas, e.g. 1,2")
    return vals


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", action="store_true",
                    help="measure pcast.attention_calls on a collapse-shaped Δ sweep in runs/s against its "
                         "P·V floor (see the module docstring)")
    ap.add_argument("--batch", type=int, default=None, help="default mode only (default 8)")
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--reps", type=int, default=None, help="default 7; 5 with --sweep")
    ap.add_argument("--threads", default=None,
                    help="torch intra-op threads (default: torch's choice); with --sweep a comma list (default 1,2)")
    ap.add_argument("--deltas", type=int, default=None, help="--sweep: Δ values in the grid (default 16)")
    ap.add_argument("--scaling", action="store_true", help="--sweep: also the engine on a Δ grid 4x larger")
    ap.add_argument("--json", default=None, metavar="PATH", help="write the numbers as JSON to PATH")
    ap.add_argument("--busy", type=int, default=0, metavar="K", help="run beside K busy processes (default 0)")
    args = ap.parse_args(argv)
    if args.busy < 0:
        ap.error(f"--busy={args.busy}: must be >= 0")
    if args.json is not None and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        ap.error(f"--json={args.json!r}: its folder does not exist")
    if args.sweep:
        return _main_sweep(ap, args)
    if args.deltas is not None:
        ap.error("--deltas needs --sweep")
    if args.scaling:
        ap.error("--scaling needs --sweep")
    reps = 7 if args.reps is None else args.reps
    if reps < 1:
        ap.error(f"--reps={reps}: must be >= 1")
    if args.threads is not None:
        threads = _threads_list(ap, args.threads)
        if len(threads) != 1:
            ap.error(f"--threads={args.threads!r}: one thread count without --sweep")
        torch.set_num_threads(threads[0])
    with busy(args.busy) as load:
        r = measure(batch=8 if args.batch is None else args.batch, n=args.n, d=args.d, reps=reps)
    r.update(machine=machine(), **load)
    gf = r["gflops"]
    print(f"shape {r['shape']}, {r['threads']} torch threads, median of {reps} interleaved runs; "
          f"{args.busy} busy processes beside, 1-minute load {load['load_before']:g} before, {load['load_after']:g} after")
    print(f"  emulator attention      {gf['emulator']:8.1f} GFLOP/s")
    print(f"  torch matmul pair       {gf['matmul_pair']:8.1f} GFLOP/s  (QK^T and PV at the same shapes)")
    print(f"  torch square matmul     {gf['square']:8.1f} GFLOP/s  (2048^3)")
    print(f"emulator / matmul pair = {r['ratio_vs_matmul_pair']:.2f}")
    print(f"emulator / square      = {r['ratio_vs_square']:.2f}")
    if args.json is not None:
        _write_json(args.json, r)
    return 0


def _main_sweep(ap, args):
    """``--sweep``: every argument checked (argparse error naming the option) before any work."""
    if args.batch is not None:
        ap.error("--batch is not used by --sweep (the batch is the Δ grid: --deltas)")
    if args.n < 16:
        ap.error(f"--n={args.n}: must be >= 16")
    if args.d not in HEAD_DIMS:  # pcast.models.sinks.make_base draws d a power of two in 16..256
        ap.error(f"--d={args.d}: must be one of {', '.join(map(str, HEAD_DIMS))} (a power of two, a multiple of "
                 "16 up to 256, as pcast.models.sinks.make_base draws)")
    deltas = SWEEP_DEFAULTS["deltas"] if args.deltas is None else args.deltas
    if deltas < 1:
        ap.error(f"--deltas={deltas}: must be >= 1")
    reps = SWEEP_DEFAULTS["reps"] if args.reps is None else args.reps
    if reps < 1:
        ap.error(f"--reps={reps}: must be >= 1")
    threads = _threads_list(ap, SWEEP_DEFAULTS["threads"] if args.threads is None else args.threads)
    with busy(args.busy) as load:
        r = measure_sweep(n=args.n, d=args.d, deltas=deltas, reps=reps, threads=threads, scaling=args.scaling)
    r.update(machine=machine(), **load)
    _print_sweep(r)
    if args.json is not None:
        _write_json(args.json, r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
