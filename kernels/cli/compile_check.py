"""``pcast-gpu-check --compile-only``: the kernels compiled for sm_89, sm_90 and sm_100 on a CPU, each
compiled kernel's instructions checked (:mod:`pcast.triton.aot_checks`; docs/compiled.md).

The representative set, per target: Triton's own cast (``builtin-cast``); the faithful kernel at the
pipeline's shape (64 x 64 blocks, d = 64) and :data:`SMALL_SPECS`, small tiles that between them set
every constexpr of ``_attn_fwd`` to each of its values (order, causal, P format E4M3 / E5M2 / none /
NVFP4 / MXFP4, row sum, scale mode multiply / exp2_offset / per_row, lazy rescale, sink mode none / init
/ final, Q·K and V operand casts); the deploy kernel at S = 1 and S = 256 (64 x 64, d = 64) and their
SASS compared. ``--full`` adds every named preset at its own block sizes (d = 128): minutes more.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import time

import torch

from pcast.aot import attention_launch_for, compile_attention
from pcast.policies import POLICIES
from pcast.triton import aot_checks as C

_SMALL = dict(n=64, d=16, block_m=16, block_n=16, ksink=4)
SMALL_SPECS = (
    ("reverse-causal-e5m2-rounded", dict(_SMALL, order="reverse", causal=True, fmt="e5m2", rowsum="rounded")),
    ("unrounded", dict(_SMALL, fmt=None)),
    ("exp2-lazy-final-sink", dict(_SMALL, scale=256.0, scale_mode="exp2_offset", rescale_threshold=8.0,
                                  sink_logit="final")),
    ("init-sink-fp8-operands", dict(_SMALL, sink_logit="init", qk_fmt="e4m3fn", v_fmt="e5m2")),
    ("nvfp4-per-row", dict(_SMALL, fmt="nvfp4", scale_mode="per_row")),
    ("mxfp4-reverse", dict(_SMALL, block_n=32, fmt="mxfp4", order="reverse")),
)
PIPELINE = dict(n=1024, d=64, scale=256.0, ksink=4)  # the four combinations' shape in config.yaml
DEPLOY = dict(n=1024, d=64, causal=False)


def tasks(targets, *, full=False) -> list[tuple[str, str, str, dict]]:
    """``(name, target, kind, keywords)`` of every kernel to compile; kind: "cast", "faithful", "deploy"."""
    faithful = (("pipeline-64", PIPELINE),) + SMALL_SPECS
    if full:
        faithful += tuple((f"preset-{p}", dict(n=1024, d=128, ksink=4, policy=p)) for p in POLICIES)
    out = []
    for t in targets:
        out.append(("builtin-cast", t, "cast", {}))
        out += [(name, t, "faithful", kw) for name, kw in faithful]
        out += [(f"deploy-S{s:g}", t, "deploy", dict(DEPLOY, scale=s)) for s in (1.0, 256.0)]
    return out


def _options(kw: dict) -> dict:
    """compile_attention keywords: ``sink_logit="init"/"final"`` becomes a sink logit in that mode."""
    kw = dict(kw)
    mode = kw.pop("sink_logit", None)
    if mode is not None:
        kw.update(sink_logit=torch.full((2,), 6.0), sink_mode=mode)
    return kw


def _compile(target, kind, kw):
    """(facts, checks) of one kernel."""
    # lazy: pcast.triton needs Triton, which is not part of the slim install
    from pcast.triton.aot import compile_launch, kernel_facts
    # lazy: pcast.triton needs Triton, which is not part of the slim install
    from pcast.triton.kernel import LAUNCH_OPTIONS, _builtin_cast_kernel

    if kind == "cast":
        x = torch.zeros(4096)
        f = kernel_facts(compile_launch(target, _builtin_cast_kernel, (x, x.clone(), 4096),
                                        {"BLOCK": 4096, **LAUNCH_OPTIONS}))
        return f, {"target": C.check_target(f), "cast": C.check_cast(f, hardware=True)}
    backend = "triton-fp8" if kind == "deploy" else "triton"
    opts = _options(kw)
    _, _, _, k = attention_launch_for(backend=backend, target=target, **opts)
    f = kernel_facts(compile_attention(target, backend=backend, **opts))
    dots = C.dot_fmas(k["BLOCK_M"], k["BLOCK_N"], k["HEAD_D"], f["num_warps"]) // (2 if kind == "deploy" else 1)
    checks = {"target": C.check_target(f), "fusion": C.check_fusion(f, dots), "tf32": C.check_no_tf32(f),
              "exp": C.check_exp(f, kind == "deploy" or k["EXP2_OFFSET"]), "div": C.check_div(f),
              "cast": C.check_cast(f, hardware=kind == "deploy"), "spills": C.check_spills(f)}
    if kind == "deploy":
        checks["fp8_mma"] = C.check_fp8_mma(f)
    return f, checks


def run_task(task) -> dict:
    """Compile and check one task: a report row (JSON-able)."""
    name, target, kind, kw = task
    t0 = time.perf_counter()
    f, checks = _compile(target, kind, kw)
    return {"spec": name, "target": target, "kind": kind, "seconds": time.perf_counter() - t0,
            "shared": f["shared"], "reg": f["reg"], "stack": f["stack"], "num_warps": f["num_warps"],
            "exp": C.exp_instructions(f), "cast": C.cast_instructions(f),
            "checks": {k: {"ok": ok, "detail": d} for k, (ok, d) in checks.items()},
            "ok": all(ok for ok, _ in checks.values()),
            "sass": f["sass"], "loop_sass": f["loop_sass"]}


def _line(row: dict) -> str:
    bad = [f"{k}: {v['detail']}" for k, v in row["checks"].items() if not v["ok"]]
    mma = row["checks"].get("fp8_mma", {}).get("detail", "").split("'")[1:2]
    return (f"  {row['spec']:28s} {row['target']:6s} {'PASS' if row['ok'] else 'FAIL'}  smem {row['shared']:6d} B"
            f"  regs {row['reg']:3d}  warps {row['num_warps']:2d}  stack {row['stack']:4d} B  exp "
            f"{','.join(row['exp']) or '-'}  cast {','.join(c for c in row['cast'] if 'satfinite' in c) or 'fp8_round'}"
            f"{'  mma ' + mma[0] if mma else ''}  {row['seconds']:5.1f} s" + "".join(f"\n      {x}" for x in bad))


def scale_comparison(rows) -> list[dict]:
    """Per target, the deploy kernel's S = 1 and S = 256 SASS compared (``compare_scales``)."""
    out = []
    for t in sorted({r["target"] for r in rows if r["kind"] == "deploy"}):
        a, b = (next(r for r in rows if r["target"] == t and r["spec"] == f"deploy-S{s}") for s in ("1", "256"))
        ok, d = C.compare_scales(a, b)
        out.append({"target": t, "ok": ok, **d})
    return out


def run_compile_only(targets=("sm_89", "sm_90", "sm_100"), *, full=False, jobs=None):
    """Compile and check every task (``jobs`` processes), print one line per kernel and the S comparison."""
    from pcast.triton.aot import TARGETS  # lazy: pcast.triton needs Triton, which is not part of the slim install

    bad = [t for t in targets if t not in TARGETS]
    if bad or not targets:
        raise ValueError(f"--targets {','.join(bad)!r} is not allowed; allowed: a comma-separated subset of "
                         f"{', '.join(TARGETS)}")
    todo = tasks(targets, full=full)
    jobs = jobs or min(len(todo), os.cpu_count() or 1)
    if jobs > 1:
        with cf.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            rows = list(pool.map(run_task, todo))
    else:
        rows = [run_task(t) for t in todo]
    for r in rows:
        print(_line(r), flush=True)
    comp = scale_comparison(rows)
    for c in comp:
        print(f"  S=1 vs S=256 {c['target']:6s} {'PASS' if c['ok'] else 'FAIL'}  KV loop {c['loop'][0]} vs "
              f"{c['loop'][1]} instructions {c['loop_diff'] or '{}'}; kernel {c['total'][0]} vs {c['total'][1]} "
              f"{c['total_diff'] or '{}'}")
    return all(r["ok"] for r in rows) and all(c["ok"] for c in comp), rows, comp
