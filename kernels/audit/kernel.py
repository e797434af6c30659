"""Audit the kernel itself: your callable's measured error per head, beside the prediction of its policy.

The callable is the probes' (:func:`pcast.probes.fingerprint`): ``fn(q, k, v[, sink_logit=...]) -> out
[B, H, Nq, d]``, default score scale 1/sqrt(d), a causal mask (when asked for) applied by the kernel itself,
bottom-right aligned. It is called once per layer with every (batch, head) in one call, on tensors of the
file's dtype. Each head's MSE and relative MSE against the float64 reference (measured) go beside the same
numbers of the emulator running the declared policy (predicted), or the policy :func:`pcast.probes.fingerprint`
reads from the callable when none is declared.

The tolerance is the probes' own, the criterion of :func:`pcast.probes.check_policy`: a row of a head agrees
when ``|out_kernel − out_policy| ≤ ATOL + RTOL·|out_policy|`` in every column (ATOL = 2^-14, RTOL = 2^-12,
plus one ulp of a bf16 or fp16 output); a head implements the policy when at most ``allow`` of its rows lie
outside (by default :data:`pcast.probes.expect.ALLOW`, 2%: on real inputs of thousands of rows another
float32 summation order or exp may tip one P across an FP8 rounding boundary in a row or two; a wrong policy
misses nearly every row). The MSEs are what a reader compares; the rows outside are the verdict, so
two policies whose MSEs happen to be close are still told apart.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from pcast.api import attention
from pcast.api_inputs import as_policy, check_inputs
from pcast.audit.settings import AuditSettings, audit_settings
from pcast.policies import Policy, get_policy
from pcast.probes import fingerprint
from pcast.probes.diagnose import single_changes
from pcast.probes.expect import policy_text, row_mismatches

__all__ = ["audit_kernel", "KernelAudit", "KernelHead", "TOLERANCE_SOURCE", "kernel_policy"]

TOLERANCE_SOURCE = ("the probes' tolerance (pcast.probes.check_policy's criterion): a row agrees when "
                    "|out_kernel - out_policy| <= 2^-14 + 2^-12·|out_policy| in every column (plus one ulp of a bf16 "
                    "or fp16 output); a head agrees when at most {allow:g} of its rows lie outside")


def kernel_policy(fn, policy, *, d: int, dtype, causal: bool = False):
    """``(Policy or None, source, outside)``: the declared policy (a name, a dict of Policy fields or a Policy)
    with source ``"declared"``, or, when ``policy`` is None, the one :func:`pcast.probes.fingerprint` reads from
    ``fn`` at head dimension ``d`` and ``dtype`` (a named preset, else the identified options) with source
    ``"fingerprinted"``. ``outside``: '' or, when the fingerprint finds the kernel outside the model (no option
    set of the contract reproduces its probe rows), its words; the policy is then None: nothing predicts it."""
    if policy is not None:
        return as_policy(policy), "declared", ""
    fp = fingerprint(fn, d=d, dtype=dtype, causal=causal, small=True)
    if fp.policy is not None:
        name = fp.policy if isinstance(fp.policy, str) else fp.policy[0]
        return get_policy(name), "fingerprinted", ""
    if fp.outside:
        return None, "fingerprinted", "the fingerprint finds the kernel " + fp.outside_text()
    return Policy("fingerprinted", **{n: p.value for n, p in fp.params.items()}), "fingerprinted", ""


@dataclass(frozen=True)
class KernelHead:
    """One head: measured and predicted MSE and relative MSE against the float64 reference, its rows outside
    the probes' tolerance around the policy's output, and whether the head agrees (at most ``allow`` rows out);
    the predicted numbers, the rows outside and ``agrees`` are None where nothing predicts the kernel."""

    layer: object
    batch: int
    head: int
    measured_mse: float
    measured_rel_mse: float
    predicted_mse: float | None
    predicted_rel_mse: float | None
    rows_outside: int | None
    rows: int
    agrees: bool | None

    def text(self, policy_source: str) -> str:
        where = f"layer {'-' if self.layer is None else self.layer}, batch {self.batch}, head {self.head}"
        if self.agrees is None:
            return f"{where}: measured MSE {self.measured_mse:.3g} (nothing predicts it)"
        if self.agrees:
            return (f"{where}: the kernel implements the {policy_source} policy: measured MSE "
                    f"{self.measured_mse:.3g}, predicted MSE {self.predicted_mse:.3g}")
        return (f"{where}: the kernel does not implement the {policy_source} policy: measured MSE "
                f"{self.measured_mse:.3g}, predicted MSE {self.predicted_mse:.3g} ({self.rows_outside} of {self.rows} "
                f"rows outside the probes' tolerance)")


@dataclass
class KernelAudit:
    """What :func:`audit_kernel` found: the policy compared with (None when nothing predicts the kernel:
    ``outside`` says why) and where it came from, one :class:`KernelHead` per (layer, batch, head), the
    tolerance's source, whether a disagreeing head fails the gate (``mismatch_gated``) and the single option
    change that reproduces the disagreeing heads (``differs``: ``(option, kernel's value, the policy's)``,
    None when none does, or not searched)."""

    policy: object
    policy_source: str
    heads: list = field(default_factory=list)
    allow: float = 0.02
    outside: str = ""
    mismatch_gated: bool = True
    differs: tuple | None = None
    searched: bool = False
    pv: dict = field(default_factory=dict)

    @property
    def tolerance(self) -> str:
        return TOLERANCE_SOURCE.format(allow=self.allow)

    @property
    def mismatches(self) -> list:
        return [h for h in self.heads if h.agrees is False]

    def differs_text(self) -> str:
        """``differing option: order = forward (the declared policy: reverse)``, or why none is named."""
        if self.differs is not None:
            name, got, want = self.differs
            return (f"differing option: {name} = {got!r} (the {self.policy_source} policy: {want!r}), checked: "
                    "with it the emulator reproduces the disagreeing heads")
        if self.searched:
            return ("no single option change of the contract reproduces the disagreeing heads; no option is "
                    "named")
        return ""

    def __str__(self) -> str:
        if self.policy is None:
            lines = [f"kernel: nothing predicts it: {self.outside}"]
        else:
            pv = "".join(f", {n}={x!r}" for n, x in self.pv.items() if n != "backend")
            lines = [f"kernel vs the {self.policy_source} policy {policy_text(self.policy)}{pv}: "
                     f"{len(self.heads) - len(self.mismatches)} of {len(self.heads)} heads agree"]
        lines += ["  " + h.text(self.policy_source) for h in (self.mismatches or self.heads)[:8]]
        if self.mismatches and self.differs_text():
            lines.append("  " + self.differs_text())
        lines.append(f"  (tolerance: {self.tolerance})")
        return "\n".join(lines)

    def document(self) -> dict:
        """The ``kernel`` section of ``--json``."""
        return {"policy": None if self.policy is None else self.policy.name, "policy_source": self.policy_source,
                "options": None if self.policy is None else {**self.policy.attention_kwargs(), **self.pv},
                "tolerance": self.tolerance, "allow": self.allow, "outside": self.outside or None,
                "mismatch": "gated" if self.mismatch_gated else "reported",
                "differing_option": None if self.differs is None else
                {"option": self.differs[0], "kernel": self.differs[1], "policy": self.differs[2]},
                "heads": [asdict(h) for h in self.heads]}


def _call_kernel(fn, q, k, v, sink_logit):
    try:
        out = fn(q, k, v) if sink_logit is None else fn(q, k, v, sink_logit=sink_logit)
    except Exception as e:  # noqa: BLE001 - the user's callable: any failure is reported, named
        raise ValueError(f"the kernel raised on the audited tensors: {type(e).__name__}: {e}") from e
    out = getattr(out, "out", out)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(q.shape) or not out.is_floating_point():
        raise ValueError(f"the kernel returned {getattr(out, 'shape', type(out).__name__)}; expected a float tensor "
                         f"[B, H, Nq, d] = {tuple(q.shape)}")
    return out


def kernel_heads(out, pred, ref, *, layer=None, allow: float = 0.0) -> list:
    """One :class:`KernelHead` per (batch, head) from the kernel's output, the policy's (None: nothing predicts
    it) and the reference."""
    heads = []
    for b in range(out.shape[0]):
        for h in range(out.shape[1]):
            o, r = (t[b, h].to(torch.float64) for t in (out, ref))
            power = float((r**2).mean())
            rel = (lambda x: x / power if power > 0 else float("nan"))
            meas = float(((o - r) ** 2).mean())
            if pred is None:
                heads.append(KernelHead(layer, b, h, meas, rel(meas), None, None, None, o.shape[0], None))
                continue
            want = float(((pred[b, h].to(torch.float64) - r) ** 2).mean())
            outside = int((row_mismatches(out[b, h], pred[b, h], out.dtype) > 1).sum())
            heads.append(KernelHead(layer, b, h, meas, rel(meas), want, rel(want), outside, o.shape[0],
                                    outside <= allow * o.shape[0]))
    return heads


def audit_kernel(fn, q, k, v, *, policy=None, sink_logit=None, causal: bool = False, layer=None,
                 allow: float = 0.02, pv_arith: str = "fp32", pv_promote: int = 0) -> KernelAudit:
    """Run ``fn`` on q, k, v (every head in one call) and compare each head's error against the float64
    reference with the prediction of ``policy`` (a preset name, a dict of Policy fields or a Policy; None: the
    policy :func:`pcast.probes.fingerprint` reads from ``fn`` at q's head dimension and dtype).

    q, k, v: float32, bf16 or fp16 ``[B, H, N, d]`` (k and v may have fewer heads, grouped-query), checked by
    :func:`pcast.api_inputs.check_inputs`; ``fn`` gets them in their own dtype. ``sink_logit``: None, a float or
    a ``[B, H]`` tensor, given to ``fn``, the prediction and the reference. ``causal``: the kernel applies a
    bottom-right causal mask itself. ``allow``: the fraction of a head's rows that may lie outside the
    tolerance. ``pv_arith``, ``pv_promote``: the tensor core's P·V arithmetic of the prediction, as
    :func:`pcast.attention` takes them (:data:`pcast.contract.PV_ARITHS`; a value other than "fp32" needs a declared
    ``policy`` with FP8 ``fmt`` and ``v_fmt`` and ``block_n`` a multiple of 32, and runs the emulator; ``pv_promote``
    other than 0 needs such a ``pv_arith``). The keywords become an
    :class:`~pcast.audit.settings.AuditSettings` through
    :func:`~pcast.audit.settings.audit_settings`, as the command line's flags do. Returns a :class:`KernelAudit`;
    ValueError for bad inputs, a callable that raises or returns the wrong shape.
    """
    settings = audit_settings(api=True, kernel_fn=fn, kernel_policy=policy, sink_logit=sink_logit, causal=causal,
                              kernel_allow=allow, pv_arith=pv_arith, pv_promote=pv_promote)
    inp = check_inputs(q, k, v, policy=None)
    pol, source, outside = kernel_policy(fn, settings.kernel_policy, d=q.shape[-1], dtype=inp.dtype, causal=causal)
    return measure_kernel(settings, q, k, v, pol, source, outside=outside, layer=layer)


def measure_kernel(settings: AuditSettings, q, k, v, pol, source: str, *, outside: str = "", layer=None,
                   differs: bool = False) -> KernelAudit:
    """:func:`audit_kernel` with the policy ``pol`` already resolved (None: nothing predicts the kernel, the heads
    are measured only; ``outside`` says why): ``settings.kernel_fn`` on q, k, v with ``settings.sink_logit``,
    ``settings.causal`` and ``settings.kernel_allow``. ``differs``: for the heads that disagree, search the single
    option changes of ``pol`` (:func:`pcast.probes.diagnose.single_changes`) for the first that reproduces them
    all."""
    fn, sink_logit, causal, allow = settings.kernel_fn, settings.sink_logit, settings.causal, settings.kernel_allow
    inp = check_inputs(q, k, v, policy=None)
    if sink_logit is not None and not isinstance(sink_logit, torch.Tensor):
        sink_logit = torch.full(q.shape[:2], float(sink_logit), dtype=torch.float32, device=q.device)
    mask = {"causal": True, "causal_align": "bottom_right"} if causal else {}
    out = _call_kernel(fn, q, k, v, sink_logit)
    pv = settings.pv_options if pol is not None and source == "declared" else {}
    pred = None if pol is None else attention(inp.q, inp.k, inp.v, policy=pol, sink_logit=sink_logit,
                                              **{**mask, "backend": "emulator", **pv}).out
    ref = attention(inp.q, inp.k, inp.v, sink_logit=sink_logit, backend="reference", **mask).out
    got = KernelAudit(pol, source, kernel_heads(out, pred, ref, layer=layer, allow=allow), float(allow), outside,
                      pv={n: x for n, x in pv.items() if n != "backend"})
    if differs and got.mismatches:
        got.searched = True
        got.differs = _differing_option(out, inp, pol, got.mismatches, sink_logit, {**mask, **pv}, allow)
    return got


def _differing_option(out, inp, pol, bad, sink_logit, mask, allow):
    """The first single option change of ``pol`` under which the emulator reproduces every head of ``bad``
    (at most 8 of them) within the tolerance: ``(option, value, pol's value)``, or None."""
    bad = bad[:8]
    group = inp.q.shape[1] // inp.k.shape[1]
    q = torch.stack([inp.q[h.batch, h.head] for h in bad])[None]
    k, v = (torch.stack([t[h.batch, h.head // group] for h in bad])[None] for t in (inp.k, inp.v))
    o = torch.stack([out[h.batch, h.head] for h in bad])
    sl = None if sink_logit is None else torch.stack([sink_logit[h.batch, h.head] for h in bad])[None]
    for name, value, cand in single_changes(pol):
        try:
            pred = attention(q, k, v, policy=cand, sink_logit=sl, **{"backend": "emulator", **mask}).out[0]
        except ValueError:  # an option set the contract refuses on these inputs
            continue
        if all(int((row_mismatches(o[i], pred[i], out.dtype) > 1).sum()) <= allow * o.shape[1]
               for i in range(len(bad))):
            return name, value, getattr(pol, name)
    return None
