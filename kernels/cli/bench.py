"""Benchmark: the emulator's attention throughput as a fraction of torch's float32 matmul throughput.

Run as ``pcast-bench`` (or ``python -m kernels.cli.bench``). Everything is measured in one
run on one machine, interleaved, so the ratio is robust to a noisy machine:

* emulator: ``kernels.attention(..., backend="emulator")`` on [B, 1, N, d] inputs,
  counted as 4·B·N²·d flops (QKᵀ and P·V);
* baseline "matmul pair": the same two float32 matmuls torch runs for plain attention
  at the same shapes (QKᵀ then S·V), i.e. torch's own throughput on this work;
* baseline "square": a large square float32 matmul (torch's peak on this machine).

The headline figure is emulator / matmul-pair throughput.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def _flops(b, n, d):
    return 4.0 * b * n * n * d


def measure(batch=8, n=1024, d=64, reps=7, seed=0, scale=256.0, order="forward"):
    from .. import attention

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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    args = ap.parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            ap.error(f"--threads={args.threads}: must be >= 1")
        torch.set_num_threads(args.threads)
    r = measure(batch=args.batch, n=args.n, d=args.d, reps=args.reps)
    gf = r["gflops"]
    print(f"shape {r['shape']}, {r['threads']} torch threads, median of {args.reps} interleaved runs")
    print(f"  emulator attention      {gf['emulator']:8.1f} GFLOP/s")
    print(f"  torch matmul pair       {gf['matmul_pair']:8.1f} GFLOP/s  (QK^T and PV at the same shapes)")
    print(f"  torch square matmul     {gf['square']:8.1f} GFLOP/s  (2048^3)")
    print(f"emulator / matmul pair = {r['ratio_vs_matmul_pair']:.2f}")
    print(f"emulator / square      = {r['ratio_vs_square']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
