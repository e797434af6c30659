"""The audit's run, start to end: options checked, layers loaded, runs, the printed report and the exit code.

:func:`setup` checks everything before any work, :func:`load` reads and checks the layers, :func:`run`
runs every layer through its runs and :func:`report` prints the summary, gate, table and verdicts and
writes ``--csv`` and ``--json``. The command line itself is :mod:`pcast.cli.audit`.
"""

from __future__ import annotations

import csv
import math
import sys

from pcast.audit.files import check_tensors, estimate, file_dtype, load_layers, resolve_policies
from pcast.audit.flags import declared, offset_warnings, parse_fail_on, yours
from pcast.audit.heads import COLUMNS, PER_HEAD_COLUMNS, audit_heads, detect_head_sinks, leading_ksink, plan_runs, worst_head
from pcast.audit.kernel import KernelAudit, kernel_policy, load_kernel, measure_kernel
from pcast.audit.remedy import failing_heads, print_remedies, remedies
from pcast.audit.report import (EXIT_FAIL, EXIT_PASS, gate, gated_policies, json_document, print_gate, print_summary,
                                summary, write_json)
from pcast.audit.verdicts import VERDICT_COLUMNS, judge_heads, pooled_lines

#: The backends ``--backend`` accepts (the float64 reference is every row's baseline, not a row).
AUDIT_BACKENDS = ("auto", "triton", "emulator")


def _check_path(path, flag) -> None:
    """--csv and --json must be writable: checked before any work, so a long run is never lost to a bad path."""
    import os

    if path is None:
        return
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ValueError(f"{flag}={path!r} is a directory; allowed: a file path in a writable directory")
    if not os.path.isdir(parent):
        raise ValueError(f"{flag}={path!r}: directory {parent!r} does not exist; allowed: a file path in a "
                         "writable directory")
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise ValueError(f"{flag}={path!r} is not writable; allowed: a file path in a writable directory")


def _ksink_arg(value):
    """--ksink: ``"auto"`` or an int (its range is checked against N once the tensors are read)."""
    text = str(value).strip()
    if text.lower() == "auto":
        return "auto"
    try:
        return int(text, 10)
    except ValueError:
        raise ValueError(f"--ksink={value!r} is not allowed; allowed: an integer 0 <= ksink < N (the number of "
                         "keys), or auto") from None


def _check_options(args):
    args.ksink_value = _ksink_arg(args.ksink)
    if args.backend not in AUDIT_BACKENDS:
        raise ValueError(f"--backend={args.backend!r} is not allowed; allowed: {', '.join(AUDIT_BACKENDS)} (the "
                         "float64 reference is what every row is measured against)")
    if args.sm_scale is not None and not (math.isfinite(args.sm_scale) and args.sm_scale > 0):
        raise ValueError(f"--sm-scale={args.sm_scale!r} is not allowed; allowed: a finite number > 0")
    _check_path(args.csv, "--csv")
    _check_path(args.json, "--json")
    if args.sink_logit is not None and not math.isfinite(args.sink_logit):
        raise ValueError(f"--sink-logit={args.sink_logit!r} is not allowed; allowed: a finite number")
    if not 0.0 <= args.collapse_threshold < 1.0:
        raise ValueError(f"--collapse-threshold={args.collapse_threshold!r} is not allowed; allowed: 0 <= x < 1")
    if not (math.isfinite(args.floor_factor) and args.floor_factor >= 1.0):
        raise ValueError(f"--floor-factor={args.floor_factor!r} is not allowed; allowed: a finite number >= 1")
    if not 0.0 <= args.collapse_mass < 1.0:
        raise ValueError(f"--collapse-mass={args.collapse_mass!r} is not allowed; allowed: 0 <= x < 1")
    args.fail_on_parsed = parse_fail_on(args.fail_on)
    args.bounds = {w: min(b for v, b in args.fail_on_parsed if v == w) for w, b in args.fail_on_parsed
                   if b is not None}
    args.rel_mse_bound = args.bounds.get("rel-mse")
    args.combos = not (args.only == "yours" or args.no_reference_combos)
    if "ratio" in args.bounds and not args.combos:
        raise ValueError("--fail-on ratio>X needs the four reference combinations; allowed: without --only yours / "
                         "--no-reference-combos")
    _check_kernel_options(args)


def _check_kernel_options(args):
    """``--kernel`` and what goes with it: ``--fail-on mismatch`` and ``--report-mismatch`` need it (and exclude
    each other); the callable takes no score scale. With ``--kernel``, ``mismatch`` is gated unless
    ``--report-mismatch`` asks otherwise."""
    asked = any(w == "mismatch" for w, _ in args.fail_on_parsed)
    if asked and args.kernel is None:
        raise ValueError("--fail-on mismatch needs --kernel MODULE:FN; allowed: --kernel with it, or another condition")
    if args.report_mismatch and args.kernel is None:
        raise ValueError("--report-mismatch needs --kernel MODULE:FN; allowed: --kernel with it, or neither")
    if args.report_mismatch and asked:
        raise ValueError("--report-mismatch is not allowed with --fail-on mismatch; allowed: one of them (with "
                         "--kernel, mismatch is gated unless --report-mismatch is given)")
    if args.kernel is None:
        return
    if not asked and not args.report_mismatch:
        args.fail_on_parsed.append(("mismatch", None))
    if args.sm_scale is not None:
        raise ValueError("--sm-scale is not allowed with --kernel; allowed: the default 1/sqrt(d), the score scale "
                         "of the probes' callable convention")
    if args.causal and args.causal_align == "top_left":
        raise ValueError("--causal-align top_left is not allowed with --kernel; allowed: bottom_right, the mask "
                         "the probes' callable convention applies")
    if not (math.isfinite(args.kernel_allow) and 0 <= args.kernel_allow < 1):
        raise ValueError(f"--kernel-allow={args.kernel_allow!r} is not allowed; allowed: a fraction in [0, 1)")


def _ksink_summary(per_layer) -> str:
    """``ksink = 1 on 60 of 72 heads, ksink = 0 on 12 of 72`` over every (layer, batch, head)."""
    from collections import Counter

    counts = Counter(ks for hk in per_layer for ks in hk.values())
    total = sum(counts.values())
    parts = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"ksink = {ks} on {n} of {total}" + (" heads" if i == 0 else "")
                     for i, (ks, n) in enumerate(parts))


def header_line(layers, args, mine, head_ksink=None) -> str:
    """What was run: shapes, layers, sinks, blocks, mask and score scale."""
    shapes = [(list(q.shape), list(k.shape)) for _, q, k, _ in layers]
    if all(sh == shapes[0] for sh in shapes):
        shape = f"q {shapes[0][0]}, k and v {shapes[0][1]} ([B, H, N, d])"
    else:
        shape = "; ".join(f"layer {L}: q {sq}, k and v {sk}" for (L, *_), (sq, sk) in zip(layers, shapes)) + \
            " ([B, H, N, d])"
    names = [L for L, *_ in layers]
    where = "none (plain q, k, v)" if names == [None] else ", ".join(map(str, names))
    if args.ksink_value == "auto":
        ks = f"ksink=auto ({_ksink_summary(head_ksink)})"
    else:
        ks = f"ksink={args.ksink_value} (given)"
    dims = sorted({q.shape[-1] for _, q, _, _ in layers})
    if args.sm_scale is not None:
        sm = f"{args.sm_scale:.6g}"
    else:
        sm = ", ".join(f"{1.0 / math.sqrt(d):.6g}" for d in dims)
    combos = " and the four combinations" if args.combos else ""
    return (f"inputs {args.inputs}: {shape}; layers {where}; {ks}; block_n={mine.block_n} for yours{combos} (a "
            f"named policy brings its own); causal={args.causal}"
            + (f" ({args.causal_align})" if args.causal and args.causal_align else "") + f"; sm_scale={sm}")


def _fmt(x, spec) -> str:
    return "" if x is None else format(x, spec)


def _print_heads(head_rows) -> None:
    print(f"{'layer':<7}{'batch':<7}{'head':<6}{'ksink':<7}{'sinks':<14}{'policy':<18}{'backend':<20}"
          f"{'MSE':>12}{'rel MSE':>12}{'uf frac':>12}{'sink uf frac':>14}{'sat frac':>12}{'mass uf':>12}"
          f"{'delta':>9}{'sigma':>9}{'to dc':>9}")
    for r in head_rows:
        layer = "-" if r["layer"] is None else r["layer"]
        print(f"{layer:<7}{r['batch']:<7}{r['head']:<6}{r['ksink']:<7}{r['sinks'] or '-':<14}{r['policy']:<18}"
              f"{r['backend']:<20}{r['mse']:>12.4g}{r['rel_mse']:>12.4g}{r['underflow_frac']:>12.4g}"
              f"{r['underflow_sink_frac']:>14.4g}{r['saturated_frac']:>12.4g}"
              f"{_fmt(r['mass_underflow'], '.4g') or '-':>12}{_fmt(r['delta'], '.3g') or '-':>9}"
              f"{_fmt(r['sigma'], '.3g') or '-':>9}{_fmt(r['distance_to_delta_c'], '.3g') or '-':>9}")


def _print(rows, args, head_rows=None):
    layered = any(r["layer"] is not None for r in rows)
    lay = (lambda r: f"{r['layer']:<7}") if layered else (lambda r: "")
    # every column after MSE is a fraction of its own terms; the counts are in --csv
    if args.per_head:
        _print_heads(head_rows)
    else:
        print(("layer  " if layered else "") + f"{'policy':<18}{'backend':<20}{'MSE':>12}{'rel MSE':>12}{'uf frac':>12}"
              f"{'sink uf frac':>14}{'sat frac':>12}")
        for r in rows:
            print(f"{lay(r)}{r['policy']:<18}{r['backend']:<20}{r['mse']:>12.4g}{r['rel_mse']:>12.4g}"
                  f"{r['underflow_frac']:>12.4g}{r['underflow_sink_frac']:>14.4g}{r['saturated_frac']:>12.4g}")
    print("(uf frac: non-sink P that round to zero / non-sink P > 0; sink uf frac: the same for the sink keys; "
          "sat frac: P entries above the format's max / all P > 0"
          + ("; mass uf: exact softmax mass of the keys that round to zero, mean over rows, - where the rule of "
             "pcast.models.heads does not describe the run (Q/K casts, microscaled P); delta, sigma: the head's "
             "measured sink strength (the sinks' largest score above the non-sink mean) and spread, in logits; "
             "to dc: the run's half-underflow crossing 6.93 + ln S minus delta, in logits (negative: past it), - "
             "where the run does not collapse from sink keys)" if args.per_head else ")"))
    worst = worst_head(head_rows or [])
    if worst is not None:
        L, b, h, ratio, x, y = worst
        print(f"worst head: layer {'-' if L is None else L}, batch {b}, head {h}: forward S=1 / reverse S=256 MSE "
              f"ratio {ratio:.4g} (MSE {x:.4g} vs {y:.4g})")
    print(f"\nVerdicts per run, counted over its heads (collapse: non-sink underflow fraction > "
          f"{args.collapse_threshold:.0%} and the rounded-away keys carry > {args.collapse_mass:.3g} of the non-sink "
          f"attention mass; V-cast floor, when a policy casts V: P-cast MSE > {args.floor_factor:g}x the same call "
          "with fmt=None):")
    for r in rows:
        where = "" if r["layer"] is None else f"layer {r['layer']}: "
        heads = [h for h in head_rows or [] if h["policy"] == r["policy"] and h["layer"] == r["layer"]]
        for line in pooled_lines(r, heads, collapse_threshold=args.collapse_threshold, floor_factor=args.floor_factor,
                                  collapse_mass=args.collapse_mass):
            print(f"  {where}{line}")


def setup(args):
    """Everything checked before any work: options, your policy, the named policies, the runs, warnings."""
    _check_options(args)
    mine = yours(args)
    policies = resolve_policies(args.policy, args.policies)  # bad names fail here, before any work
    runs = plan_runs(mine, policies, combos=args.combos)
    warnings = offset_warnings(mine, policies, scale_given=args.p_scale is not None)
    args.kernel_fn, args.kernel_policy = None, None
    if args.kernel is not None:
        if declared(args):
            args.kernel_policy = mine
        elif len(policies) == 1:
            args.kernel_policy = policies[0]
        elif policies:
            raise ValueError(f"--kernel with {len(policies)} named policies: which one does the kernel implement? "
                             "allowed: one --policy NAME, your policy's flags, or neither (then it is fingerprinted)")
        args.kernel_fn = load_kernel(args.kernel)
    return mine, runs, warnings


def load(args, block_n):
    """The layers, checked, and with --ksink auto each head's sinks and ksink."""
    layers = load_layers(args.inputs, args.layer, layout=args.layout, block_n=block_n)
    auto = args.ksink_value == "auto"
    for L, q, k, _ in layers:
        if args.causal and args.causal_align is None and q.shape[-2] != k.shape[-2]:
            raise ValueError(f"--causal with Nq = {q.shape[-2]} query rows and Nk = {k.shape[-2]} keys needs "
                             "--causal-align; allowed: top_left or bottom_right (decode: bottom_right)")
        try:
            check_tensors(q, k, ksink=None if auto else args.ksink_value, sm_scale=args.sm_scale)
        except ValueError as e:
            raise ValueError(str(e) if L is None else f"layer {L}: {e}") from None
    sinks = [detect_head_sinks(q, k, sm_scale=args.sm_scale, causal=args.causal, causal_align=args.causal_align)
             if auto else None
             for _, q, k, _ in layers]
    head_ksink = [{bh: leading_ksink(s) for bh, s in sk.items()} for sk in sinks] if auto else None
    args.input_dtype = file_dtype(args.inputs)
    return layers, sinks, head_ksink


def predict_kernel(args, layers, runs) -> list:
    """With ``--kernel``: the policy that predicts it (the declared one, else the fingerprinted one, or None when
    the fingerprint finds it outside the model), kept in ``args.kernel_prediction``; a fingerprinted policy joins
    ``runs`` so its prediction is measured head by head. Returns the runs."""
    if args.kernel_fn is None:
        return runs
    pol, source, outside = kernel_policy(args.kernel_fn, args.kernel_policy, d=layers[0][1].shape[-1],
                                         dtype=args.input_dtype, causal=args.causal)
    args.kernel_prediction = (pol, source, outside)
    if pol is not None and pol.name not in [name for name, _ in runs]:
        runs = runs + [(pol.name, pol.attention_kwargs())]
    return runs


def run_kernel(args, layers):
    """With ``--kernel``: the callable on every layer (heads batched, in the file's dtype) beside its policy's
    prediction (:func:`pcast.audit.kernel.measure_kernel`), with the differing option searched on the first layer
    whose heads disagree."""
    if args.kernel_fn is None:
        return None
    dt = args.input_dtype
    pol, source, outside = args.kernel_prediction
    out = KernelAudit(pol, source, allow=args.kernel_allow, outside=outside, mismatch_gated=not args.report_mismatch)
    for L, q, k, v in layers:
        got = measure_kernel(args.kernel_fn, q.to(dt), k.to(dt), v.to(dt), pol, source, outside=outside,
                             sink_logit=args.sink_logit, causal=args.causal, layer=L, allow=args.kernel_allow,
                             differs=not out.searched)
        out.heads += got.heads
        if got.searched:
            out.searched, out.differs = True, got.differs
    return out


def run(args, layers, runs, sinks, head_ksink):
    """Every layer through its runs, with progress (and, for a long run, an estimate first) on stderr."""
    import time

    # the per-head measures; the collapse gate reads the lost mass, so a gate on it measures too
    measure = args.per_head or args.json is not None or any(w in ("collapse", "mass-underflow")
                                                             for w, _ in args.fail_on_parsed)
    note = estimate(layers, runs, measure=measure)
    if note:
        print(f"pcast-audit: {note}", file=sys.stderr)
    rows, head_rows, t0 = [], [], time.perf_counter()
    for i, (L, q, k, v) in enumerate(layers):
        r, hr = audit_heads(q, k, v, runs=runs, causal=args.causal, causal_align=args.causal_align,
                            ksink=head_ksink[i] if head_ksink else args.ksink_value, backend=args.backend,
                            sink_logit=args.sink_logit, sm_scale=args.sm_scale, layer=L, sinks=sinks[i],
                            per_head=measure)
        rows += r
        head_rows += hr
        if len(layers) > 1:
            print(f"pcast-audit: layer {L} done ({i + 1}/{len(layers)}, {time.perf_counter() - t0:.1f} s)",
                  file=sys.stderr)
    return rows, head_rows


def report(args, header, runs, rows, head_rows, warnings, kernel=None, layers=()) -> int:
    """Verdicts per head, summary, table, gate, the why and the remedy of each failing head (rerun on
    ``layers``), CSV and JSON; the exit code. ``kernel``: the :class:`~pcast.audit.kernel.KernelAudit` of
    ``--kernel``, or None."""
    judge_heads(head_rows, args)
    blocks = summary(head_rows, [name for name, _ in runs])
    gated = gated_policies(runs)
    hits, unjudged = gate(head_rows, args.fail_on_parsed, gated=gated, kernel=kernel)
    code = EXIT_FAIL if hits else EXIT_PASS
    print_summary(blocks, args, len(head_rows) // max(len(runs), 1))
    print_gate(hits, args.fail_on_parsed, gated, head_rows, args, kernel=kernel, unjudged=unjudged)
    if kernel is not None:
        print(kernel)
    failing = failing_heads(head_rows, hits, gated, args.fail_on_parsed)
    fixes = remedies(args, layers, failing, runs) if layers else []
    print_remedies(fixes, len(failing))
    if not args.quiet:
        print()
        _print(rows, args, head_rows)
    if args.csv:
        import io

        from pcast.pipeline.files import atomic_write_text

        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=PER_HEAD_COLUMNS + VERDICT_COLUMNS if args.per_head else COLUMNS, lineterminator="\n",
                           extrasaction="ignore")
        w.writeheader()
        w.writerows(head_rows if args.per_head else rows)
        atomic_write_text(args.csv, buf.getvalue())  # never a half-written file under the name
    if args.json:
        write_json(args.json, json_document(args=args, header=header, rows=rows, head_rows=head_rows, blocks=blocks,
                                            hits=hits, gated=gated, fail_on=args.fail_on_parsed, warnings=warnings,
                                            exit_code=code, kernel=kernel, remedies=fixes, unjudged=unjudged))
    return code


