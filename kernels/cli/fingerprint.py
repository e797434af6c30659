"""``pcast-fingerprint module:function [--d 128] [--dtype bf16] [--small]``: which P policy an attention callable
implements.

The callable is imported from ``module`` (on ``sys.path``, the working directory included) and called as
``function(q, k, v, *, sink_logit=None) -> out [B, H, Nq, d]`` on the probes of
:func:`pcast.probes.fingerprint`, laid out as the kernel takes them (``--d``, ``--dtype``, ``--batch``,
``--heads``, ``--kv-heads``, ``--causal``). Prints the named preset (or group, or none), a near match with the
rows it misses and the options that explain them, whether learned sinks are supported, the distance to each
candidate with its worst probe row, the options identified one by one with their confidence, and what is
tolerated; ``--json`` writes the same as JSON. Exits 2 with a one-line error when an argument is bad, the target
cannot be loaded, the callable raises, or it returns the wrong shape, dtype or device.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

import torch

from pcast.probes import ProbeError, fingerprint


def _load(target: str):
    module, sep, name = target.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"target={target!r} is not allowed; allowed: module:function (e.g. mykernels.fp8:attn)")
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"target={target!r}: module {module!r} cannot be imported ({e})") from e
    fn = mod
    for part in name.split("."):
        if not hasattr(fn, part):
            raise ValueError(f"target={target!r}: {module!r} has no attribute {name!r}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise ValueError(f"target={target!r}: {name!r} is not callable")
    return fn


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pcast-fingerprint", description=__doc__.split("\n\n")[0])
    p.add_argument("target", help="module:function, an attention callable fn(q, k, v, *, sink_logit=None)")
    p.add_argument("--device", default="cpu", help="where the probe tensors go: cpu (default) or cuda")
    p.add_argument("--candidates", default=None, help="comma-separated preset names (default: every preset)")
    p.add_argument("--no-params", action="store_true", help="skip identifying the options one by one")
    p.add_argument("--d", type=int, default=None, help="the kernel's head dimension (a multiple of 16 up to 256; "
                   "default: 16, 64 or 256, the smallest power of four that holds a probe's rows)")
    p.add_argument("--dtype", default="float32", help="the kernel's input dtype: float32 (default), bf16, fp16")
    p.add_argument("--small", action="store_true", help="the small probe set (eight calls, at most 512 keys)")
    p.add_argument("--batch", type=int, default=1, help="B of the probe tensors (default 1)")
    p.add_argument("--heads", type=int, default=1, help="H, query heads (default 1)")
    p.add_argument("--kv-heads", type=int, default=None, help="H_kv, key/value heads dividing H (default H)")
    p.add_argument("--causal", action="store_true", help="the kernel applies a causal mask (bottom-right aligned)")
    p.add_argument("--allow", type=float, default=0.0, help="fraction of probe rows that may lie outside the "
                   "tolerance (default 0, as assert_policy; a compiled GPU kernel may need 0.02)")
    p.add_argument("--json", default=None, help="also write the result to this JSON file")
    return p


def _as_json(fp) -> dict:
    near = None if fp.near is None else {
        "candidate": fp.near, "rows_outside": fp.near_check.outside, "rows": fp.near_check.rows, "text": fp.near_text(),
        "probes": {n: b for n, b, _ in fp.near_check.missed},
        "explains": {o: {"kernel": v, "candidate": w} for o, (v, w) in fp.explains.items()}}
    sh = fp.shape
    return {"policy": fp.policy, "distance": fp.distance, "tolerance": fp.tolerance, "near": near,
            "worst": {n: {"probe": w[0], "row": w[1], "error": w[2]} for n, w in fp.worst.items()},
            "learned_sinks": {"supported": fp.sinks.supported, "reason": fp.sinks.reason},
            "shape": {"d": sh.d, "dtype": str(sh.dtype).removeprefix("torch."), "batch": sh.batch, "heads": sh.heads,
                      "kv_heads": sh.h_kv, "causal": sh.causal}, "allow": fp.allow,
            "params": {n: {"value": p.value, "confidence": p.confidence, "consistent": list(p.consistent)}
                       for n, p in fp.params.items()}}


def main(argv=None) -> int:
    args = _parser().parse_args(argv)

    try:
        if args.device not in ("cpu", "cuda"):
            raise ValueError(f"--device={args.device!r} is not allowed; allowed: cpu, cuda")
        if args.device == "cuda":
            if not torch.cuda.is_available():
                raise ValueError("--device=cuda is not allowed here: no CUDA device is available")
        fn = _load(args.target)
        cands = None if args.candidates is None else [c.strip() for c in args.candidates.split(",") if c.strip()]
        fp = fingerprint(fn, candidates=cands, device=args.device, params=not args.no_params, d=args.d,
                         dtype=args.dtype, small=args.small, batch=args.batch, heads=args.heads,
                         kv_heads=args.kv_heads, causal=args.causal, allow=args.allow)
    except (ValueError, ProbeError) as e:
        print(f"pcast-fingerprint: error: {e}", file=sys.stderr)
        return 2
    print(fp)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(_as_json(fp), f, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
