"""Audit your own tensors: how much precision does an FP8 P cast lose on them, and why?

``pcast-audit inputs.safetensors`` (or ``python -m kernels.cli.audit inputs.safetensors``) loads
``q``, ``k`` and ``v`` (float32 or any float dtype, ``[B, H, N, d]`` or ``[H, N, d]`` or ``[N, d]``)
and runs the contract of :func:`kernels.attention` for your kernel's policy (``--order``,
``--scale``, ``--fmt``, ``--block-n``, ``--rowsum``, ``--causal``) next to the four reference
combinations order ∈ {forward, reverse} × S ∈ {1, 256} (``kernels.contract.COMBOS``). For each it prints the MSE against the float64
reference, the fraction of non-sink P that rounds to zero, the sink keys' own underflow and
the saturated count; ``--csv PATH`` writes the same table.

``--ksink`` says how many leading key positions are sinks (default 1: position 0).
"""

from __future__ import annotations

import argparse
import csv
import sys

from ..contract import COMBOS, combo_label

COLUMNS = ("policy", "order", "scale", "fmt", "block_n", "rowsum", "backend", "mse", "rel_mse", "underflow_frac",
           "underflow", "terms", "underflow_sink", "saturated")


def load_tensors(path: str, names=("q", "k", "v")):
    """Read q, k, v from a safetensors file and bring them to float32 [B, H, N, d]."""
    from safetensors.torch import load_file

    try:
        tensors = load_file(path)
    except FileNotFoundError:
        raise ValueError(f"inputs file {path!r} does not exist") from None
    except Exception as e:  # noqa: BLE001 - safetensors raises several types for a bad file
        raise ValueError(f"inputs file {path!r} is not a readable safetensors file: {e}") from None
    missing = [n for n in names if n not in tensors]
    if missing:
        raise ValueError(f"inputs file {path!r} lacks tensor(s) {', '.join(missing)}; it has: "
                         f"{', '.join(sorted(tensors)) or 'none'}")
    out = []
    for n in names:
        t = tensors[n]
        if not t.is_floating_point():
            raise ValueError(f"tensor {n!r} must be floating point, got {t.dtype}")
        if t.dim() not in (2, 3, 4):
            raise ValueError(f"tensor {n!r} must have 2, 3 or 4 dims ([N, d], [H, N, d], [B, H, N, d]), "
                             f"got shape {tuple(t.shape)}")
        while t.dim() < 4:
            t = t.unsqueeze(0)
        out.append(t.float().contiguous())
    return tuple(out)


def audit(q, k, v, *, order="reverse", scale=256.0, fmt="e4m3fn", block_n=64, rowsum="unrounded", causal=False,
          ksink=1, backend="auto"):
    """Rows (dicts) for your policy and the four reference combinations; see module docstring."""
    from ..api import attention

    ref = attention(q, k, v, causal=causal, backend="reference").out
    ref_power = float((ref**2).mean())
    policies = [("yours", order, float(scale), fmt, block_n, rowsum)]
    policies += [(combo_label(o, s), o, s, "e4m3fn", block_n, "unrounded") for o, s in COMBOS]
    rows = []
    for name, o, s, f, bn, rs in policies:
        r = attention(q, k, v, order=o, scale=s, fmt=f, causal=causal, ksink=ksink, block_n=bn, rowsum=rs,
                      backend=backend)
        mse = float(((r.out.double() - ref) ** 2).mean())
        terms = int(r.terms.sum())
        rows.append({"policy": name, "order": o, "scale": s, "fmt": f if f is not None else "none", "block_n": bn,
                     "rowsum": rs, "backend": r.backend, "mse": mse,
                     "rel_mse": mse / ref_power if ref_power > 0 else float("nan"),
                     "underflow_frac": int(r.underflow.sum()) / terms if terms else 0.0,
                     "underflow": int(r.underflow.sum()), "terms": terms,
                     "underflow_sink": int(r.underflow_sink.sum()), "saturated": int(r.saturated.sum())})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(prog="pcast-audit", description=__doc__.splitlines()[0])
    ap.add_argument("inputs", help="safetensors file holding tensors q, k, v")
    ap.add_argument("--order", default="reverse", help="forward or reverse (default: reverse)")
    ap.add_argument("--scale", type=float, default=256.0, help="S applied to P before the cast (default: 256)")
    ap.add_argument("--fmt", default="e4m3fn", help="FP8 format, or 'none' for no rounding (default: e4m3fn)")
    ap.add_argument("--block-n", type=int, default=64, help="keys per KV block (default: 64)")
    ap.add_argument("--rowsum", default="unrounded", help="unrounded or rounded (default: unrounded)")
    ap.add_argument("--causal", action="store_true", help="top-left causal mask")
    ap.add_argument("--ksink", type=int, default=1, help="leading key positions that are sinks (default: 1)")
    ap.add_argument("--backend", default="auto", help="auto, triton, emulator (default: auto)")
    ap.add_argument("--csv", default=None, help="also write the table to this CSV file")
    args = ap.parse_args(argv)
    try:
        q, k, v = load_tensors(args.inputs)
        rows = audit(q, k, v, order=args.order, scale=args.scale, fmt=None if args.fmt == "none" else args.fmt,
                     block_n=args.block_n, rowsum=args.rowsum, causal=args.causal, ksink=args.ksink,
                     backend=args.backend)
    except ValueError as e:
        print(f"pcast-audit: error: {e}", file=sys.stderr)
        return 2
    print(f"{'policy':<16}{'backend':<20}{'MSE':>12}{'rel MSE':>12}{'underflow':>12}{'sink uf':>9}{'saturated':>11}")
    for r in rows:
        print(f"{r['policy']:<16}{r['backend']:<20}{r['mse']:>12.4g}{r['rel_mse']:>12.4g}"
              f"{r['underflow_frac']:>12.4g}{r['underflow_sink']:>9d}{r['saturated']:>11d}")
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
