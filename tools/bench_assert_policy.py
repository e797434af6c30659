"""Time a failing :func:`pcast.probes.assert_policy` (a benchmark, not a test): ``python tools/bench_assert_policy.py``.

A plain PyTorch blocked FP8-P kernel written here (forward KV-block order, S = 1, block_n = 64, E4M3 P by
torch's own cast, float32 accumulation) is asserted against a policy it does not implement (``fa3``: reverse,
exp2 offset 8, block_n = 160) with the default probes at ``--d`` (128) and ``--dtype`` (bf16), diagnosis on; the
kernel takes no learned sink, so ``sinks=False`` leaves the sink probes out.
A first call (``diagnose=False``, not timed) loads what a process loads once (numba's cache, torch's kernels).
It prints, per repeat: the wall time of the failing call, the callable's own time inside it (every call of the
kernel timed), the time of the check and diagnosis alone (wall minus callable), the same call with
``diagnose=False`` (the floor: the probes run and checked, no search), the ratio of the two, the first line of
the diagnosis, the CPU and the load average before and after (``os.getloadavg``; the machine may be shared).

``--policy NAME``: the declared policy; ``--repeats R``: repeats (the first warms the expected-output cache of
neither: each repeat clears it, so each is a cold CI call).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch

_FP8_MAX = 448.0


def blocked_forward_s1(q, k, v, sink_logit=None, *, block_n: int = 64, scale: float = 1.0):
    """Forward-order online softmax over KV blocks of ``block_n`` with P cast to E4M3 (``scale`` times
    exp(s - m)) before P·V; the row sum of the unrounded P; float32 throughout. ``sink_logit`` is ignored:
    the kernel has no learned sinks (it is asserted with ``sinks=False``)."""
    q32, k32, v32 = (t.float() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k32, v32 = (t.repeat_interleave(group, dim=1) for t in (k32, v32))
    sm = torch.tensor(1.0 / q.shape[-1] ** 0.5, dtype=torch.float32)
    s = (q32.double() @ k32.double().transpose(-1, -2)).float() * sm  # exact products, rounded once
    m = torch.full(s.shape[:-1], float("-inf"))
    acc = torch.zeros(*s.shape[:-1], v.shape[-1])
    rowsum = torch.zeros(s.shape[:-1])
    for j in range(0, s.shape[-1], block_n):
        sb = s[..., j:j + block_n]
        m_new = torch.maximum(m, sb.amax(-1))
        alpha = torch.exp(m - m_new)
        p = torch.exp(sb - m_new[..., None])
        p8 = (p * scale).clamp(max=_FP8_MAX).to(torch.float8_e4m3fn).float()
        acc = acc * alpha[..., None] + p8 @ v32[..., j:j + block_n, :]
        rowsum = rowsum * alpha + p.sum(-1) * scale
        m = m_new
    return (acc / rowsum[..., None]).to(q.dtype)


def _timed(fn, clock):
    def box(q, k, v):
        t0 = time.perf_counter()
        try:
            return fn(q, k, v)
        finally:
            clock[0] += time.perf_counter() - t0
    return box


def one(policy, *, d, dtype, diagnose):
    from pcast.probes import assert_policy
    from pcast.probes import expect

    expect._CACHE.clear()  # a cold call, as a CI job makes it
    clock = [0.0]
    t0 = time.perf_counter()
    try:
        assert_policy(_timed(blocked_forward_s1, clock), policy, d=d, dtype=dtype, diagnose=diagnose, sinks=False)
        message = "(passed)"
    except AssertionError as e:
        message = str(e)
    wall = time.perf_counter() - t0
    return wall, clock[0], message


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="fa3")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"CPU: {cpu}, {os.cpu_count()} cores; torch threads {torch.get_num_threads()}")
    print(f"failing assert_policy(blocked forward S=1 kernel, {args.policy!r}), default probes, d={args.d}, "
          f"{args.dtype}")
    one(args.policy, d=args.d, dtype=dtype, diagnose=False)  # warm-up, not timed
    for r in range(args.repeats):
        load0 = os.getloadavg()[0]
        floor, floor_fn, _ = one(args.policy, d=args.d, dtype=dtype, diagnose=False)
        wall, fn_time, message = one(args.policy, d=args.d, dtype=dtype, diagnose=True)
        load1 = os.getloadavg()[0]
        own, floor_own = wall - fn_time, floor - floor_fn
        print(f"repeat {r}: diagnose=True {wall:.2f} s (callable {fn_time:.2f} s, check and diagnosis "
              f"{own:.2f} s); diagnose=False {floor:.2f} s (callable {floor_fn:.2f} s, check {floor_own:.2f} s); "
              f"diagnosis / floor (without the callable) {own / floor_own:.2f}x; load {load0:.2f} -> {load1:.2f}")
    print("diagnosis: " + " | ".join(line for line in message.splitlines() if not line.startswith("  probe")))


if __name__ == "__main__":
    main()
