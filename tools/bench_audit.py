"""Time pcast-audit at model scale: ``python tools/bench_audit.py`` (a benchmark, not a test).

Writes a file shaped like a captured model (``layer{L}/q, k, v``, float32 [B, H, N, d]; default: MiniLM's
6 layers x 12 heads, d = 32, 8 passages of 512 tokens) with a sink at key 0 of every head (scores of
N(0, 1)-like spread, the sink's strength rising across heads), then runs

    pcast-audit FILE --policy fa3 --policy fa4 --json OUT --quiet

(your policy, the four reference combinations and two named policies, with the per-head measures the
JSON holds; ``--plain``: without --json, so without those measures) on ``--threads`` torch threads. It
prints the wall time, the CPU time the process used, and the machine's load average
(``os.getloadavg``: on a shared machine the load says how much of it the run had), the audit's matmul floor
timed in the same process (:func:`matmul_floor`) with wall / floor, and the peak resident memory; the audit
prints its own estimate first.

``--estimate-only`` prints the estimate of the audit for the shape without running it (for shapes too
large to time here, e.g. ``--layers 32 --heads 32 --n 4096 --batch 1``); ``--time-layers L`` times only the
first L layers and scales the time to all of them; ``--keep PATH`` only writes the file.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def make_file(path: str, *, layers: int, batch: int, heads: int, n: int, d: int, seed: int = 0) -> None:
    import torch
    from safetensors.torch import save_file

    tensors = {}
    for L in range(layers):
        g = torch.Generator().manual_seed(seed + L)
        q, k, v = (torch.randn(batch, heads, n, d, generator=g) for _ in range(3))
        direction = torch.randn(batch, heads, 1, d, generator=g)
        q = q + 1.5 * direction  # every query leans towards the sink's direction
        k[:, :, 0] = direction[:, :, 0] * torch.linspace(1.0, 6.0, heads)[None, :, None]
        tensors.update({f"layer{L}/q": q, f"layer{L}/k": k, f"layer{L}/v": v})
    save_file(tensors, path)


def matmul_floor(*, layers: int, batch: int, heads: int, n: int, d: int, runs: int, chunk: int = 1024) -> float:
    """Seconds of the audit's least matmul work, timed here on one (batch, head) and scaled to all of them: one
    float32 QKᵀ and one float32 P·V per run, and the float64 reference's QKᵀ and P·V, in chunks of ``chunk``
    query rows (as the audit runs them)."""
    import torch

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(n, d, generator=g) for _ in range(3))
    p = torch.softmax(torch.randn(min(chunk, n), n, generator=g), -1)
    q64, k64, v64, p64 = q.double(), k.double(), v.double(), p.double()
    torch.matmul(q[:chunk], k.T)  # (warm-up)
    t0 = time.perf_counter()
    for r0 in range(0, n, chunk):
        torch.matmul(q[r0:r0 + chunk], k.T)
        for _ in range(runs):
            torch.matmul(p, v)
        torch.matmul(q64[r0:r0 + chunk], k64.T)
        torch.matmul(p64, v64)
    return (time.perf_counter() - t0) * layers * batch * heads


def _peak_rss_gb() -> float:
    """This process's peak resident memory, GB (Linux reports kB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--d", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--time-layers", type=int, default=None, metavar="L")
    ap.add_argument("--estimate-only", action="store_true")
    ap.add_argument("--plain", action="store_true", help="without --json: no per-head measures (delta, sigma, mass)")
    ap.add_argument("--keep", default=None, metavar="PATH", help="only write the model-shaped file to PATH")
    args = ap.parse_args(argv)

    import torch

    from pcast.cli.audit import main as audit
    from pcast.audit.files import estimate
    from pcast.audit.heads import plan_runs
    from pcast.policies import POLICIES, Policy

    torch.set_num_threads(args.threads)
    runs = plan_runs(Policy("yours", order="reverse", scale=256.0), [POLICIES["fa3"], POLICIES["fa4"]])
    shape = f"{args.layers} layers x {args.heads} heads, {args.batch} x {args.n} tokens, d = {args.d}"
    if args.estimate_only:
        fake = torch.empty(args.batch, args.heads, args.n, args.d)
        note = estimate([(L, fake, fake, fake) for L in range(args.layers)], runs, measure=not args.plain,
                        min_seconds=0.0)
        print(f"{shape}: {note} (divide by the threads the run gets)")
        return 0
    if args.keep:
        make_file(args.keep, layers=args.layers, batch=args.batch, heads=args.heads, n=args.n, d=args.d)
        return 0
    timed = args.time_layers or args.layers
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.safetensors")
        make_file(path, layers=timed, batch=args.batch, heads=args.heads, n=args.n, d=args.d)
        load0 = os.getloadavg()
        t0, c0 = time.perf_counter(), time.process_time()
        extra = [] if args.plain else ["--json", os.path.join(tmp, "a.json")]
        code = audit([path, "--policy", "fa3", "--policy", "fa4", "--quiet", *extra])
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        load1 = os.getloadavg()
    peak = _peak_rss_gb()
    floor = matmul_floor(layers=timed, batch=args.batch, heads=args.heads, n=args.n, d=args.d, runs=len(runs) - 1)
    scaled = wall * args.layers / timed
    print(f"{shape}: {len(runs)} runs, exit {code}; {wall:.1f} s for {timed} layer(s) on {args.threads} torch "
          f"thread(s), {cpu:.1f} s of CPU time" + (f", {scaled:.0f} s scaled to {args.layers} layers" if timed != args.layers else "")
          + f"; matmul floor {floor:.1f} s (wall / floor = {wall / floor:.1f}); peak RSS {peak:.1f} GB"
          + f"; load average before {load0[0]:.2f}, after {load1[0]:.2f} on {os.cpu_count()} CPUs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
