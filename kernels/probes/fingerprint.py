"""Which P policy a black-box attention callable implements, read from its outputs on the probes.

:func:`fingerprint` runs the callable once per probe of :func:`pcast.probes.inputs.default_probes` (or
:func:`~pcast.probes.inputs.small_probes`), laid out as the kernel takes them (:class:`~pcast.probes.inputs.Shape`:
its head dimension, input dtype, batch, heads, grouped-query heads, causal mask), then compares its outputs with
what each candidate policy must give (the emulator). A candidate is named only when it passes
:func:`~pcast.probes.expect.check_policy`, the criterion :func:`pcast.probes.assert_policy` applies too (by default
no row outside the tolerance; ``allow`` opens both alike). The distance to a candidate is the fraction of probe
rows outside the tolerance. Without a named candidate, the nearest one within :data:`NEAR` of the rows is a near
match, given with the probes it misses and the options that explain them. A callable that refuses
``sink_logit`` or ignores it is reported as not supporting learned sinks, and the sink probes leave the
comparison. The options are then identified one at a time (:data:`PARAM_GRID`, the splits, their layout and
P's normalisation included): starting from the nearest candidate, each option in turn takes the value of its
grid that is nearest (fewest rows outside, then the smallest mean log error), until nothing moves; when that
ends on no match, the search starts again from the next nearest candidates (:data:`SEARCH_STARTS`) and keeps
the best end. An option's confidence is 1 when exactly one value of its grid passes the criterion, 1/k when k
values do (no probe tells them apart) and 0 when none does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from pcast.policies import POLICIES, Policy
from pcast.probes.expect import (ALLOW, ATOL, OUTSIDE, RTOL, PolicyCheck, SinkSupport, probe_digest, as_policy, check_policy,
                                 expected_out, row_mismatches, run_box, sink_support)
from pcast.probes.inputs import Shape, default_probes, fitting, small_probes

__all__ = ["fingerprint", "Fingerprint", "Param", "PARAM_GRID", "distance", "TOLERANCE_NOTE", "candidate_set",
           "NEAR", "explain", "observe", "Scorer"]

# The values each option is tried at (block_m shows only under the tile modes, where the rows of a tile share
# a scale; the tile probe fills a tile of each of its values up to its rows).
PARAM_GRID = {
    "order": ("forward", "reverse"),
    "scale": (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 448.0),
    "scale_mode": ("multiply", "exp2_offset", "per_row", "tile_max", "tile_max_padded"),
    "block_m": (16, 32, 64, 128),
    "rescale_threshold": (0.0, 2.0, 4.0, 8.0),
    "sink_mode": ("final", "init"),
    "fmt": ("e4m3fn", "e5m2", "bf16", "fp16"),
    "rowsum": ("unrounded", "rounded"),
    "block_n": (16, 32, 64, 96, 128, 160, 192, 256),  # real kernels' tiles: decode 96, FA3 FP8 160, prefill 192
    "num_splits": (1, 2, 4, 8, 16, 32),
    "split_layout": ("contiguous", "interleaved"),
    "p_normalize": ("online", "partition"),
}
# Partition-normalised P takes its exact max and sum first: the contract allows it only with these values.
_PARTITION_ONLY = {"scale_mode": "multiply", "rescale_threshold": 0.0, "rowsum": "unrounded"}
# A dynamic scale (docs/interfaces.md, "Dynamic P scales") is allowed only with these values and an FP8 P.
_DYNAMIC_MODES = ("per_row", "tile_max", "tile_max_padded")
_DYNAMIC_ONLY = {"scale": 1.0, "rescale_threshold": 0.0, "num_splits": 1, "p_normalize": "online", "sink_mode": "final"}

TOLERANCE_NOTE = (f"tolerance: |out - expected| <= {ATOL:g} + {RTOL:g}·|expected| per element (float32 summation "
                  f"order and exp by ex2.approx, 2 ulp); a candidate is named only when no row lies outside it, "
                  f"as assert_policy requires (a compiled GPU kernel may pass allow={ALLOW:g} to both: an exp "
                  "error can tip one P across an FP8 rounding boundary)")

SEARCH_STARTS = 3  # the option search starts from this many nearest candidates and keeps the best end
NEAR = 0.10  # a candidate missing at most this fraction of the rows, when none is named, is a near match


@dataclass(frozen=True)
class Param:
    """One identified option: its value, how sure (1, 1/k or 0) and the grid values that match."""

    name: str
    value: object
    confidence: float
    consistent: tuple


@dataclass
class Fingerprint:
    """What :func:`fingerprint` found.

    ``policy``: a candidate's name, a tuple of names no probe tells apart, or None; ``distance``: candidate ->
    fraction of probe rows outside tolerance; ``params``: option -> :class:`Param`; ``worst``: candidate ->
    (probe, row, error in units of the tolerance) where it is farthest; ``near``: with no candidate named, the
    nearest within :data:`NEAR`, with ``near_check`` (its :class:`~pcast.probes.expect.PolicyCheck`: the rows
    and probes it misses) and ``explains`` (option -> (the kernel's value, the candidate's) where the option
    search moved away from it); ``sinks``: whether learned sinks are supported; ``shape`` the probes' layout;
    ``allow`` the criterion's allowance; ``tolerance``: what is tolerated; ``outside``: with no candidate named,
    whether the option search found no option set that passes either (None when options were not searched),
    ``best``: the rows outside and the rows at the nearest option set it found."""

    policy: str | tuple | None
    distance: dict
    params: dict = field(default_factory=dict)
    worst: dict = field(default_factory=dict)
    near: str | None = None
    near_check: PolicyCheck | None = None
    explains: dict = field(default_factory=dict)
    sinks: SinkSupport = field(default_factory=lambda: SinkSupport(True))
    shape: Shape = field(default_factory=Shape)
    allow: float = 0.0
    tolerance: str = TOLERANCE_NOTE
    outside: bool | None = None
    best: tuple = (0, 0)

    def outside_text(self) -> str:
        """``outside the model: no option of the contract reproduces these rows (best distance ...)``, or ''."""
        if not self.outside:
            return ""
        bad, rows = self.best
        return (f"{OUTSIDE} (best distance {bad / rows if rows else 0.0:.3g}: the nearest option set the search "
                f"found leaves {bad} of {rows} rows outside; the options below are that set, each at confidence 0)")

    def _confidence(self, option: str) -> str:
        p = self.params.get(option)
        return "" if p is None else f", confidence {p.confidence:.2g}"

    def near_text(self) -> str:
        """``fa3? 4 of 90 rows outside (mass-2048: 3, two-hot-256: 1): scale looks like 128 (fa3: 256, confidence
        1)``, or ''; a kernel outside the model gets that line instead of options."""
        if self.near is None:
            return ""
        c = self.near_check
        probes = ", ".join(f"{n}: {b}" for n, b, _ in c.missed)
        why = "; ".join(f"{o} looks like {_fmt(v)} ({self.near}: {_fmt(w)}{self._confidence(o)})"
                        for o, (v, w) in self.explains.items())
        if self.outside:
            why = self.outside_text()
        return f"{self.near}? {c.outside} of {c.rows} rows outside ({probes})" + (f": {why}" if why else "")

    def __str__(self) -> str:
        lines = [f"policy: {self.policy!r}"]
        if self.near is not None:
            lines.append(f"near: {self.near_text()}")
        elif self.outside:
            lines.append(self.outside_text())
        lines.append(f"probes: {self.shape.describe()}")
        lines.append(str(self.sinks) + ("" if self.sinks.supported else "; the sink probes are left out"))
        lines.append("distance (fraction of probe rows outside tolerance; the worst row):")
        for n, d in sorted(self.distance.items(), key=lambda kv: kv[1]):
            w = self.worst.get(n)
            at = f"  worst: {w[0]} row {w[1]}, {w[2]:.3g}x the tolerance" if w and w[2] > 1 else ""
            lines.append(f"  {n}: {d:.3f}{at}")
        lines.append("options:")
        for p in self.params.values():
            alt = "" if len(p.consistent) == 1 else f" (matching: {', '.join(map(str, p.consistent)) or 'none'})"
            lines.append(f"  {p.name} = {p.value!r}  confidence {p.confidence:.2f}{alt}")
        lines.append(self.tolerance)
        return "\n".join(lines)


def _fmt(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _row_errors(observed, probes, digests, policy: Policy, shape: Shape) -> list:
    """Per probe, each row's largest error in units of the tolerance (> 1: outside)."""
    return [row_mismatches(obs.out, expected_out(probe, policy, shape, dg), obs.dtype)
            for obs, probe, dg in zip(observed, probes, digests)]


def distance(observed, probes, digests, policy: Policy, shape: Shape | None = None) -> tuple[float, tuple]:
    """Fraction of probe rows outside tolerance, and the (probe, row, error) that is farthest."""
    shape = Shape() if shape is None else shape
    bad, total, worst = 0, 0, ("", -1, 0.0)
    for probe, err in zip(probes, _row_errors(observed, probes, digests, policy, shape)):
        bad += int((err > 1).sum())
        total += err.numel()
        i = int(err.argmax())
        if float(err[i]) > worst[2]:
            worst = (probe.name, i, float(err[i]))
    return bad / total, worst


def candidate_set(candidates) -> dict[str, Policy]:
    """name -> Policy from None (every preset), a list of names / Policies / option dicts, or a mapping."""
    if candidates is None:
        return dict(POLICIES)
    if isinstance(candidates, dict):
        return {n: as_policy(c, n) for n, c in candidates.items()}
    out = {}
    for i, c in enumerate(candidates):
        p = as_policy(c, f"options-{i}")
        out[p.name] = p
    if not out:
        raise ValueError("candidates must name at least one policy; allowed: None (every preset), names, "
                         "Policies or option dicts")
    return out


def moved_policy(cur: Policy, name: str, value) -> Policy:
    """``cur`` with option ``name`` at ``value``; moving to partition-normalised P also takes the values
    the contract requires with it (:data:`_PARTITION_ONLY`)."""
    extra = _PARTITION_ONLY if (name, value) == ("p_normalize", "partition") else {}
    if name == "scale_mode" and value in _DYNAMIC_MODES:
        extra = {**_DYNAMIC_ONLY, "fmt": cur.fmt if cur.fmt in ("e4m3fn", "e5m2") else "e4m3fn"}
    return cur.replace(**{name: value, **extra})


class Scorer:
    """Scores option sets against one black box's outputs (cached expected outputs per probe)."""

    def __init__(self, observed, probes, shape: Shape):
        self.observed, self.probes, self.shape = observed, probes, shape
        self.digests = [probe_digest(p, shape) for p in probes]
        self._missed: dict = {}  # probe index -> how often it failed an option set (tried first by passes)

    def score(self, policy: Policy) -> tuple[float, float]:
        """(fraction of rows outside tolerance, mean log(1 + row error)): the second orders option sets that
        miss the same number of rows; (inf, inf) for an option set the contract refuses (e.g. exp2 offset
        with partition P)."""
        try:
            err = torch.cat(_row_errors(self.observed, self.probes, self.digests, policy, self.shape))
        except ValueError:
            return float("inf"), float("inf")
        return float((err > 1).double().mean()), float(torch.log1p(err.clamp(max=1e30)).mean())

    def check(self, policy: Policy, allow: float) -> PolicyCheck:
        return check_policy(self.observed, self.probes, policy, allow=allow, shape=self.shape, digests=self.digests)

    def passes(self, policy: Policy, allow: float) -> bool:
        """:meth:`check`'s verdict, probe by probe, stopping at the first probe that puts it past ``allow``
        (the probes a failing option set missed last go first)."""
        budget = allow * sum(obs.out.shape[0] for obs in self.observed)
        outside = 0
        order = sorted(range(len(self.probes)), key=lambda i: -self._missed.get(i, 0))
        try:
            for i in order:
                err = row_mismatches(self.observed[i].out, expected_out(self.probes[i], policy, self.shape,
                                                                        self.digests[i]), self.observed[i].dtype)
                bad = int((err > 1).sum())
                outside += bad
                if outside > budget:
                    self._missed[i] = self._missed.get(i, 0) + 1
                    return False
        except ValueError:  # an option set the contract refuses
            return False
        return True

    def search(self, start: Policy, allow: float | None = None) -> Policy:
        """Coordinate search over PARAM_GRID from ``start``: each option in turn takes its best value. With
        ``allow``, it stops at the first option set that passes the criterion (at most ``allow`` of the rows
        outside): a failing check's diagnosis needs an explaining option set, not the nearest of all."""
        cur = start.replace(name="search")
        for _ in range(4):
            moved = False
            for name, grid in PARAM_GRID.items():
                grid = tuple(dict.fromkeys((getattr(cur, name), *grid)))  # a preset's own tile may lie off the grid
                scores = {v: self.score(moved_policy(cur, name, v)) for v in grid}
                if scores[getattr(cur, name)] > min(scores.values()):
                    cur = moved_policy(cur, name, min(scores, key=scores.get))
                    moved = True
                    if allow is not None and scores[getattr(cur, name)][0] <= allow:
                        return cur
            if not moved:
                break
        return cur

    def matching(self, at: Policy, name: str, allow: float) -> tuple:
        """The values of option ``name``'s grid that pass the criterion with the other options at ``at``."""
        return tuple(v for v in PARAM_GRID[name] if self.passes(moved_policy(at, name, v), allow))

    def identify(self, starts, allow: float) -> tuple[dict[str, Param], Policy]:
        """The best end point of a coordinate search from each of ``starts`` in turn (stopping at the first
        that passes); each option's values that pass. Returns (params, the end point)."""
        ends = []
        for start in starts:
            ends.append(self.search(start))
            if self.passes(ends[-1], allow):
                break
        cur = min(ends, key=self.score)
        params = {}
        for name in PARAM_GRID:
            ok = self.matching(cur, name, allow)
            params[name] = Param(name, getattr(cur, name), (1.0 / len(ok)) if ok else 0.0, ok)
        return params, cur


def explain(start: Policy, end: Policy, scorer: "Scorer | None" = None) -> dict:
    """option -> (end's value, start's value) for every option of :data:`PARAM_GRID` the two differ in. With
    ``scorer``, only the options whose start value, put back into ``end``, leaves more probe rows outside
    tolerance: an option the probes cannot tell apart at ``end`` (exp2 offset or multiply at S = 1) is not
    named."""
    diff = {n: (getattr(end, n), getattr(start, n)) for n in PARAM_GRID if getattr(end, n) != getattr(start, n)}
    if scorer is None or not diff:
        return diff
    outside = scorer.score(end)[0]
    return {n: vw for n, vw in diff.items() if scorer.score(moved_policy(end, n, vw[1]))[0] > outside}


def probe_layout(d, dtype, batch, heads, kv_heads, causal) -> Shape:
    return Shape(d=d, dtype=dtype, batch=batch, heads=heads, kv_heads=kv_heads, causal=causal)


def observe(fn, probes, device, shape: Shape) -> tuple[list, list, SinkSupport]:
    """Run ``fn`` on every probe; returns (the probes kept, their outputs, the sink support). When ``fn`` refuses
    or ignores ``sink_logit`` on the first learned-sink probe, every sink probe is left out."""
    sinks, tried, kept, observed = SinkSupport(True), False, [], []
    for p in probes:
        if p.sink_logit is not None and not tried:
            tried = True
            sinks, obs = sink_support(fn, p, device, shape)
        elif p.sink_logit is None or sinks.supported:
            obs = run_box(fn, p, device, shape)
        if p.sink_logit is not None and not sinks.supported:
            continue
        kept.append(p)
        observed.append(obs)
    return kept, observed, sinks


def fingerprint(fn, *, candidates=None, probes=None, device="cpu", params: bool = True, d: int | None = None,
                dtype=torch.float32, small: bool = False, batch: int = 1, heads: int = 1,
                kv_heads: int | None = None, causal: bool = False, allow: float = 0.0) -> Fingerprint:
    """Identify the P policy of ``fn(q, k, v, *, sink_logit=None) -> out [B, H, Nq, d]``.

    Args:
        fn: any attention callable (a GPU kernel on CUDA tensors, anything on the CPU); it gets q, k, v on
            ``device`` laid out as below and must use the default score scale 1/sqrt(d).
        candidates: None (every preset of :data:`pcast.policies.POLICIES`), or names, Policies, option
            dicts (Policy fields), or a mapping name -> any of those.
        probes: the probe set (default :func:`~pcast.probes.inputs.default_probes`, or ``small_probes()``
            with ``small=True``). device: where the probe tensors go. params: also identify the options.
        d, dtype, batch, heads, kv_heads, causal: the probes' layout (:class:`~pcast.probes.inputs.Shape`):
            the kernel's head dimension (None: 16, 64 or 256), input dtype (float32, bf16, fp16 or their
            names), B, H, H_kv (grouped-query) and a bottom-right causal mask applied by the kernel.
        allow: the fraction of a probe's rows that may lie outside the tolerance (as in
            :func:`pcast.probes.assert_policy`; a compiled GPU kernel may need :data:`~pcast.probes.expect.ALLOW`).

    Returns a :class:`Fingerprint`. Raises ProbeError naming the probe when fn raises (other than refusing
    ``sink_logit``) or returns the wrong shape, dtype or device; ValueError for bad candidates or layout.
    """
    if isinstance(allow, bool) or not isinstance(allow, (int, float)) or not 0 <= allow < 1:
        raise ValueError(f"allow={allow!r} is not allowed; allowed: a fraction in [0, 1)")
    cands = candidate_set(candidates)
    shape = probe_layout(d, dtype, batch, heads, kv_heads, causal)
    probes = fitting(small_probes() if small else default_probes(), shape) if probes is None else tuple(probes)
    kept, observed, sinks = observe(fn, probes, device, shape)
    sc = Scorer(observed, kept, shape)
    dist, worst, checks = {}, {}, {}
    for name, pol in cands.items():
        dist[name], worst[name] = distance(observed, kept, sc.digests, pol, shape)
        checks[name] = sc.check(pol, allow)
    matches = tuple(sorted(n for n, c in checks.items() if c.passed))
    policy = None if not matches else matches[0] if len(matches) == 1 else matches
    fp = Fingerprint(policy, dist, worst=worst, sinks=sinks, shape=shape, allow=float(allow))
    nearest = sorted(dist, key=dist.get)
    end = None
    if params:
        fp.params, end = sc.identify([cands[n] for n in nearest[:SEARCH_STARTS]], allow)
        if policy is None:
            best = sc.check(end, allow)
            fp.outside, fp.best = not best.passed, (best.outside, best.rows)
    if policy is None and dist[nearest[0]] <= NEAR:
        fp.near, fp.near_check = nearest[0], checks[nearest[0]]
        start = cands[nearest[0]]
        if end is None or explain(start, end) == {} or not sc.passes(end, allow):
            end = sc.search(start, allow)
        if sc.passes(end, allow):  # options are named only where an option set reproduces the rows
            fp.explains = explain(start, end, sc)
            fp.outside = False if fp.outside is not None else None
    return fp
