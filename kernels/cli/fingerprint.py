"""``pcast-fingerprint module:function [--device cuda]``: which P policy an attention callable implements.

The callable is imported from ``module`` (on ``sys.path``, the working directory included) and called as
``function(q, k, v, *, sink_logit=None) -> out [B, H, Nq, d]`` on the probes of
:func:`pcast.probes.fingerprint`. Prints the matching preset (or group, or none), the distance to each
candidate, the options identified one by one with their confidence, and what is tolerated; ``--json``
writes the same as JSON. Exits 2 with a one-line error when the target cannot be loaded, the callable
raises, or it returns the wrong shape, dtype or device.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys


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
    p.add_argument("--json", default=None, help="also write the result to this JSON file")
    return p


def _as_json(fp) -> dict:
    return {"policy": fp.policy, "distance": fp.distance, "tolerance": fp.tolerance,
            "params": {n: {"value": p.value, "confidence": p.confidence, "consistent": list(p.consistent)}
                       for n, p in fp.params.items()}}


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from pcast.probes import ProbeError, fingerprint

    try:
        if args.device not in ("cpu", "cuda"):
            raise ValueError(f"--device={args.device!r} is not allowed; allowed: cpu, cuda")
        if args.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise ValueError("--device=cuda is not allowed here: no CUDA device is available")
        fn = _load(args.target)
        cands = None if args.candidates is None else [c.strip() for c in args.candidates.split(",") if c.strip()]
        fp = fingerprint(fn, candidates=cands, device=args.device, params=not args.no_params)
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
