"""GPU check: run on a machine with a CUDA GPU (capability >= 8.9), in well under 5 minutes.

``pcast-gpu-check`` (or ``python -m pcast.cli.gpu_check``) checks, and exits non-zero on failure:

1. the hardware float32 -> float8e4nv conversion (``.to(tl.float8e4nv)``, compiled) against
   the software quantizer ``fp8_round`` (compiled) and torch's cast, bit for bit, on every
   representable value, every midpoint and its neighbours, 10^7 log-uniform samples and
   saturation inputs below 464 (the hardware conversion without satfinite is not expected
   to saturate; only the finite range is compared);
2. the compiled kernel against the emulator (diagnostics and outputs, differences explained
   by :func:`pcast.conformance.explain`) in the four order x scale combinations, with and
   without causal, at N in {200, 1024, 4096}, d in {64, 128};
3. that tl.dot runs in IEEE fp32 (no TF32): the unrounded kernel matches the float64
   reference to 1e-5 relative, which TF32 (10-bit mantissa) cannot;
4. the deploy kernel (hardware cast, FP8 tensor core) against the emulator with the GPU's tensor-core
   arithmetic (``pv_arith``: mma-sm89, wgmma-sm90, tcgen05-sm100) and with float32 P·V (reported), and
   its timing at S = 1 against S = 256.

It prints one line per check and a JSON summary (``--json PATH`` writes it to a file).

``--compile-only`` needs no GPU: it compiles the kernels for sm_89, sm_90 and sm_100 on the CPU and checks
their instructions (:mod:`pcast.cli.compile_check`; docs/compiled.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time

import torch

from pcast.aot import deploy_attention
from pcast.api import attention, fp8_gpu_available
from pcast.cli.compile_check import run_compile_only
from pcast.conformance import compare, exp_rel_err_for, explain
from pcast.conformance.model import cast_operand
from pcast.contract import COMBOS
from pcast.emulator.tensorcore import pv_arith_for
from pcast.formats.quantize import quantize
from pcast.models.sinks import make_inputs


def _samples(n, seed):
    g = torch.Generator().manual_seed(seed)
    mag = torch.exp2(torch.rand(n, generator=g, dtype=torch.float64) * 30 - 20).float()
    return mag * torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)


def check_conversion():
    # lazy: pcast.triton needs Triton, which is not part of the slim install
    from pcast.triton.kernel import triton_builtin_cast, triton_quantize

    grid = torch.arange(0, 255, dtype=torch.uint8)
    vals = grid.view(torch.float8_e4m3fn).float()
    vals = vals[torch.isfinite(vals)].sort().values.unique()
    mids = (vals[1:] + vals[:-1]) / 2
    x = torch.cat([vals, mids, torch.nextafter(mids, torch.tensor(float("inf"))),
                   torch.nextafter(mids, torch.tensor(0.0)), _samples(10_000_000, 0)])
    x = x[x.abs() < 464]
    xc = x.cuda()
    hw = triton_builtin_cast(xc).cpu()
    sw = triton_quantize(xc).cpu()
    ref = x.to(torch.float8_e4m3fn).float()
    ours = quantize(x)
    return {
        "conversion_inputs": int(x.numel()),
        "hw_vs_cast_mismatches": int((hw.view(torch.int32) != ref.view(torch.int32)).sum()),
        "sw_compiled_vs_cast_mismatches": int((sw.view(torch.int32) != ref.view(torch.int32)).sum()),
        "torch_quantize_vs_cast_mismatches": int((ours.view(torch.int32) != ref.view(torch.int32)).sum()),
    }


def check_kernel():
    rows = []
    for n, d in ((200, 64), (1024, 128), (4096, 64)):
        q, k, v = make_inputs(n + d, heads=2, n=n, d=d, ksink=4, delta=8.0)
        for order, scale in COMBOS:
            for causal in (False, True):
                kw = dict(order=order, scale=scale, fmt="e4m3fn", causal=causal, ksink=4, block_n=64)
                t0 = time.perf_counter()
                a = attention(q.cuda(), k.cuda(), v.cuda(), backend="triton", **kw)
                torch.cuda.synchronize()
                dt = time.perf_counter() - t0
                b = attention(q, k, v, backend="emulator", **kw)
                rep = explain(result_on_cpu(a), b, q, k, v, exp_rel_err=exp_rel_err_for(a.backend, scale=scale), **kw)
                rows.append({"n": n, "d": d, **kw, "kernel_backend": a.backend, "seconds": dt,
                             **{x: rep[x] for x in ("max_rel_diff", "diag_equal", "mismatched_rows",
                                                    "fragile_elements", "explained", "why")}})
                print(f"  N={n} d={d} {order} S={scale:g} causal={causal}: explained={rep['explained']} "
                      f"diag_equal={rep['diag_equal']} max_rel={rep['max_rel_diff']:.2e}", flush=True)
    return rows


def result_on_cpu(r):
    """An :class:`~pcast.AttentionResult` with its tensors moved to the CPU (its other fields, None among them,
    as they are)."""
    return type(r)(**{f: (x.cpu() if torch.is_tensor(x) else x)
                      for f, x in ((f, getattr(r, f)) for f in r.__dataclass_fields__)})


def check_ieee_dot():
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 1, 1024, 128, generator=g) for _ in range(3))
    ref = attention(q, k, v, backend="reference").out
    out = attention(q.cuda(), k.cuda(), v.cuda(), fmt=None, backend="triton").out.cpu().double()
    return {"unrounded_vs_reference_rel": float((out - ref).abs().max() / ref.abs().max())}


# (name, keywords of pcast.attention beyond order/scale); "sink" asks for a learned sink logit of 6.
POLICY_CASES = (
    ("fa3-like", dict(scale_mode="exp2_offset", scale=256.0, order="reverse")),
    ("fa4-like", dict(scale_mode="exp2_offset", rescale_threshold=8.0, scale=256.0, order="reverse")),
    ("sage2-like", dict(scale_mode="exp2_offset", scale=448.0)),
    ("lazy-multiply", dict(rescale_threshold=8.0, scale=256.0)),
    ("vllm-init-sink", dict(sink="init", scale=1.0)),
    ("final-sink", dict(sink="final", scale=256.0, order="reverse", scale_mode="exp2_offset")),
    ("fp8-operands", dict(qk_fmt="e4m3fn", v_fmt="e4m3fn", scale=256.0, order="reverse")),
    # microscaled FP4 P: the group reshape and max, E4M3/E8M0 scales and per-row S_r, compiled
    ("nvfp4-s2048", dict(fmt="nvfp4", scale=2048.0)),
    ("nvfp4-per-row", dict(fmt="nvfp4", scale_mode="per_row")),
    ("mxfp4-reverse", dict(fmt="mxfp4", order="reverse")),
)


def check_policies(shapes=((200, 64), (1024, 128)), heads=2):
    """Compiled kernel vs emulator on every case of POLICY_CASES, with and without causal (``compare``:
    the kernel runs compiled when a GPU is present), and the in-kernel operand cast vs the reference."""
    rows = []
    for n, d in shapes:
        q, k, v = make_inputs(n + d + 1, heads=heads, n=n, d=d, ksink=4, delta=8.0)
        for name, case in POLICY_CASES:
            kw = dict(case)
            sink = kw.pop("sink", None)
            if sink is not None:
                kw.update(sink_logit=torch.full((heads,), 6.0), sink_mode=sink)
            for causal in (False, True):
                rep = compare(q, k, v, causal=causal, ksink=4, **kw)
                rows.append({"case": name, "n": n, "d": d, "causal": causal, **{x: rep[x] for x in (
                    "kernel_backend", "max_rel_diff", "diag_equal", "fragile_elements", "walk_fragile_rows",
                    "explained", "why")}})
                print(f"  {name} N={n} d={d} causal={causal}: explained={rep['explained']} "
                      f"diag_equal={rep['diag_equal']} max_rel={rep['max_rel_diff']:.2e}", flush=True)
    q, k, v = make_inputs(7, heads=heads, n=shapes[0][0], d=shapes[0][1], ksink=4, delta=8.0)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    out = attention(q.to(dev), k.to(dev), v.to(dev), fmt=None, qk_fmt="e4m3fn", v_fmt="e4m3fn",
                    backend="triton").out.cpu().double()
    ref = attention(*(cast_operand(t, "e4m3fn") for t in (q, k, v)), backend="reference").out
    cast = {"operand_cast_vs_reference_rel": float((out - ref).abs().max() / ref.abs().max())}
    return rows, cast


def check_deploy(n=4096, d=64, heads=8, reps=20, capability=None):
    """The deploy kernel (``backend="triton-fp8"``) on the GPU: its output against the emulator with FP8 V, the
    exp2 offset and the GPU's tensor-core arithmetic (``pv_arith`` of ``capability``, default the GPU's; None where
    no model exists), and against float32 P·V; then a timing of S = 1 against S = 256 (median of ``reps``
    launches each, interleaved). Without a GPU: the emulator's side, then the deploy kernel's RuntimeError."""
    # lazy: pcast.triton needs Triton, which is not part of the slim install
    from pcast.triton.deploy import NO_GPU_MESSAGE

    if capability is None and not fp8_gpu_available():
        raise RuntimeError(NO_GPU_MESSAGE)
    arith = pv_arith_for(torch.cuda.get_device_capability() if capability is None else capability)
    q, k, v = make_inputs(11, heads=heads, n=n, d=d, ksink=4, delta=8.0)
    rows, times = [], {1.0: [], 256.0: []}
    for scale in (1.0, 256.0):
        kw = dict(order="reverse", scale=scale, scale_mode="exp2_offset", v_fmt="e4m3fn", ksink=4)
        fp32 = attention(q, k, v, backend="emulator", **kw).out
        tc = None if arith is None else attention(q, k, v, backend="emulator", pv_arith=arith, **kw).out
        out = deploy_attention(q, k, v, **kw).cpu()
        row = {"scale": scale, "pv_arith": arith, "vs_emulator_fp32_max_rel": _max_rel(out, fp32)}
        if tc is not None:
            row.update(vs_emulator_pv_arith_max_rel=_max_rel(out, tc),
                       identical_to_pv_arith=float((out.view(torch.int32) == tc.view(torch.int32)).double().mean()))
        rows.append(row)
    qc, kc, vc = q.cuda(), k.cuda(), v.cuda()
    for _ in range(reps):
        for scale in (1.0, 256.0):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            deploy_attention(qc, kc, vc, order="reverse", scale=scale)
            torch.cuda.synchronize()
            times[scale].append(time.perf_counter() - t0)
    med = {s: sorted(t)[len(t) // 2] for s, t in times.items()}
    return {"outputs": rows, "seconds_median": med, "s256_over_s1": med[256.0] / med[1.0]}


def _max_rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def main(argv=None):
    ap = argparse.ArgumentParser(description="GPU conformance check")
    ap.add_argument("--json", default=None, help="also write the summary to this file")
    ap.add_argument("--compile-only", action="store_true",
                    help="no GPU needed: compile for sm_89, sm_90, sm_100 and check the instructions")
    ap.add_argument("--targets", default="sm_89,sm_90,sm_100", help="with --compile-only: comma-separated targets")
    ap.add_argument("--full", action="store_true", help="with --compile-only: also every preset at its blocks")
    ap.add_argument("--jobs", type=int, default=None, help="with --compile-only: processes (default: the CPUs)")
    args = ap.parse_args(argv)
    if importlib.util.find_spec("triton") is None:
        print("pcast-gpu-check needs Triton, which the slim install leaves out: "
              "pip install 'pcast-fp8[triton]'", file=sys.stderr)
        return 2
    if args.compile_only:
        return _compile_only(args)

    if not fp8_gpu_available():
        print("no CUDA GPU with capability >= 8.9: nothing to check", file=sys.stderr)
        return 2
    print(f"GPU: {torch.cuda.get_device_name()}  capability {torch.cuda.get_device_capability()}")
    conv = check_conversion()
    print("conversion:", conv, flush=True)
    rows = check_kernel()
    ieee = check_ieee_dot()
    print("ieee dot:", ieee)
    policies, cast = check_policies()
    print("operand cast:", cast)
    deploy = check_deploy()
    print("deploy kernel (triton-fp8):", deploy, flush=True)
    ok = (conv["sw_compiled_vs_cast_mismatches"] == 0 and conv["torch_quantize_vs_cast_mismatches"] == 0
          and all(r["explained"] for r in rows) and ieee["unrounded_vs_reference_rel"] <= 1e-5
          and all(r["explained"] for r in policies) and cast["operand_cast_vs_reference_rel"] <= 1e-5)
    summary = {"ok": ok, "device": torch.cuda.get_device_name(), "conversion": conv, "kernel": rows, "ieee": ieee,
               "policies": policies, "operand_cast": cast, "deploy": deploy,
               "hardware_conversion_identical": conv["hw_vs_cast_mismatches"] == 0}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=1, default=str)
    print("GPU CHECK", "PASSED" if ok else "FAILED",
          "(hardware conversion", "identical)" if summary["hardware_conversion_identical"] else "differs)")
    return 0 if ok else 1


def _compile_only(args) -> int:
    t0 = time.perf_counter()
    try:
        ok, rows, comp = run_compile_only(tuple(t for t in args.targets.split(",") if t), full=args.full,
                                          jobs=args.jobs)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"ok": ok, "rows": [{k: v for k, v in r.items() if k != "loop_sass"} for r in rows],
                       "scale_comparison": comp}, fh, indent=1)
    print(f"COMPILE CHECK {'PASSED' if ok else 'FAILED'}: {len(rows)} kernels in {time.perf_counter() - t0:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
