"""What a policy must output on a probe (the emulator), the exact output (the reference), and running a
black box on a probe with its output checked.

Tolerance: a compiled GPU kernel differs from the emulator by float32 summation order (a few ulps of the
output) and by its exp (``ex2.approx``, at most 2 ulp of P). Both move an output by far less than
:data:`RTOL`; the exp error can also tip a P that lies within 2 ulp of an FP8 rounding boundary onto the
other FP8 neighbour, which moves that one row by up to a rounding step. :func:`row_mismatches` therefore
counts rows outside the tolerance, and a fingerprint allows a small fraction of them (:data:`ALLOW`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import torch

from pcast.api import attention
from pcast.api_inputs import as_policy
from pcast.policies import Policy
from pcast.probes.inputs import DEFAULT_SHAPE, Shape

__all__ = ["RTOL", "ATOL", "ALLOW", "ProbeError", "expected", "expected_out", "exact", "run_box", "row_mismatches",
           "as_policy", "Observed", "check_policy", "PolicyCheck", "ProbeFailure", "SinkSupport", "sink_support",
           "policy_text", "OUTSIDE"]

RTOL = 2.0 ** -12  # relative tolerance per output element (float32 summation order, exp's 2 ulp)
ATOL = 2.0 ** -14  # absolute floor for outputs near 0 (V is in [-1, 1])
ALLOW = 0.02  # fraction of probe rows a compiled GPU kernel may miss (an exp error tipping one FP8 rounding)
#: What a diagnosis says when no option set of the contract passes the criterion on a black box's rows
OUTSIDE = "outside the model: no option of the contract reproduces these rows"
_CACHE: dict = {}  # (probe digest, shape, policy key) -> expected out [rows, d]
_CACHE_MAX = 4096


class ProbeError(RuntimeError):
    """A black box failed on a probe: it raised, or returned the wrong shape, dtype or device."""


@dataclass(frozen=True)
class Observed:
    """A black box's output on one probe (float32 [B·H·Nq, d], CPU: the rows of every (batch, head) in turn),
    the probe's name and the dtype the box returned (a bf16 or fp16 output widens the tolerance by one ulp of
    that dtype)."""

    probe: str
    out: torch.Tensor
    dtype: torch.dtype = torch.float32


def policy_text(policy) -> str:
    """A policy in full: its name and every keyword of :func:`pcast.attention` it sets."""
    pol = as_policy(policy)
    kw = ", ".join(f"{n}={v!r}" for n, v in pol.attention_kwargs().items())
    return f"{pol.name!r} ({kw})"


def expected(probe, policy, backend: str = "emulator", *, shape: Shape | None = None):
    """The :class:`pcast.AttentionResult` ``policy`` must give on ``probe`` laid out as ``shape``
    (emulator by default)."""
    shape = DEFAULT_SHAPE if shape is None else shape
    q, k, v, sink = probe.tensors(shape)
    causal = {"causal": True, "causal_align": "bottom_right"} if shape.causal else {}
    return attention(q, k, v, policy=as_policy(policy), sink_logit=sink, backend=backend, **causal)


def probe_digest(probe, shape: Shape) -> str:
    h = hashlib.sha1(probe.logits.numpy().tobytes())
    h.update(repr((probe.name, probe.shape, probe.sink_logit, shape)).encode())
    return h.hexdigest()


def _key(policy: Policy) -> tuple:
    kw = policy.attention_kwargs()
    if kw["scale_mode"] not in ("tile_max", "tile_max_padded"):  # query rows are independent: block_m never shows
        kw.pop("block_m")
    return tuple(sorted(kw.items()))


def expected_out(probe, policy: Policy, shape: Shape | None = None, digest: str | None = None) -> torch.Tensor:
    """The emulator's output for ``policy`` on ``probe`` as [B·H·Nq, d] (cached), computed on one torch thread:
    its matmuls are small, and a thread pool that spins on a busy machine makes them many times slower."""
    shape = DEFAULT_SHAPE if shape is None else shape
    key = (digest or probe_digest(probe, shape), _key(policy))
    if key not in _CACHE:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            out = expected(probe, policy, shape=shape).out
            _CACHE[key] = out.reshape(-1, out.shape[-1])
        finally:
            torch.set_num_threads(threads)
    return _CACHE[key]


def exact(probe, shape: Shape | None = None) -> torch.Tensor:
    """The float64 reference output on ``probe`` (no rounding anywhere), [Nq, d] (of batch 0, head 0)."""
    shape = DEFAULT_SHAPE if shape is None else shape
    q, k, v, sink = probe.tensors(shape)
    causal = {"causal": True, "causal_align": "bottom_right"} if shape.causal else {}
    return attention(q, k, v, sink_logit=sink, backend="reference", **causal).out[0, 0]


def _call(fn, probe, q, k, v, sink):
    try:
        return fn(q, k, v) if sink is None else fn(q, k, v, sink_logit=sink)
    except Exception as e:  # noqa: BLE001 - any failure of the user's callable is reported, named
        raise ProbeError(f"the callable raised on probe {probe.name!r}: {type(e).__name__}: {e}") from e


def _checked(out, probe, q) -> torch.Tensor:
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
    return out


def run_box(fn, probe, device: str | torch.device = "cpu", shape: Shape | None = None) -> Observed:
    """``fn(q, k, v[, sink_logit=...])`` on ``probe``'s tensors (laid out as ``shape``) moved to ``device``; its
    output checked.

    Raises:
        ProbeError: naming the probe, when fn raises or returns something other than a float tensor of
            shape [B, H, Nq, d] on ``device``.
    """
    q, k, v, sink = (None if t is None else t.to(device) for t in probe.tensors(shape))
    out = _checked(_call(fn, probe, q, k, v, sink), probe, q)
    return Observed(probe.name, out.detach().to("cpu", torch.float32).reshape(-1, q.shape[-1]), out.dtype)


@dataclass(frozen=True)
class SinkSupport:
    """Whether a callable takes learned sinks: ``supported``, and why not (it raised on the sink probe, or its
    output did not move when ``sink_logit`` was passed)."""

    supported: bool
    reason: str = ""

    def __str__(self) -> str:
        return "learned sinks: supported" if self.supported else f"learned sinks: not supported ({self.reason})"


def sink_support(fn, probe, device="cpu", shape: Shape | None = None) -> tuple[SinkSupport, Observed | None]:
    """Run ``fn`` on a learned-sink probe with and without ``sink_logit``: not supported when it raises with the
    sink (but not without) or when its output does not move beyond the tolerance (it ignores the sink); returns
    the support and the observed output with the sink (None when not supported).

    Raises:
        ProbeError: when fn fails without the sink too, or returns a bad tensor.
    """
    q, k, v, sink = (None if t is None else t.to(device) for t in probe.tensors(shape))
    plain = _checked(_call(fn, probe, q, k, v, None), probe, q)
    try:
        got = fn(q, k, v, sink_logit=sink)
    except Exception as e:  # noqa: BLE001 - a callable that refuses sink_logit
        return SinkSupport(False, f"the callable raised with sink_logit on probe {probe.name!r}: "
                                  f"{type(e).__name__}: {e}"), None
    got = _checked(got, probe, q)
    width = q.shape[-1]
    a = got.detach().to("cpu", torch.float32).reshape(-1, width)
    b = plain.detach().to("cpu", torch.float32).reshape(-1, width)
    if bool((row_mismatches(a, b, got.dtype) <= 1).all()):
        return SinkSupport(False, f"its output does not move with sink_logit on probe {probe.name!r}"), None
    return SinkSupport(True), Observed(probe.name, a, got.dtype)


def row_mismatches(actual: torch.Tensor, want: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Per row of [rows, d]: the largest ``|actual − want|`` in units of ATOL + RTOL·``|want|`` (> 1: outside); an
    output returned in a narrower ``dtype`` (bf16, fp16) may also be one ulp of that dtype off."""
    want = want.to(torch.float64)
    rtol = RTOL + (torch.finfo(dtype).eps if dtype in (torch.bfloat16, torch.float16) else 0.0)
    err = (actual.to(torch.float64) - want).abs() / (ATOL + rtol * want.abs())
    err = torch.where(torch.isnan(err), torch.full_like(err, float("inf")), err)
    return err.amax(dim=-1)


# ----------------------------------------------------------------------------- the one criterion

@dataclass(frozen=True)
class ProbeFailure:
    """A probe on which a policy's expected output was missed: rows outside the tolerance, and the worst
    element (row, column, expected, actual, error in units of the tolerance)."""

    probe: str
    observable: str
    outside: int
    rows: int
    row: int
    column: int
    expected: float
    actual: float
    error: float
    head: int = 0  # the (batch, head) the worst row is in, counted batch-major (0 with B = H = 1)

    def __str__(self) -> str:
        where = f" of (batch, head) {self.head}" if self.head else ""
        return (f"probe {self.probe!r} ({self.observable}): {self.outside} of {self.rows} rows outside; worst row "
                f"{self.row}{where}, column {self.column}: expected {self.expected:.9g}, actual {self.actual:.9g} "
                f"({self.error:.3g}x the tolerance)")


@dataclass(frozen=True)
class PolicyCheck:
    """A policy against a black box's outputs on a probe set: ``passed`` when at most ``allow`` of all the probe
    rows lie outside the tolerance; the rows outside in all; one failure per probe with a row outside, and
    (probe, rows outside, rows) for each of them (``missed``)."""

    policy: Policy
    passed: bool
    outside: int
    rows: int
    failures: tuple = field(default_factory=tuple)
    missed: tuple = field(default_factory=tuple)  # (probe name, rows outside, rows) for every probe with one

    @property
    def distance(self) -> float:
        return self.outside / self.rows if self.rows else 0.0


def check_policy(observed, probes, policy, *, allow: float = 0.0, shape: Shape | None = None,
                 digests=None) -> PolicyCheck:
    """The criterion :func:`pcast.probes.assert_policy` and :func:`pcast.probes.fingerprint` share: ``policy``
    passes when at most ``allow`` of all the probes' rows (0: none) lie outside
    ``|out − expected| ≤ ATOL + RTOL·|expected|`` (plus one ulp of a bf16 or fp16 output)."""
    pol = as_policy(policy)
    shape = DEFAULT_SHAPE if shape is None else shape
    digests = digests or [probe_digest(p, shape) for p in probes]
    outside, rows, failures, missed = 0, 0, [], []
    for obs, probe, dg in zip(observed, probes, digests):
        want = expected_out(probe, pol, shape, dg)
        err = row_mismatches(obs.out, want, obs.dtype)
        bad = int((err > 1).sum())
        outside, rows = outside + bad, rows + err.numel()
        if bad:
            missed.append((probe.name, bad, err.numel()))
            r = int(err.argmax())
            diff = (obs.out[r].double() - want[r].double()).abs() / (ATOL + RTOL * want[r].double().abs())
            diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
            c = int(diff.argmax())
            nq = probe.shape[0]
            failures.append(ProbeFailure(probe.name, probe.observable, bad, err.numel(), r % nq, c, float(want[r, c]),
                                         float(obs.out[r, c]), float(err[r]), r // nq))
    return PolicyCheck(pol, outside <= allow * rows, outside, rows, tuple(failures), tuple(missed))
