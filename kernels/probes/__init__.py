"""A kernel engineer's test kit: probe inputs, what a P policy must output on them, and which policy a
black-box kernel implements (docs/probes.md).

- :mod:`pcast.probes.inputs`: named, deterministic probes (mass, one-hot, two-hot, uniform over N keys,
  sink plus tail, lagging max, tile-boundary lengths, learned sink, and decode rows: a sink in a later
  split, N(0, σ²) rows over several partitions, 64-key tiles lifted with a period), each with its purpose
  and observable; :func:`default_probes` and, for slow black boxes, :func:`small_probes`.
- :mod:`pcast.probes.expect`: a policy's expected output and diagnostics on a probe (the emulator), the
  exact output (the reference), and a black box run on a probe with its output checked.
- :func:`fingerprint`: the preset (or the group no probe tells apart) a callable matches, its distance to
  each candidate, and its options one by one, each with a confidence.
- :func:`assert_policy`: a pytest helper that fails naming the probe, the expected and the actual value.
- :mod:`pcast.probes.cases`: the public 2026 reports of FP8-P failures, rebuilt and checked (table T9);
  its public name is :mod:`pcast.cases`.

Sits above the API and the policies, below the analysis and the command line.
"""

from __future__ import annotations

from pcast.probes.expect import ALLOW, ProbeError, exact, expected, row_mismatches, run_box
from pcast.probes.fingerprint import PARAM_GRID, TOLERANCE_NOTE, Fingerprint, Param, fingerprint
from pcast.probes.inputs import PROBES, Probe, default_probes, make_probe, small_probes

__all__ = ["Probe", "PROBES", "make_probe", "default_probes", "small_probes", "expected", "exact", "run_box", "ProbeError",
           "fingerprint", "Fingerprint", "Param", "PARAM_GRID", "TOLERANCE_NOTE", "ALLOW", "row_mismatches",
           "assert_policy"]


def assert_policy(fn, policy, *, probes=None, device="cpu", allow: float = 0.0) -> None:
    """Fail (AssertionError) when ``fn`` does not output what ``policy`` must on the probes.

    Args:
        fn: ``fn(q, k, v, *, sink_logit=None) -> out [B, H, Nq, d]``, as :func:`fingerprint`.
        policy: a preset name, a :class:`pcast.policies.Policy` or a dict of Policy fields.
        probes: the probe set (default :func:`default_probes`). device: where the tensors go.
        allow: fraction of a probe's rows that may lie outside the tolerance (0: none; a compiled GPU
            kernel may need :data:`~pcast.probes.expect.ALLOW` for an exp error that tips one FP8 rounding).

    The message names the probe, the row and column, the expected value, the actual value and the
    tolerance. Raises ProbeError when fn raises or returns the wrong shape, dtype or device.
    """
    from pcast.probes.expect import ATOL, RTOL, as_policy

    pol = as_policy(policy)
    for probe in default_probes() if probes is None else probes:
        obs = run_box(fn, probe, device)
        got, want = obs.out, expected(probe, pol).out[0, 0]
        err = row_mismatches(got, want, obs.dtype)
        bad = int((err > 1).sum())
        if bad > allow * err.numel():
            r = int(err.argmax())
            c = int(((got[r].double() - want[r].double()).abs() / (ATOL + RTOL * want[r].double().abs())).argmax())
            raise AssertionError(
                f"probe {probe.name!r} ({probe.observable}): row {r}, column {c}: expected {float(want[r, c]):.9g} "
                f"(policy {pol.name!r}), actual {float(got[r, c]):.9g}; {bad} of {err.numel()} rows outside "
                f"|diff| <= {ATOL:g} + {RTOL:g}·|expected|")
