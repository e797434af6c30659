"""Audit your own tensors: how much precision does an FP8 P cast lose on them, and why?

``pcast-audit inputs.safetensors`` (or ``python -m kernels.cli.audit inputs.safetensors``) loads
``q``, ``k`` and ``v`` (float32 or any float dtype, ``[B, H, N, d]`` or ``[H, N, d]`` or ``[N, d]``)
and runs the contract of :func:`kernels.attention` for your kernel's policy (``--order``,
``--scale``, ``--fmt``, ``--block-n``, ``--rowsum``, ``--causal``) next to the four reference
combinations order ∈ {forward, reverse} × S ∈ {1, 256} (``kernels.contract.COMBOS``). For each it prints the MSE against the float64
reference, the fraction of non-sink P that rounds to zero, the sink keys' own underflow and
the saturated count; ``--csv PATH`` writes the same table.

``--ksink`` says how many leading key positions are sinks (default 1: position 0; ``0 <= ksink < N``).
``--sm-scale`` sets the score scale (default ``1/sqrt(d)``). Everything is checked before any work:
options, ``--csv`` writable, tensors, ``ksink`` against N, and scores finite in float32 (an
overflow is an error naming its cause, never NaN rows). The printed table gives fractions (each
of its own terms); ``--csv`` has the counts too. ``--fmt none`` (or ``None``) runs without rounding.

``--policy NAME`` (repeatable) adds a named policy of :data:`kernels.policies.POLICIES` (``fa3``,
``fa4``, ``sage2``, ...) or one of your own from ``--policies FILE`` (YAML: name -> Policy keys,
as config.yaml's ``policies:`` section; config.yaml itself works too). Each row then gets the
audit's verdict lines: whether it collapses (non-sink underflow fraction above
``--collapse-threshold``), whether it saturates, and, when the policy casts V, whether its P-cast
error exceeds ``--floor-factor`` times the V-cast floor (the same call with ``fmt=None``).
``--sink-logit X`` adds a learned sink logit X to every head (and to the reference).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys

from ..contract import COMBOS, combo_label

COLUMNS = ("policy", "order", "scale", "fmt", "block_n", "rowsum", "backend", "mse", "rel_mse", "underflow_frac",
           "underflow", "terms", "underflow_sink", "saturated",
           # named-policy options and the V-cast floor (today's rows carry the defaults)
           "scale_mode", "rescale_threshold", "sink_mode", "qk_fmt", "v_fmt", "block_m", "terms_sink",
           "underflow_sink_frac", "saturated_frac", "floor_mse", "floor_rel_mse")


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


def load_policies(path: str) -> dict:
    """A user's policies from a YAML file: name -> Policy keys, or a config.yaml with ``policies:``."""
    import yaml

    from ..policies import policies_from_config

    try:
        with open(path) as fh:
            data = yaml.safe_load(fh)
    except FileNotFoundError:
        raise ValueError(f"policies file {path!r} does not exist") from None
    except yaml.YAMLError as e:
        raise ValueError(f"policies file {path!r} is not valid YAML: {e}") from None
    if isinstance(data, dict) and "policies" in data:
        data = data["policies"]  # config.yaml itself, or a file with a policies: section
    elif isinstance(data, dict) and ("experiments" in data or "preset" in data):
        data = {}  # a config.yaml without a policies: section
    return policies_from_config(data)


def check_tensors(q, k, *, ksink: int, sm_scale: float | None) -> None:
    """What the loaded tensors allow, before any work: ``0 <= ksink < Nk`` and scores finite in float32
    (max |q·k|·sm_scale from a float64 product, one head at a time)."""
    import torch

    nk = k.shape[-2]
    if not 0 <= ksink < nk:
        raise ValueError(f"--ksink={ksink} is not allowed; allowed: 0 <= ksink < N = {nk} (the number of keys)")
    sm = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
    from ..reference import expand_kv

    if k.shape[0] != q.shape[0] or k.shape[1] < 1 or q.shape[1] % k.shape[1] or k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k shape {list(k.shape)} does not match q shape {list(q.shape)}; allowed: [B, H_kv, N, d] "
                         f"with H_kv dividing H = {q.shape[1]} (grouped-query attention)")
    kx = expand_kv(k, q.shape[1])  # grouped-query attention: each query head against its key/value head
    smax = max(float((qh.double() @ kh.double().transpose(-1, -2)).abs().max())
               for qh, kh in zip(q.flatten(0, 1), kx.flatten(0, 1)))
    if not math.isfinite(smax * sm) or smax * sm > float(torch.finfo(torch.float32).max):
        raise ValueError(f"scores overflow float32: max |q.k| * sm_scale = {smax * sm:.4g} > "
                         f"{float(torch.finfo(torch.float32).max):.4g}; rescale q or k, or pass a smaller --sm-scale")


def _stats(r, ref, ref_power) -> dict:
    """MSE and diagnostic counts of one result ``r`` against the float64 reference."""
    mse = float(((r.out.double() - ref) ** 2).mean())
    terms, terms_sink = int(r.terms.sum()), int(r.terms_sink.sum())
    uf, uf_sink, sat = int(r.underflow.sum()), int(r.underflow_sink.sum()), int(r.saturated.sum())
    return {"backend": r.backend, "mse": mse, "rel_mse": mse / ref_power if ref_power > 0 else float("nan"),
            "underflow_frac": uf / terms if terms else 0.0, "underflow": uf, "terms": terms,
            "underflow_sink": uf_sink, "terms_sink": terms_sink,
            "underflow_sink_frac": uf_sink / terms_sink if terms_sink else 0.0, "saturated": sat,
            "saturated_frac": sat / (terms + terms_sink) if terms + terms_sink else 0.0}


def _run(name, kwargs, *, q, k, v, common, ref, ref_power):
    """One row: ``kwargs`` (keywords of kernels.attention) run on q, k, v, measured; plus the
    V-cast floor (the same call with fmt=None) when the policy casts V."""
    from ..api import attention
    from ..policies import Policy

    full = {**Policy(name="defaults").attention_kwargs(), **kwargs}  # every column, defaults where not set
    row = {"policy": name, **{c: full[c] for c in ("order", "scale", "block_n", "rowsum", "scale_mode",
                                                 "rescale_threshold", "sink_mode", "block_m")},
           "fmt": full["fmt"] if full["fmt"] is not None else "none",
           "qk_fmt": full["qk_fmt"] or "none", "v_fmt": full["v_fmt"] or "none"}
    row.update(_stats(attention(q, k, v, **common, **kwargs), ref, ref_power))
    row["floor_mse"] = row["floor_rel_mse"] = None
    if full["v_fmt"] is not None:
        floor = attention(q, k, v, **common, **{**kwargs, "fmt": None})
        row["floor_mse"] = float(((floor.out.double() - ref) ** 2).mean())
        row["floor_rel_mse"] = row["floor_mse"] / ref_power if ref_power > 0 else float("nan")
    return row


def audit(q, k, v, *, order="reverse", scale=256.0, fmt="e4m3fn", block_n=64, rowsum="unrounded", causal=False,
          ksink=1, backend="auto", policies=(), sink_logit=None, sm_scale=None):
    """Rows (dicts) for your policy, the four reference combinations and each of ``policies``
    (:class:`kernels.policies.Policy` objects); see module docstring.

    ``sink_logit``: None, or one float logit given to every (batch, head), in the reference too.
    """
    from ..api import attention

    common = dict(causal=causal, ksink=ksink, backend=backend, sm_scale=sm_scale)
    if sink_logit is None:
        ref = attention(q, k, v, causal=causal, sm_scale=sm_scale, backend="reference").out
    else:
        import torch

        from ..reference import reference_attention

        common["sink_logit"] = torch.full(q.shape[:2], float(sink_logit), dtype=torch.float32, device=q.device)
        ref = reference_attention(q, k, v, causal=causal, sm_scale=sm_scale, sink_logit=common["sink_logit"])
    ref_power = float((ref**2).mean())
    runs = [("yours", dict(order=order, scale=float(scale), fmt=fmt, block_n=block_n, rowsum=rowsum))]
    runs += [(combo_label(o, s), dict(order=o, scale=s, fmt="e4m3fn", block_n=block_n, rowsum="unrounded"))
             for o, s in COMBOS]
    runs += [(p.name, p.attention_kwargs()) for p in policies]
    return [_run(name, kw, q=q, k=k, v=v, common=common, ref=ref, ref_power=ref_power) for name, kw in runs]


def verdicts(row, *, collapse_threshold=0.5, floor_factor=2.0) -> list[str]:
    """The audit's verdict lines for one row, in words."""
    name, uf = row["policy"], row["underflow_frac"]
    if uf > collapse_threshold:
        lines = [f"{name}: COLLAPSES: {uf:.2%} of non-sink P rounds to zero (threshold {collapse_threshold:.0%})"]
    else:
        lines = [f"{name}: does not collapse: {uf:.2%} of non-sink P rounds to zero "
                 f"(threshold {collapse_threshold:.0%})"]
    if row["terms_sink"]:
        lines.append(f"{name}: sink keys: {row['underflow_sink']} of {row['terms_sink']} sink P round to zero")
    n = row["terms"] + row["terms_sink"]
    if row["saturated"]:
        lines.append(f"{name}: SATURATES: {row['saturated']} of {n} P entries ({row['saturated_frac']:.3%}) exceed "
                     f"the format's max finite value and are clipped")
    else:
        lines.append(f"{name}: does not saturate: no P entry exceeds the format's max finite value")
    if row["floor_mse"] is not None:
        ratio = row["mse"] / row["floor_mse"] if row["floor_mse"] > 0 else math.inf
        word = "EXCEEDS" if ratio > floor_factor else "is within"
        lines.append(f"{name}: P-cast error {word} {floor_factor:g}x the V-cast floor: MSE {row['mse']:.4g} vs "
                     f"{row['floor_mse']:.4g} with fmt=None ({ratio:.3g}x)")
    return lines


def _parser():
    ap = argparse.ArgumentParser(prog="pcast-audit", description=__doc__.splitlines()[0])
    ap.add_argument("inputs", help="safetensors file holding tensors q, k, v")
    ap.add_argument("--order", default="reverse", help="forward or reverse (default: reverse)")
    ap.add_argument("--scale", type=float, default=256.0, help="S applied to P before the cast (default: 256)")
    ap.add_argument("--fmt", default="e4m3fn", help="FP8 format, or 'none' for no rounding (default: e4m3fn)")
    ap.add_argument("--block-n", type=int, default=64, help="keys per KV block (default: 64)")
    ap.add_argument("--rowsum", default="unrounded", help="unrounded or rounded (default: unrounded)")
    ap.add_argument("--causal", action="store_true", help="top-left causal mask")
    ap.add_argument("--ksink", type=int, default=1,
                    help="leading key positions that are sinks, 0 <= ksink < N (default: 1)")
    ap.add_argument("--backend", default="auto", help="auto, triton, emulator (default: auto)")
    ap.add_argument("--sm-scale", type=float, default=None, metavar="X",
                    help="score scale: s = q.k * X (default: 1/sqrt(d), as the model's attention usually does)")
    ap.add_argument("--csv", default=None, help="also write the table to this CSV file")
    ap.add_argument("--policy", action="append", default=[], metavar="NAME",
                    help="also run this named policy (repeatable): a preset of kernels.policies.POLICIES or "
                         "one of --policies FILE")
    ap.add_argument("--policies", default=None, metavar="FILE",
                    help="YAML file of your own policies (name -> Policy keys, or a config.yaml with a "
                         "policies: section); without --policy, every policy in it runs")
    ap.add_argument("--sink-logit", type=float, default=None, metavar="X",
                    help="a learned sink logit X for every head (no key, no value), also in the reference")
    ap.add_argument("--collapse-threshold", type=float, default=0.5,
                    help="a policy collapses when its non-sink underflow fraction exceeds this (default: 0.5)")
    ap.add_argument("--floor-factor", type=float, default=2.0,
                    help="the P-cast error exceeds the V-cast floor when its MSE is above this many times the "
                         "floor's (default: 2)")
    return ap


def resolve_policies(names, policies_file=None) -> list:
    """The Policy objects for ``names`` (presets or the file's), checked before any work."""
    from ..policies import get_policy

    extra = load_policies(policies_file) if policies_file else {}
    if not names:
        return list(extra.values())
    return [get_policy(n, extra) for n in names]


AUDIT_BACKENDS = ("auto", "triton", "emulator")  # the reference is every row's baseline, not a row


def _fmt_arg(fmt: str):
    """--fmt: a format name, or none/None (no rounding)."""
    return None if fmt.lower() == "none" else fmt


def _check_csv(path) -> None:
    """--csv must be writable: checked before any work, so a long run is never lost to a bad path."""
    import os

    if path is None:
        return
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ValueError(f"--csv={path!r} is a directory; allowed: a file path in a writable directory")
    if not os.path.isdir(parent):
        raise ValueError(f"--csv={path!r}: directory {parent!r} does not exist; allowed: a file path in a "
                         "writable directory")
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise ValueError(f"--csv={path!r} is not writable; allowed: a file path in a writable directory")


def _check_options(args):
    if args.backend not in AUDIT_BACKENDS:
        raise ValueError(f"--backend={args.backend!r} is not allowed; allowed: {', '.join(AUDIT_BACKENDS)} (the "
                         "float64 reference is what every row is measured against)")
    if args.sm_scale is not None and not (math.isfinite(args.sm_scale) and args.sm_scale > 0):
        raise ValueError(f"--sm-scale={args.sm_scale!r} is not allowed; allowed: a finite number > 0")
    _check_csv(args.csv)
    if args.sink_logit is not None and not math.isfinite(args.sink_logit):
        raise ValueError(f"--sink-logit={args.sink_logit!r} is not allowed; allowed: a finite number")
    if not 0.0 <= args.collapse_threshold < 1.0:
        raise ValueError(f"--collapse-threshold={args.collapse_threshold!r} is not allowed; allowed: 0 <= x < 1")
    if not (math.isfinite(args.floor_factor) and args.floor_factor >= 1.0):
        raise ValueError(f"--floor-factor={args.floor_factor!r} is not allowed; allowed: a finite number >= 1")


def _header(q, k, args) -> str:
    """What was run: shapes, sinks, blocks, mask and score scale."""
    sm = 1.0 / math.sqrt(q.shape[-1]) if args.sm_scale is None else args.sm_scale
    return (f"inputs {args.inputs}: q {list(q.shape)}, k and v {list(k.shape)} ([B, H, N, d]); ksink={args.ksink} "
            f"(given); block_n={args.block_n} for yours and the four combinations (a named policy brings its "
            f"own); causal={args.causal}; sm_scale={sm:.6g}")


def _print(rows, args):
    # every column after MSE is a fraction of its own terms; the counts are in --csv
    print(f"{'policy':<18}{'backend':<20}{'MSE':>12}{'rel MSE':>12}{'uf frac':>12}{'sink uf frac':>14}"
          f"{'sat frac':>12}")
    for r in rows:
        print(f"{r['policy']:<18}{r['backend']:<20}{r['mse']:>12.4g}{r['rel_mse']:>12.4g}"
              f"{r['underflow_frac']:>12.4g}{r['underflow_sink_frac']:>14.4g}{r['saturated_frac']:>12.4g}")
    print("(uf frac: non-sink P that round to zero / non-sink P > 0; sink uf frac: the same for the sink keys; "
          "sat frac: P entries above the format's max / all P > 0)")
    print(f"\nVerdicts (collapse: non-sink underflow fraction > {args.collapse_threshold:.0%}; V-cast floor, "
          f"when a policy casts V: P-cast MSE > {args.floor_factor:g}x the same call with fmt=None):")
    for r in rows:
        for line in verdicts(r, collapse_threshold=args.collapse_threshold, floor_factor=args.floor_factor):
            print(f"  {line}")


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        _check_options(args)
        policies = resolve_policies(args.policy, args.policies)  # bad names fail here, before any work
        q, k, v = load_tensors(args.inputs)
        check_tensors(q, k, ksink=args.ksink, sm_scale=args.sm_scale)
        print(_header(q, k, args))
        rows = audit(q, k, v, order=args.order, scale=args.scale, fmt=_fmt_arg(args.fmt), block_n=args.block_n,
                     rowsum=args.rowsum, causal=args.causal, ksink=args.ksink, backend=args.backend,
                     policies=policies, sink_logit=args.sink_logit, sm_scale=args.sm_scale)
    except ValueError as e:
        print(f"pcast-audit: error: {e}", file=sys.stderr)
        return 2
    _print(rows, args)
    if args.csv:
        import io

        from ..pipeline.files import atomic_write_text

        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        atomic_write_text(args.csv, buf.getvalue())  # never a half-written file under the name
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
