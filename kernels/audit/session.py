"""The audit's run, start to end, from its :class:`~pcast.audit.settings.AuditSettings` (checked before any work):
the runs planned, layers loaded, runs, the printed report and the exit code.

:func:`plan` lists the runs and the warnings, :func:`load` reads and checks the layers, :func:`run`
runs every layer through its runs and :func:`report` prints the summary, gate, table and verdicts and
writes ``--csv`` and ``--json``. The command line itself is :mod:`pcast.cli.audit`.
"""

from __future__ import annotations

import csv
import io
import math
import sys
import time
from collections import Counter

from pcast.audit.files import check_tensors, estimate, load_layers
from pcast.audit.flags import offset_warnings
from pcast.audit.heads import COLUMNS, PER_HEAD_COLUMNS, audit_heads, detect_head_sinks, leading_ksink, plan_runs, worst_head
from pcast.audit.kernel import KernelAudit, kernel_policy, measure_kernel
from pcast.audit.remedy import failing_heads, print_remedies, remedies
from pcast.audit.report import (EXIT_FAIL, EXIT_PASS, gate, gated_policies, json_document, print_gate, print_summary,
                                summary, write_json)
from pcast.audit.settings import AuditSettings
from pcast.audit.verdicts import VERDICT_COLUMNS, judge_heads, pooled_lines
from pcast.host.files import atomic_write_text

def _ksink_summary(per_layer) -> str:
    """``ksink = 1 on 60 of 72 heads, ksink = 0 on 12 of 72`` over every (layer, batch, head)."""
    counts = Counter(ks for hk in per_layer for ks in hk.values())
    total = sum(counts.values())
    parts = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"ksink = {ks} on {n} of {total}" + (" heads" if i == 0 else "")
                     for i, (ks, n) in enumerate(parts))


def _pv_text(settings: AuditSettings) -> str:
    """``; P·V wgmma-sm90 (promoted every 4 KV blocks, emulator) for yours, ...`` ('' in float32)."""
    if settings.pv_arith == "fp32":
        return ""
    n = settings.pv_promote
    every = f"promoted every {n} KV block{'s' if n > 1 else ''}" if n else "never promoted"
    return (f"; P·V {settings.pv_arith} ({every}, emulator) for yours"
            + (" and the kernel's prediction" if settings.kernel_fn is not None else "") + ", float32 for the rest")


def header_line(layers, settings: AuditSettings, head_ksink=None) -> str:
    """What was run: shapes, layers, sinks, blocks, mask and score scale."""
    shapes = [(list(q.shape), list(k.shape)) for _, q, k, _ in layers]
    if all(sh == shapes[0] for sh in shapes):
        shape = f"q {shapes[0][0]}, k and v {shapes[0][1]} ([B, H, N, d])"
    else:
        shape = "; ".join(f"layer {L}: q {sq}, k and v {sk}" for (L, *_), (sq, sk) in zip(layers, shapes)) + \
            " ([B, H, N, d])"
    names = [L for L, *_ in layers]
    where = "none (plain q, k, v)" if names == [None] else ", ".join(map(str, names))
    if settings.ksink == "auto":
        ks = f"ksink=auto ({_ksink_summary(head_ksink)})"
    else:
        ks = f"ksink={settings.ksink} (given)"
    dims = sorted({q.shape[-1] for _, q, _, _ in layers})
    if settings.sm_scale is not None:
        sm = f"{settings.sm_scale:.6g}"
    else:
        sm = ", ".join(f"{1.0 / math.sqrt(d):.6g}" for d in dims)
    combos = " and the four combinations" if settings.combos else ""
    return (f"inputs {settings.inputs}: {shape}; layers {where}; {ks}; block_n={settings.policy.block_n} for yours{combos} (a "
            f"named policy brings its own){_pv_text(settings)}; causal={settings.causal}"
            + (f" ({settings.causal_align})" if settings.causal and settings.causal_align else "") + f"; sm_scale={sm}")


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


def _print(rows, settings: AuditSettings, head_rows=None):
    layered = any(r["layer"] is not None for r in rows)
    lay = (lambda r: f"{r['layer']:<7}") if layered else (lambda r: "")
    # every column after MSE is a fraction of its own terms; the counts are in --csv
    if settings.per_head:
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
             "where the run does not collapse from sink keys)" if settings.per_head else ")"))
    worst = worst_head(head_rows or [])
    if worst is not None:
        L, b, h, ratio, x, y = worst
        print(f"worst head: layer {'-' if L is None else L}, batch {b}, head {h}: forward S=1 / reverse S=256 MSE "
              f"ratio {ratio:.4g} (MSE {x:.4g} vs {y:.4g})")
    print(f"\nVerdicts per run, counted over its heads (collapse: non-sink underflow fraction > "
          f"{settings.collapse_threshold:.0%} and the rounded-away keys carry > {settings.collapse_mass:.3g} of the "
          f"non-sink attention mass; V-cast floor, when a policy casts V: P-cast MSE > {settings.floor_factor:g}x the "
          "same call with fmt=None):")
    for r in rows:
        where = "" if r["layer"] is None else f"layer {r['layer']}: "
        heads = [h for h in head_rows or [] if h["policy"] == r["policy"] and h["layer"] == r["layer"]]
        for line in pooled_lines(r, heads, collapse_threshold=settings.collapse_threshold,
                                 floor_factor=settings.floor_factor, collapse_mass=settings.collapse_mass):
            print(f"  {where}{line}")


def plan(settings: AuditSettings):
    """The runs (your policy, the four combinations unless left out, the named policies) and the warnings."""
    runs = plan_runs(settings.policy, list(settings.policies), combos=settings.combos, pv=settings.pv_options)
    warnings = offset_warnings(settings.policy, list(settings.policies), scale_given=settings.scale_given)
    return runs, warnings


def load(settings: AuditSettings):
    """The layers, checked, and with --ksink auto each head's sinks and ksink."""
    layers = load_layers(settings.inputs, list(settings.layers), layout=settings.layout,
                         block_n=settings.policy.block_n)
    auto = settings.ksink == "auto"
    for L, q, k, _ in layers:
        if settings.causal and settings.causal_align is None and q.shape[-2] != k.shape[-2]:
            raise ValueError(f"--causal with Nq = {q.shape[-2]} query rows and Nk = {k.shape[-2]} keys needs "
                             "--causal-align; allowed: top_left or bottom_right (decode: bottom_right)")
        try:
            check_tensors(q, k, ksink=None if auto else settings.ksink, sm_scale=settings.sm_scale)
        except ValueError as e:
            raise ValueError(str(e) if L is None else f"layer {L}: {e}") from None
    sinks = [detect_head_sinks(q, k, sm_scale=settings.sm_scale, causal=settings.causal, causal_align=settings.causal_align)
             if auto else None
             for _, q, k, _ in layers]
    head_ksink = [{bh: leading_ksink(s) for bh, s in sk.items()} for sk in sinks] if auto else None
    return layers, sinks, head_ksink


def predict_kernel(settings: AuditSettings, layers, runs) -> tuple:
    """With ``--kernel``: ``(runs, prediction)``: the policy that predicts the kernel (the declared one, else the
    fingerprinted one, or None when the fingerprint finds it outside the model) as ``(policy, source, outside)``;
    a fingerprinted policy joins ``runs`` so its prediction is measured head by head. Without: ``(runs, None)``."""
    if settings.kernel_fn is None:
        return runs, None
    pol, source, outside = kernel_policy(settings.kernel_fn, settings.kernel_policy, d=layers[0][1].shape[-1],
                                         dtype=settings.input_dtype, causal=settings.causal)
    if pol is not None and pol.name not in [name for name, _ in runs]:
        runs = runs + [(pol.name, pol.attention_kwargs())]
    return runs, (pol, source, outside)


def run_kernel(settings: AuditSettings, layers, prediction):
    """With ``--kernel``: the callable on every layer (heads batched, in the file's dtype) beside its policy's
    prediction (``prediction``: :func:`predict_kernel`'s; ``pcast.audit.kernel.measure_kernel``), with the
    differing option searched on the first layer whose heads disagree."""
    if prediction is None:
        return None
    dt = settings.input_dtype
    pol, source, outside = prediction
    out = KernelAudit(pol, source, allow=settings.kernel_allow, outside=outside,
                      mismatch_gated=not settings.report_mismatch)
    for L, q, k, v in layers:
        got = measure_kernel(settings, q.to(dt), k.to(dt), v.to(dt), pol, source, outside=outside, layer=L,
                             differs=not out.searched)
        out.heads += got.heads
        out.pv = got.pv  # the prediction's P·V arithmetic (the same on every layer)
        if got.searched:
            out.searched, out.differs = True, got.differs
    return out


def run(settings: AuditSettings, layers, runs, sinks, head_ksink):
    """Every layer through its runs, with progress (and, for a long run, an estimate first) on stderr."""
    measure = settings.measure  # the collapse gate reads the lost mass, so a gate on it measures too
    note = estimate(layers, runs, measure=measure)
    if note:
        print(f"pcast-audit: {note}", file=sys.stderr)
    rows, head_rows, t0 = [], [], time.perf_counter()
    for i, (L, q, k, v) in enumerate(layers):
        r, hr = audit_heads(q, k, v, runs=runs, causal=settings.causal, causal_align=settings.causal_align,
                            ksink=head_ksink[i] if head_ksink else settings.ksink, backend=settings.backend,
                            sink_logit=settings.sink_logit, sm_scale=settings.sm_scale, layer=L, sinks=sinks[i],
                            per_head=measure)
        rows += r
        head_rows += hr
        if len(layers) > 1:
            print(f"pcast-audit: layer {L} done ({i + 1}/{len(layers)}, {time.perf_counter() - t0:.1f} s)",
                  file=sys.stderr)
    return rows, head_rows


def report(settings: AuditSettings, header, runs, rows, head_rows, warnings, kernel=None, layers=()) -> int:
    """Verdicts per head, summary, table, gate, the why and the remedy of each failing head (rerun on
    ``layers``), CSV and JSON; the exit code. ``kernel``: the :class:`~pcast.audit.kernel.KernelAudit` of
    ``--kernel``, or None."""
    judge_heads(head_rows, settings)
    blocks = summary(head_rows, [name for name, _ in runs])
    gated = gated_policies(runs)
    hits, unjudged = gate(head_rows, settings.fail_on, gated=gated, kernel=kernel)
    code = EXIT_FAIL if hits else EXIT_PASS
    print_summary(blocks, settings, len(head_rows) // max(len(runs), 1))
    print_gate(hits, settings.fail_on, gated, head_rows, settings, kernel=kernel, unjudged=unjudged)
    if kernel is not None:
        print(kernel)
    failing = failing_heads(head_rows, hits, gated, settings.fail_on)
    fixes = remedies(settings, layers, failing, runs) if layers else []
    print_remedies(fixes, len(failing))
    if not settings.quiet:
        print()
        _print(rows, settings, head_rows)
    if settings.csv:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=PER_HEAD_COLUMNS + VERDICT_COLUMNS if settings.per_head else COLUMNS,
                           lineterminator="\n", extrasaction="ignore")
        w.writeheader()
        w.writerows(head_rows if settings.per_head else rows)
        atomic_write_text(settings.csv, buf.getvalue())  # never a half-written file under the name
    if settings.json:
        write_json(settings.json, json_document(settings=settings, header=header, rows=rows, head_rows=head_rows,
                                                blocks=blocks, hits=hits, gated=gated, fail_on=settings.fail_on,
                                                warnings=warnings, exit_code=code, kernel=kernel, remedies=fixes,
                                                unjudged=unjudged))
    return code


