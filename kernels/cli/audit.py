"""Audit your own tensors: how much precision does an FP8 P cast lose on them, and why?

``pcast-audit inputs.safetensors`` (or ``python -m pcast.cli.audit inputs.safetensors``) loads
``q``, ``k`` and ``v`` (any float dtype, ``[B, H, N, d]``, ``[H, N, d]`` or ``[N, d]``; ``--layout bnhd``
for flash-attn's ``[B, N, H, d]``; a shape that looks transposed is refused) or ``layer{L}/q, k, v``
(``--layer L``), and runs the contract of :func:`pcast.attention` for your policy (one flag per field of
:class:`pcast.policies.Policy`: ``--order``, ``--scale``, ``--scale-mode``, ``--rescale-threshold``, ...;
``--exp2-offset K`` for ``--scale-mode exp2_offset --scale 2^K``; ``--pv-arith`` and ``--pv-promote`` for its P·V on a
tensor core) next to the four reference combinations
(``pcast.contract.COMBOS``; ``--only yours`` skips them) and the named policies of ``--policy NAME``
and ``--policies FILE`` (both together run both). Every run goes through one
:func:`pcast.attention_calls` per layer.

It prints a header, a summary block (per policy: its worst head by its own relative MSE, and the heads
past each threshold), the ``--fail-on`` gate, then (unless ``--quiet``) the table (one row per run, or
per (layer, batch, head, run) with ``--per-head``: Δ, σ, the distance to the run's Δc and
``mass_underflow``), the worst forward S=1 / reverse S=256 head and the verdict lines. ``--csv`` and
``--json`` (schema :data:`pcast.audit.report.SCHEMA_PATH`) write the numbers. Exit codes: 0, 1
when a ``--fail-on`` condition holds for a head of your policies (with ``--kernel``: of the kernel, judged on
what it ran, and whenever a head of it disagrees with the predicted policy unless ``--report-mismatch``), 2 for
bad input (a one-line error before any work). User guide: docs/audit.md.

The work is :mod:`pcast.audit`; this module is the command line (its arguments and ``main``).
"""

from __future__ import annotations

import argparse
import sys

from pcast.audit.files import LAYOUTS
from pcast.audit.flags import YOURS_DEFAULTS, flag, policy_fields
from pcast.audit.report import EXIT_ERROR
from pcast.audit.session import header_line, load, plan, predict_kernel, report, run, run_kernel
from pcast.audit.settings import AuditSettings, audit_settings
from pcast.contract import PV_ARITHS
from pcast.policies import allowed_values

__all__ = ["main", "settings"]


def _parser():
    ap = argparse.ArgumentParser(prog="pcast-audit", description=__doc__.splitlines()[0])
    ap.add_argument("inputs", help="safetensors file holding tensors q, k, v, or layer{L}/q, layer{L}/k, "
                                   "layer{L}/v for several layers")
    ap.add_argument("--layer", action="append", default=[], metavar="L",
                    help="audit this layer of a several-layer file (repeatable; default: every layer, in "
                         "numeric order)")
    ap.add_argument("--causal", action="store_true",
                    help="causal mask (top-left: key j visible to row i when j <= i; see --causal-align)")
    ap.add_argument("--causal-align", choices=("top_left", "bottom_right"), default=None,
                    help="with --causal: top_left, or bottom_right (j <= i + Nk - Nq, decode's alignment); "
                         "required when q has fewer rows than k (default: top_left for Nq = Nk)")
    ap.add_argument("--ksink", default="1",
                    help="leading key positions that are sinks, 0 <= ksink < N, or auto: each head's leading "
                         "run of sink keys from key 0, detected by pcast.models.heads.detect_sinks (default: 1)")
    ap.add_argument("--per-head", action="store_true",
                    help="one row per (layer, batch, head, run), with the detected sinks and mass_underflow, "
                         "in the table and in --csv")
    ap.add_argument("--backend", default="auto", help="auto, triton, emulator (default: auto)")
    ap.add_argument("--sm-scale", type=float, default=None, metavar="X",
                    help="score scale: s = q.k * X (default: 1/sqrt(d), as the model's attention usually does)")
    ap.add_argument("--csv", default=None, help="also write the table to this CSV file")
    ap.add_argument("--policy", action="append", default=[], metavar="NAME",
                    help="also run this named policy (repeatable): a preset of pcast.policies.POLICIES or "
                         "one of --policies FILE")
    ap.add_argument("--policies", default=None, metavar="FILE",
                    help="YAML file of your own policies (name -> Policy keys, or a config.yaml with a "
                         "policies: section): every policy in it runs, after those of --policy")
    ap.add_argument("--sink-logit", type=float, default=None, metavar="X",
                    help="a learned sink logit X for every head (no key, no value), also in the reference")
    ap.add_argument("--layout", choices=LAYOUTS, default=None,
                    help="how a 4-dim tensor is laid out: bhnd ([B, H, N, d], the default) or bnhd ([B, N, H, d], "
                         "flash-attn's); without --layout a shape that looks transposed is refused")
    ap.add_argument("--only", choices=("yours",), default=None,
                    help="yours: only your policies (the flags' and --policy/--policies), without the four "
                         "reference combinations")
    ap.add_argument("--no-reference-combos", action="store_true", help="the same as --only yours")
    _gate_args(ap)
    ap.add_argument("--quiet", action="store_true",
                    help="print the header, summary and gate only; the full table goes to --csv / --json")
    ap.add_argument("--collapse-threshold", type=float, default=0.5,
                    help="a head collapses when its non-sink underflow fraction exceeds this (default: 0.5)...")
    ap.add_argument("--collapse-mass", type=float, default=0.01,
                    help="and when the keys that round to zero carry more than this share of its non-sink attention "
                         "mass (default: 0.01); many tiny P rounding away behind a strong sink is no collapse")
    ap.add_argument("--floor-factor", type=float, default=2.0,
                    help="the P-cast error exceeds the V-cast floor when its MSE is above this many times the "
                         "floor's (default: 2)")
    _kernel_args(ap)
    add_policy_flags(ap)
    return ap


def _gate_args(ap) -> None:
    """``--fail-on`` and ``--json``: the gate and its record."""
    ap.add_argument("--fail-on", action="append", default=[], metavar="COND",
                    help="exit 1 when any head of your policies meets COND (repeatable): collapse, saturation, "
                         "rel-mse>X (relative MSE above X), floor>F (MSE above F times the V-cast floor), "
                         "mass-underflow>X (the exact attention mass of the keys that round to zero above X), ratio>X "
                         "(MSE above X times the best of the four combinations on that head), mismatch (with "
                         "--kernel: a head of the kernel does not implement the policy; gated with --kernel "
                         "whether listed or not, unless --report-mismatch); ':' works for '>'. With --kernel, the "
                         "kernel's measured output is judged: rel-mse and ratio on its measured MSE; collapse, "
                         "saturation, floor and mass-underflow (read from the predicted policy's run) only on "
                         "heads where the kernel agrees with that policy")
    ap.add_argument("--json", default=None, metavar="FILE",
                    help="write every number (rows, heads, summary, gate) to FILE as JSON (schema "
                         "kernels/audit/schema.json)")


def _kernel_args(ap) -> None:
    """``--kernel`` and ``--kernel-allow``: your own kernel beside its policy's prediction."""
    ap.add_argument("--kernel", default=None, metavar="MODULE:FN",
                    help="also run your own kernel fn(q, k, v[, sink_logit=...]) -> out (the probes' convention: "
                         "score scale 1/sqrt(d), a causal mask applied by fn, bottom right) on every layer, heads "
                         "batched, in the file's dtype; each head's measured MSE goes beside the prediction of the "
                         "declared policy (your policy's flags or one --policy), or of the fingerprinted one")
    ap.add_argument("--kernel-allow", type=float, default=0.02, metavar="X",
                    help="with --kernel: the fraction of a head's rows that may lie outside the probes' tolerance "
                         "(default 0.02, pcast.probes.expect.ALLOW: one FP8 rounding tipped by another summation "
                         "order or exp)")
    ap.add_argument("--report-mismatch", action="store_true",
                    help="with --kernel: report a head where the kernel disagrees with the predicted policy but do "
                         "not fail the gate on it (by default such a head fails it, whatever --fail-on lists); the "
                         "JSON records the choice (kernel.mismatch: reported), and the prediction-based conditions "
                         "of that head stay unjudged")


def add_policy_flags(ap) -> None:
    """One flag per Policy field (``--order``, ``--scale``, ``--scale-mode``, ..., ``--block-n``), kept as text
    in ``p_<field>`` for :func:`pcast.audit.flags.yours`, ``--exp2-offset``, and the P·V arithmetic of your
    policy's run (``--pv-arith``, ``--pv-promote``)."""
    group = ap.add_argument_group("your policy (one flag per field of pcast.policies.Policy)")
    for f in policy_fields():
        default = YOURS_DEFAULTS.get(f.name, f.default)
        allowed = allowed_values(f.name).replace("None (YAML null)", "none") + (", or 2^K" if f.name == "scale" else "")
        group.add_argument(flag(f.name), dest=f"p_{f.name}", default=None, metavar=f.name.upper(),
                           help=f"{allowed} (default: {'none' if default is None else default})")
    group.add_argument("--exp2-offset", type=float, default=None, metavar="K",
                       help="the kernel's log2 offset K (FA3: 8): the same as --scale-mode exp2_offset --scale 2^K")
    pv = ap.add_argument_group("the tensor core's P·V arithmetic of your policy's run and the kernel's prediction "
                               "(pcast.attention's call options; every other run stays in float32)")
    pv.add_argument("--pv-arith", default="fp32", metavar="ARITH",
                    help=f"{', '.join(PV_ARITHS)} (a tensor core, mmasim's model on the emulator: needs --fmt and "
                         "--v-fmt e4m3fn or e5m2 and --block-n a multiple of 32) (default: fp32)")
    pv.add_argument("--pv-promote", default="0", metavar="N",
                    help="an int >= 0: the tensor core's accumulator is added into float32 every N KV blocks (0: "
                         "never; another value needs --pv-arith) (default: 0)")


def settings(args: argparse.Namespace) -> AuditSettings:
    """The parsed flags as the audit's settings, by :func:`pcast.audit.settings.audit_settings` (the function
    :func:`pcast.audit.kernel.audit_kernel` builds its own with); ValueError naming a flag."""
    return audit_settings(
        inputs=args.inputs, layers=args.layer, layout=args.layout, causal=args.causal, causal_align=args.causal_align,
        ksink=args.ksink, sm_scale=args.sm_scale, sink_logit=args.sink_logit, backend=args.backend,
        per_head=args.per_head, quiet=args.quiet, csv=args.csv, json=args.json,
        policy_flags={f.name: getattr(args, f"p_{f.name}") for f in policy_fields()}, exp2_offset=args.exp2_offset,
        policies=args.policy, policies_file=args.policies, only_yours=args.only == "yours" or args.no_reference_combos,
        collapse_threshold=args.collapse_threshold, collapse_mass=args.collapse_mass, floor_factor=args.floor_factor,
        fail_on=args.fail_on, kernel=args.kernel, kernel_allow=args.kernel_allow, report_mismatch=args.report_mismatch,
        pv_arith=args.pv_arith, pv_promote=args.pv_promote)


def main(argv=None):
    try:
        s = settings(_parser().parse_args(argv))
        runs, warnings = plan(s)
        for line in warnings:
            print(f"pcast-audit: warning: {line}", file=sys.stderr)
        layers, sinks, head_ksink = load(s)
        header = header_line(layers, s, head_ksink)
        print(header)
        runs, prediction = predict_kernel(s, layers, runs)
        rows, head_rows = run(s, layers, runs, sinks, head_ksink)
        kernel = run_kernel(s, layers, prediction)
    except ValueError as e:
        print(f"pcast-audit: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    return report(s, header, runs, rows, head_rows, warnings, kernel, layers)


if __name__ == "__main__":
    raise SystemExit(main())
