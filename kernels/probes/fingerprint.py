"""Which P policy a black-box attention callable implements, read from its outputs on the probes.

:func:`fingerprint` runs the callable once per probe of :func:`pcast.probes.inputs.default_probes`,
then compares its outputs with what each candidate policy must give (the emulator). The distance to a
candidate is the fraction of probe rows whose output lies outside the tolerance of
:mod:`pcast.probes.expect` (float32 summation order, ``ex2.approx``'s 2 ulp); a candidate matches when
the distance is at most :data:`~pcast.probes.expect.ALLOW`. The options are then identified one at a
time (:data:`PARAM_GRID`, the splits, their layout and P's normalisation included): starting from the
nearest candidate, each option in turn takes the value of its grid that is nearest (fewest rows outside,
then the smallest mean log error), until nothing moves; when that ends on no match, the search starts
again from the next nearest candidates (:data:`SEARCH_STARTS`) and keeps the best end. An option's
confidence is 1 when exactly one value of its grid matches, 1/k when k values match (no probe tells them
apart) and 0 when none does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import torch

from pcast.policies import POLICIES, Policy
from pcast.probes.expect import ALLOW, ATOL, RTOL, as_policy, expected, row_mismatches, run_box
from pcast.probes.inputs import default_probes

__all__ = ["fingerprint", "Fingerprint", "Param", "PARAM_GRID", "distance", "TOLERANCE_NOTE", "candidate_set"]

# The values each option is tried at (block_m is absent: query rows are independent, so it never shows).
PARAM_GRID = {
    "order": ("forward", "reverse"),
    "scale": (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 448.0),
    "scale_mode": ("multiply", "exp2_offset"),
    "rescale_threshold": (0.0, 2.0, 4.0, 8.0),
    "sink_mode": ("final", "init"),
    "fmt": ("e4m3fn", "e5m2", "bf16", "fp16"),
    "rowsum": ("unrounded", "rounded"),
    "block_n": (16, 32, 64, 128, 256),
    "num_splits": (1, 2, 4, 8, 16, 32),
    "split_layout": ("contiguous", "interleaved"),
    "p_normalize": ("online", "partition"),
}
# Partition-normalised P takes its exact max and sum first: the contract allows it only with these values.
_PARTITION_ONLY = {"scale_mode": "multiply", "rescale_threshold": 0.0, "rowsum": "unrounded"}

TOLERANCE_NOTE = (f"tolerates a compiled GPU kernel's known differences: float32 summation order and exp by "
                  f"ex2.approx (2 ulp), as |out - expected| <= {ATOL:g} + {RTOL:g}·|expected| per element, with "
                  f"up to {ALLOW:.0%} of probe rows outside it (an exp error tipping one P across an FP8 "
                  "rounding boundary)")

SEARCH_STARTS = 3  # the option search starts from this many nearest candidates and keeps the best end
_CACHE: dict = {}  # (probe digest, policy key) -> expected out [Nq, d]
_CACHE_MAX = 4096


@dataclass(frozen=True)
class Param:
    """One identified option: its value, how sure (1, 1/k or 0) and the grid values that match."""

    name: str
    value: object
    confidence: float
    consistent: tuple


@dataclass
class Fingerprint:
    """What :func:`fingerprint` found. ``policy``: a candidate's name, a tuple of names no probe tells apart,
    or None; ``distance``: candidate -> fraction of probe rows outside tolerance; ``params``: option ->
    :class:`Param`; ``worst``: candidate -> (probe, row) where it is farthest; ``tolerance``: what is
    tolerated."""

    policy: str | tuple | None
    distance: dict
    params: dict = field(default_factory=dict)
    worst: dict = field(default_factory=dict)
    tolerance: str = TOLERANCE_NOTE

    def __str__(self) -> str:
        lines = [f"policy: {self.policy!r}", "distance (fraction of probe rows outside tolerance):"]
        lines += [f"  {n}: {d:.3f}" for n, d in sorted(self.distance.items(), key=lambda kv: kv[1])]
        lines.append("options:")
        for p in self.params.values():
            alt = "" if len(p.consistent) == 1 else f" (matching: {', '.join(map(str, p.consistent)) or 'none'})"
            lines.append(f"  {p.name} = {p.value!r}  confidence {p.confidence:.2f}{alt}")
        lines.append(self.tolerance)
        return "\n".join(lines)


def _digest(probe) -> str:
    h = hashlib.sha1(probe.logits.numpy().tobytes())
    h.update(repr((probe.name, probe.shape, probe.sink_logit)).encode())
    return h.hexdigest()


def _key(policy: Policy) -> tuple:
    kw = policy.attention_kwargs()
    kw.pop("block_m")
    return tuple(sorted(kw.items()))


def _expected_out(probe, policy: Policy, digest: str):
    """The emulator's output for ``policy`` on ``probe`` (cached), computed on one torch thread: its matmuls
    are small, and a thread pool that spins on a busy machine makes them many times slower."""
    key = (digest, _key(policy))
    if key not in _CACHE:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            _CACHE[key] = expected(probe, policy).out[0, 0]
        finally:
            torch.set_num_threads(threads)
    return _CACHE[key]


def _row_errors(observed, probes, digests, policy: Policy) -> list:
    """Per probe, each row's largest error in units of the tolerance (> 1: outside)."""
    return [row_mismatches(obs.out, _expected_out(probe, policy, dg), obs.dtype)
            for obs, probe, dg in zip(observed, probes, digests)]


def distance(observed, probes, digests, policy: Policy) -> tuple[float, tuple]:
    """Fraction of probe rows outside tolerance, and the (probe, row, error) that is farthest."""
    bad, total, worst = 0, 0, ("", -1, 0.0)
    for probe, err in zip(probes, _row_errors(observed, probes, digests, policy)):
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


def _moved(cur: Policy, name: str, value) -> Policy:
    """``cur`` with option ``name`` at ``value``; moving to partition-normalised P also takes the values
    the contract requires with it (:data:`_PARTITION_ONLY`)."""
    extra = _PARTITION_ONLY if (name, value) == ("p_normalize", "partition") else {}
    return cur.replace(**{name: value, **extra})


def _score(observed, probes, digests, policy: Policy) -> tuple[float, float]:
    """(fraction of rows outside tolerance, mean log(1 + row error)): the second orders option sets that
    miss the same number of rows; (inf, inf) for an option set the contract refuses (e.g. exp2 offset
    with partition P)."""
    try:
        err = torch.cat(_row_errors(observed, probes, digests, policy))
    except ValueError:
        return float("inf"), float("inf")
    return float((err > 1).double().mean()), float(torch.log1p(err.clamp(max=1e30)).mean())


def _search(observed, probes, digests, start: Policy) -> Policy:
    """Coordinate search over PARAM_GRID from ``start``: each option in turn takes its best value."""
    cur = start.replace(name="search")
    for _ in range(4):
        moved = False
        for name, grid in PARAM_GRID.items():
            scores = {v: _score(observed, probes, digests, _moved(cur, name, v)) for v in grid}
            if scores[getattr(cur, name)] > min(scores.values()):
                cur = _moved(cur, name, min(scores, key=scores.get))
                moved = True
        if not moved:
            break
    return cur


def _identify(observed, probes, digests, starts) -> dict[str, Param]:
    """The best end point of a coordinate search from each of ``starts`` in turn (stopping at the first
    that matches); each option's matching values."""
    ends = []
    for start in starts:
        ends.append(_search(observed, probes, digests, start))
        if _score(observed, probes, digests, ends[-1])[0] <= ALLOW:
            break
    cur = min(ends, key=lambda p: _score(observed, probes, digests, p))
    params = {}
    for name, grid in PARAM_GRID.items():
        ok = tuple(v for v in grid if _score(observed, probes, digests, _moved(cur, name, v))[0] <= ALLOW)
        params[name] = Param(name, getattr(cur, name), (1.0 / len(ok)) if ok else 0.0, ok)
    return params


def fingerprint(fn, *, candidates=None, probes=None, device="cpu", params: bool = True) -> Fingerprint:
    """Identify the P policy of ``fn(q, k, v, *, sink_logit=None) -> out [B, H, Nq, d]``.

    Args:
        fn: any attention callable (a GPU kernel on CUDA tensors, anything on the CPU); it gets float32 q,
            k, v on ``device`` with B = H = 1 and must use the default score scale 1/sqrt(d).
        candidates: None (every preset of :data:`pcast.policies.POLICIES`), or names, Policies, option
            dicts (Policy fields), or a mapping name -> any of those.
        probes: the probe set (default :func:`~pcast.probes.inputs.default_probes`).
        device: where the probe tensors go. params: also identify the options one by one.

    Returns a :class:`Fingerprint`. Raises ProbeError naming the probe when fn raises or returns the
    wrong shape, dtype or device; ValueError for bad candidates.
    """
    cands = candidate_set(candidates)
    probes = tuple(default_probes() if probes is None else probes)
    digests = [_digest(p) for p in probes]
    observed = [run_box(fn, p, device) for p in probes]
    dist, worst = {}, {}
    for name, pol in cands.items():
        dist[name], worst[name] = distance(observed, probes, digests, pol)
    matches = tuple(sorted(n for n, d in dist.items() if d <= ALLOW))
    policy = None if not matches else matches[0] if len(matches) == 1 else matches
    fp = Fingerprint(policy, dist, worst=worst)
    if params:
        nearest = sorted(dist, key=dist.get)[:SEARCH_STARTS]
        fp.params = _identify(observed, probes, digests, [cands[n] for n in nearest])
    return fp
