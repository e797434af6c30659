"""The package modules one named ``pcast.attention`` call passes through, in the order it enters them.

``python tools/trace_modules.py`` runs the call once untraced (to compile and cache), then once under
:func:`sys.setprofile` and prints every entry into a module of ``pcast`` from another one, with the
functions called there before the call leaves it, then how often each module was entered. Compiled code
(numba) is entered through its Python caller, so it shows as that caller's module. The call: q, k, v
of :func:`pcast.models.sinks.make_inputs` (seed 0, 4 sink keys at Δ = 10, n = 512, d = 64), forward
order, S = 1, the emulator; ``--order``, ``--scale``, ``--n`` and ``--calls`` (one
:func:`pcast.attention_calls` of the four combinations instead) change it.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys

import torch

import pcast
from pcast.models.sinks import make_inputs

PKG = os.path.dirname(os.path.abspath(pcast.__file__))


def _module(filename: str) -> str | None:
    path = os.path.abspath(filename)
    if not path.startswith(PKG + os.sep):
        return None
    rel = os.path.relpath(path, PKG)
    if not rel.endswith(".py"):
        return None
    return ("pcast." + rel[:-3].replace(os.sep, ".")).removesuffix(".__init__")


def trace(fn) -> list[tuple[str, list[str]]]:
    """``[(module, [functions called there]), ...]``: each entry into a module from another one, in order."""
    visits: list[tuple[str, list[str]]] = []

    def hook(frame, event, arg):
        if event != "call":
            return
        mod = _module(frame.f_code.co_filename)
        if mod is None:
            return
        if visits and visits[-1][0] == mod:
            names = visits[-1][1]
            if frame.f_code.co_name not in names:
                names.append(frame.f_code.co_name)
        else:
            visits.append((mod, [frame.f_code.co_name]))

    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return visits


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--order", default="forward", choices=("forward", "reverse"))
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--calls", action="store_true", help="one attention_calls of the four combinations")
    ap.add_argument("--functions", action="store_true", help="also print the functions called in each visit")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    q, k, v = make_inputs(0, n=args.n, d=64, ksink=4, delta=10.0)
    if args.calls:
        calls = [{"order": o, "scale": s} for o in ("forward", "reverse") for s in (1.0, 256.0)]
        label = "pcast.attention_calls(q, k, [v], the four combinations, ksink=4, backend='emulator')"
        run = lambda: pcast.attention_calls(q, k, [v], calls, ksink=4, backend="emulator")  # noqa: E731
    else:
        label = f"pcast.attention(q, k, v, order={args.order!r}, scale={args.scale:g}, ksink=4, backend='emulator')"
        run = lambda: pcast.attention(q, k, v, order=args.order, scale=args.scale, ksink=4,  # noqa: E731
                                      backend="emulator")
    run()  # compile and cache first: the trace is of a warm call
    visits = trace(run)
    print(f"{label}, n = {args.n}, d = 64: {len(visits)} module entries")
    for i, (mod, names) in enumerate(visits, 1):
        print(f"{i:3d} {mod}" + (f": {', '.join(names)}" if args.functions else ""))
    counts = collections.Counter(mod for mod, _ in visits)
    print("entries per module: " + ", ".join(f"{m} {c}" for m, c in sorted(counts.items(), key=lambda x: (-x[1], x[0]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
