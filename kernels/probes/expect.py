"""What a policy must output on a probe (the emulator), the exact output (the reference), and running a
black box on a probe with its output checked.

Tolerance: a compiled GPU kernel differs from the emulator by float32 summation order (a few ulps of the
output) and by its exp (``ex2.approx``, at most 2 ulp of P). Both move an output by far less than
:data:`RTOL`; the exp error can also tip a P that lies within 2 ulp of an FP8 rounding boundary onto the
other FP8 neighbour, which moves that one row by up to a rounding step. :func:`row_mismatches` therefore
counts rows outside the tolerance, and a fingerprint allows a small fraction of them (:data:`ALLOW`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pcast.policies import Policy, get_policy

__all__ = ["RTOL", "ATOL", "ALLOW", "ProbeError", "expected", "exact", "run_box", "row_mismatches", "as_policy",
           "Observed"]

RTOL = 2.0 ** -12  # relative tolerance per output element (float32 summation order, exp's 2 ulp)
ATOL = 2.0 ** -14  # absolute floor for outputs near 0 (V is in [-1, 1])
ALLOW = 0.02  # fraction of probe rows a matching kernel may miss (an exp error tipping one FP8 rounding)


class ProbeError(RuntimeError):
    """A black box failed on a probe: it raised, or returned the wrong shape, dtype or device."""


@dataclass(frozen=True)
class Observed:
    """A black box's output on one probe (float32 [Nq, d], CPU), the probe's name and the dtype the box
    returned (a bf16 or fp16 output widens the tolerance by one ulp of that dtype)."""

    probe: str
    out: torch.Tensor
    dtype: torch.dtype = torch.float32


def as_policy(candidate, name: str | None = None) -> Policy:
    """A Policy from a preset name, a Policy, or a mapping of Policy fields (an explicit option set).

    Raises:
        ValueError: naming the candidate and what is allowed.
    """
    if isinstance(candidate, Policy):
        return candidate
    if isinstance(candidate, str):
        return get_policy(candidate)
    if isinstance(candidate, dict):
        return Policy(name=name or "options", **candidate)
    raise ValueError(f"candidate {candidate!r} is not allowed; allowed: a preset name, a Policy or a dict of "
                     "Policy fields")


def expected(probe, policy, backend: str = "emulator"):
    """The :class:`pcast.AttentionResult` ``policy`` must give on ``probe`` (emulator by default)."""
    from pcast.api import attention

    q, k, v, sink = probe.tensors()
    return attention(q, k, v, policy=as_policy(policy), sink_logit=sink, backend=backend)


def exact(probe) -> torch.Tensor:
    """The float64 reference output on ``probe`` (no rounding anywhere), [Nq, d]."""
    from pcast.api import attention

    q, k, v, sink = probe.tensors()
    return attention(q, k, v, sink_logit=sink, backend="reference").out[0, 0]


def run_box(fn, probe, device: str | torch.device = "cpu") -> Observed:
    """``fn(q, k, v[, sink_logit=...])`` on ``probe``'s tensors moved to ``device``; its output checked.

    Raises:
        ProbeError: naming the probe, when fn raises or returns something other than a float tensor of
            shape [1, 1, Nq, d] on ``device``.
    """
    q, k, v, sink = (None if t is None else t.to(device) for t in probe.tensors())
    try:
        out = fn(q, k, v) if sink is None else fn(q, k, v, sink_logit=sink)
    except Exception as e:  # noqa: BLE001 - any failure of the user's callable is reported, named
        raise ProbeError(f"the callable raised on probe {probe.name!r}: {type(e).__name__}: {e}") from e
    out = getattr(out, "out", out)  # an AttentionResult is accepted too
    if not isinstance(out, torch.Tensor):
        raise ProbeError(f"probe {probe.name!r}: the callable returned {type(out).__name__}; expected a tensor "
                         f"[B, H, Nq, d] = {tuple(q.shape)}")
    if tuple(out.shape) != tuple(q.shape):
        raise ProbeError(f"probe {probe.name!r}: the callable returned shape {tuple(out.shape)}; expected "
                         f"[B, H, Nq, d] = {tuple(q.shape)}")
    if not out.is_floating_point():
        raise ProbeError(f"probe {probe.name!r}: the callable returned dtype {out.dtype}; expected a floating "
                         "dtype (float32, float16 or bfloat16)")
    if out.device != q.device:
        raise ProbeError(f"probe {probe.name!r}: the callable returned a tensor on {out.device}; expected it on "
                         f"the inputs' device {q.device}")
    return Observed(probe.name, out.detach().to("cpu", torch.float32)[0, 0], out.dtype)


def row_mismatches(actual: torch.Tensor, want: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Per row of [Nq, d]: the largest ``|actual − want|`` in units of ATOL + RTOL·``|want|`` (> 1: outside); an
    output returned in a narrower ``dtype`` (bf16, fp16) may also be one ulp of that dtype off."""
    want = want.to(torch.float64)
    rtol = RTOL + (torch.finfo(dtype).eps if dtype in (torch.bfloat16, torch.float16) else 0.0)
    err = (actual.to(torch.float64) - want).abs() / (ATOL + rtol * want.abs())
    err = torch.where(torch.isnan(err), torch.full_like(err, float("inf")), err)
    return err.amax(dim=-1)
