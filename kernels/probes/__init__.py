"""A kernel engineer's test kit: probe inputs, what a P policy must output on them, and which policy a
black-box kernel implements (docs/probes.md).

- :mod:`pcast.probes.inputs`: named, deterministic probes (mass, one-hot, two-hot, uniform over N keys,
  sink plus tail, lagging max, tile-boundary lengths, learned sink, and decode rows: a sink in a later
  split, N(0, σ²) rows over several partitions, 64-key tiles lifted with a period), each with its purpose
  and observable; :func:`default_probes` and, for slow black boxes, :func:`small_probes`.
- :mod:`pcast.probes.expect`: a policy's expected output and diagnostics on a probe (the emulator), the
  exact output (the reference), and a black box run on a probe with its output checked.
- :class:`pcast.probes.inputs.Shape`: a probe laid out as a kernel takes it (head dimension, input dtype, B, H, grouped-query heads,
  a causal mask).
- :func:`fingerprint`: the preset (or the group no probe tells apart) a callable matches, or a near match with
  the rows it misses and the options that explain them; whether it takes learned sinks; its distance to each
  candidate with the worst row; and its options one by one, each with a confidence.
- :func:`assert_policy`: a pytest helper that fails giving the declared policy in full, every failing probe and
  the options the kernel looks like it has instead, each with its confidence, or that it is outside the model
  (:mod:`pcast.probes.diagnose`).
- :func:`check_policy`: the one criterion both apply.
- :mod:`pcast.probes.cases`: the public 2026 reports of FP8-P failures, rebuilt and checked (table T9);
  its public name is :mod:`pcast.cases`.

Sits above the API and the policies, below the analysis and the command line.
"""

from __future__ import annotations

import torch

from pcast.api_inputs import as_policy
from pcast.probes.diagnose import diagnose as diagnose_policy
from pcast.probes.expect import (ALLOW, ATOL, PolicyCheck, ProbeError, ProbeFailure, RTOL, SinkSupport, check_policy,
                                 exact, expected, policy_text, row_mismatches, run_box)
from pcast.probes.fingerprint import (Fingerprint, NEAR, PARAM_GRID, Param, TOLERANCE_NOTE, Scorer, probe_layout, explain,
                                      fingerprint, observe)
from pcast.probes.inputs import PROBES, Probe, Shape, default_probes, fitting, make_probe, small_probes

__all__ = ["Probe", "Shape", "PROBES", "make_probe", "default_probes", "small_probes", "expected", "exact", "run_box",
           "ProbeError", "fingerprint", "Fingerprint", "Param", "PARAM_GRID", "TOLERANCE_NOTE", "ALLOW", "NEAR",
           "row_mismatches", "assert_policy", "check_policy", "PolicyCheck", "ProbeFailure", "SinkSupport"]


def assert_policy(fn, policy, *, probes=None, device="cpu", allow: float = 0.0, d: int | None = None,
                  dtype=torch.float32, small: bool = False, batch: int = 1, heads: int = 1, kv_heads: int | None = None,
                  causal: bool = False, sinks: bool = True, diagnose: bool = True) -> None:
    """Fail (AssertionError) when ``fn`` does not output what ``policy`` must on the probes.

    Args:
        fn: ``fn(q, k, v, *, sink_logit=None) -> out [B, H, Nq, d]``, as :func:`fingerprint`.
        policy: a preset name, a :class:`pcast.policies.Policy` or a dict of Policy fields.
        probes: the probe set (default :func:`default_probes`; ``small=True``: :func:`small_probes`).
        device: where the tensors go. d, dtype, batch, heads, kv_heads, causal: the probes' layout, as
            :func:`fingerprint`'s. sinks: False leaves the learned-sink probes out (a kernel without sinks).
        allow: fraction of the probes' rows that may lie outside the tolerance (0: none; a compiled GPU
            kernel may need :data:`~pcast.probes.expect.ALLOW` for an exp error that tips one FP8 rounding).
            :func:`fingerprint` names a preset by this same criterion (:func:`check_policy`).
        diagnose: on failure, also search the options from the declared policy (stopping at the first option
            set that passes) and name those the kernel's outputs point to instead, each with its confidence; or
            say the kernel is outside the model when no option set of the contract reproduces its rows.

    The message gives the declared policy in full, every failing probe (what it observes, rows outside, the
    worst row and column with the expected and the actual value) and the options the kernel looks like it has
    instead ("the kernel looks like scale = 128 (confidence 1); declared 256"), or "outside the model: no option
    of the contract reproduces these rows (best distance ...)". Raises ProbeError when fn raises or returns the
    wrong shape, dtype or device.
    """
    pol = as_policy(policy)
    shape = probe_layout(d, dtype, batch, heads, kv_heads, causal)
    probes = fitting(small_probes() if small else default_probes(), shape) if probes is None else tuple(probes)
    if not sinks:
        probes = tuple(p for p in probes if p.sink_logit is None)
    observed = [run_box(fn, p, device, shape) for p in probes]
    sc = Scorer(observed, probes, shape)
    chk = sc.check(pol, allow)
    if chk.passed:
        return
    lines = [f"the kernel does not implement policy {policy_text(pol)}: {chk.outside} of {chk.rows} probe rows "
             f"outside |diff| <= {ATOL_TEXT}, on {len(chk.failures)} of {len(probes)} probes (allowed: "
             f"{int(allow * chk.rows)} rows, allow={allow:g})"]
    lines += [f"  {f}" for f in chk.failures]
    if diagnose:
        text = diagnose_policy(pol, sc, allow).text()
        if text:
            lines.append(text)
    raise AssertionError("\n".join(lines))


def _tol_text() -> str:
    return f"{ATOL:g} + {RTOL:g}·|expected|"


ATOL_TEXT = _tol_text()
