"""pcast-audit's runs: the audit rows of each run (your policy, the four combinations, named
policies) and, per (batch, head), the head rows; per-head ksink (``--ksink auto``, from
:func:`pcast.models.heads.detect_sinks`), mass underflow (:func:`pcast.models.heads.underflow_mask`) and the
worst head.

Used by :mod:`pcast.audit.session` (:mod:`pcast.audit` re-exports the public names).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from pcast.api import attention
from pcast.api_multi import attention_calls
from pcast.audit.measure import MEASURE_COLUMNS, head_measures, head_scores64, run_measures
from pcast.contract import COMBOS, DIAGNOSTICS, causal_offset, combo_label
from pcast.models.heads import detect_sinks
from pcast.policies import Policy
from pcast.reference import reference_attention

COLUMNS = ("policy", "order", "scale", "fmt", "block_n", "rowsum", "backend", "mse", "rel_mse", "underflow_frac",
           "underflow", "terms", "underflow_sink", "saturated",
           # named-policy options and the V-cast floor (today's rows carry the defaults)
           "scale_mode", "rescale_threshold", "sink_mode", "qk_fmt", "v_fmt", "block_m", "terms_sink",
           "underflow_sink_frac", "saturated_frac", "floor_mse", "floor_rel_mse",
           # decode-time options (docs/decode.md; the single pass: 1, contiguous, online)
           "num_splits", "split_layout", "p_normalize",
           # the tensor core's P·V arithmetic (pcast.attention's call options; float32 and 0 except in your
           # policy's run and the kernel's prediction with --pv-arith)
           "pv_arith", "pv_promote",
           # the layer of a several-layer file (layer{L}/q, k, v); empty for plain q, k, v
           "layer")
# --per-head: one row per (layer, batch, head, run); sinks: the head's detected sink keys ("0;511", empty when
# not detected), ksink: the ksink the head ran with, mass_underflow: exact P mass of the keys that round to zero
# delta, sigma: the head's measured sink strength and spread (pcast.models.heads.head_scores_stats),
# delta_c: the run's half-underflow crossing for that Δ, in logits (pcast.audit.measure.delta_c; None where it does
# not collapse from sink keys), distance_to_delta_c: delta_c - delta in logits (negative: past it)
PER_HEAD_COLUMNS = COLUMNS + ("batch", "head", "ksink", "sinks", "mass_underflow", "mass_lost_share", "delta", "sigma",
                              "delta_c", "distance_to_delta_c")
WORST_HEAD_COMBOS = (("forward", 1.0), ("reverse", 256.0))  # the worst-head line: MSE ratio of these two


def _stats(r, ref, ref_power) -> dict:
    """MSE and diagnostic counts of one result ``r`` against the float64 reference."""
    mse = float(((r.out.double() - ref) ** 2).mean())
    terms, terms_sink = int(r.terms.sum()), int(r.terms_sink.sum())
    uf, uf_sink, sat = int(r.underflow.sum()), int(r.underflow_sink.sum()), int(r.saturated.sum())
    return {"backend": r.backend, "mse": mse, "rel_mse": mse / ref_power if ref_power > 0 else float("nan"),
            "underflow_frac": uf / terms if terms else 0.0, "underflow": uf, "terms": terms,
            "underflow_sink": uf_sink, "terms_sink": terms_sink,
            "underflow_sink_frac": uf_sink / terms_sink if terms_sink else 0.0, "saturated": sat,
            "saturated_frac": sat / (terms + terms_sink) if terms + terms_sink else 0.0}


def leading_ksink(sinks) -> int:
    """The kernel's ksink for a head with these sink keys: the leading consecutive run from key 0
    ({0, 1, 2, 7} -> 3; {5} -> 0)."""
    got = set(sinks)
    n = 0
    while n in got:
        n += 1
    return n


def detect_head_sinks(q, k, *, sm_scale: float | None, causal: bool, causal_align: str | None = None) -> dict:
    """``{(b, h): [sink keys]}`` from :func:`pcast.models.heads.detect_sinks` on each head's float64 scores."""
    offset = causal_offset(causal_align, q.shape[-2], k.shape[-2]) if causal else 0
    return {(b, h): detect_sinks(head_scores64(q, k, b, h, sm_scale=sm_scale, causal=causal, offset=offset))
            for b in range(q.shape[0]) for h in range(q.shape[1])}


def _key(kw: dict) -> tuple:
    return tuple(sorted((n, repr(x)) for n, x in kw.items()))


def _attend(q, k, v, *, calls, common, head_ksink):
    """``pcast.attention(q, k, v, **common, **call)`` for each call of ``calls``, through the multi-call
    engine (:func:`pcast.attention_calls`: the emulator shares the scores, and steps 1-2 between calls
    that differ only in S); identical calls run once. With ``head_ksink`` ({(b, h): ksink}) the heads run
    grouped by their ksink, each group as one set of calls on the group's heads ([1, n, N, d], key/value head
    ``h // (H / H_kv)`` each), and the results are put back in place: every head computes on its own in
    each backend, so this is what per-head calls give."""
    unique = list({_key(c): c for c in calls}.values())
    where = {_key(c): i for i, c in enumerate(unique)}
    if head_ksink is None:
        got = [r[0] for r in attention_calls(q, k, [v], unique, **common)]
        return [got[where[_key(c)]] for c in calls]
    B, H = q.shape[:2]
    group = H // k.shape[1]
    outs = [None] * len(unique)
    for ks in sorted(set(head_ksink.values())):
        sel = [bh for bh in sorted(head_ksink) if head_ksink[bh] == ks]
        c = {**common, "ksink": ks}
        if c.get("sink_logit") is not None:
            c["sink_logit"] = torch.stack([c["sink_logit"][b, h] for b, h in sel])[None].contiguous()
        qs = torch.stack([q[b, h] for b, h in sel])[None]
        ks_, vs = (torch.stack([t[b, h // group] for b, h in sel])[None] for t in (k, v))  # GQA: head h // group
        got = attention_calls(qs, ks_, [vs], unique, **c)
        for i, (r,) in enumerate(got):
            if outs[i] is None:
                outs[i] = SimpleNamespace(
                    out=torch.empty((B, H, *r.out.shape[2:]), dtype=r.out.dtype, device=r.out.device),
                    backend=r.backend, **{n: torch.zeros((B, H, r.out.shape[2]), dtype=torch.int64,
                                                         device=r.out.device) for n in DIAGNOSTICS})
            ib = torch.tensor([b for b, _ in sel], device=r.out.device)
            ih = torch.tensor([h for _, h in sel], device=r.out.device)
            outs[i].out[ib, ih] = r.out[0]
            for n in DIAGNOSTICS:
                getattr(outs[i], n)[ib, ih] = getattr(r, n)[0].to(torch.int64)
    return [outs[where[_key(c)]] for c in calls]


def _head(r, b: int, h: int):
    """Head (b, h) of a result, for :func:`_stats`."""
    return SimpleNamespace(out=r.out[b, h], backend=r.backend, **{n: getattr(r, n)[b, h] for n in DIAGNOSTICS})


def _config(name, full) -> dict:
    decode = {f: full.get(f, getattr(Policy, f)) for f in ("num_splits", "split_layout", "p_normalize")}
    return {"policy": name, **{c: full[c] for c in ("order", "scale", "block_n", "rowsum", "scale_mode",
                                                  "rescale_threshold", "sink_mode", "block_m")}, **decode,
            "fmt": full["fmt"] if full["fmt"] is not None else "none",
            "qk_fmt": full["qk_fmt"] or "none", "v_fmt": full["v_fmt"] or "none",
            "pv_arith": full.get("pv_arith", "fp32"), "pv_promote": full.get("pv_promote", 0)}


def _floor_call(kw: dict) -> dict:
    """The V-cast floor's keywords: the run's with no P cast, its P·V in float32 (a tensor core's needs FP8 P)."""
    return {**{n: x for n, x in kw.items() if n not in ("pv_arith", "pv_promote")}, "fmt": None}


def _floor(row, floor, ref, ref_power) -> None:
    row["floor_mse"] = row["floor_rel_mse"] = None
    if floor is not None:
        row["floor_mse"] = float(((floor.out.double() - ref) ** 2).mean())
        row["floor_rel_mse"] = row["floor_mse"] / ref_power if ref_power > 0 else float("nan")


def plan_runs(mine, policies=(), *, combos=True, pv=None) -> list:
    """``[(name, attention keywords), ...]``: your policy ``mine`` (a Policy, or None to leave it out), the four
    reference combinations at your block_n (``combos``), then each of ``policies``. ``pv``: keywords of the tensor
    core's P·V arithmetic (:attr:`pcast.audit.settings.AuditSettings.pv_options`) for your policy's run alone."""
    runs = [] if mine is None else [("yours", {**mine.attention_kwargs(), **(pv or {})})]
    block_n = 64 if mine is None else mine.block_n
    if combos:
        runs += [(combo_label(o, s), dict(order=o, scale=s, fmt="e4m3fn", block_n=block_n, rowsum="unrounded"))
                 for o, s in COMBOS]
    return runs + [(p.name, p.attention_kwargs()) for p in policies]


def audit_heads(q, k, v, *, runs, causal=False, ksink=1, backend="auto", sink_logit=None, sm_scale=None, layer=None,
                sinks=None, per_head=False, causal_align=None):
    """``(rows, head_rows)``: one row per run of ``runs`` (:func:`~pcast.audit.heads.plan_runs`) and one per (batch, head, run).

    ``ksink``: an int for every head, or ``{(b, h): ksink}`` (``--ksink auto``). ``sinks``: None or
    ``{(b, h): [sink keys]}`` for the ``sinks`` column. ``layer`` goes in every row. Every run (and the V-cast
    floor of each run that casts V) goes through one :func:`pcast.attention_calls`. With ``per_head``
    the head rows get the head's measures (:mod:`pcast.audit.measure`: Δ, σ, Δc, mass_underflow).
    """
    head_ksink = dict(ksink) if isinstance(ksink, dict) else None
    common = dict(causal=causal, backend=backend, sm_scale=sm_scale, causal_align=causal_align)
    offset = causal_offset(causal_align, q.shape[-2], k.shape[-2]) if causal else 0
    if head_ksink is None:
        common["ksink"] = ksink
    if sink_logit is None:
        ref = attention(q, k, v, causal=causal, causal_align=causal_align, sm_scale=sm_scale, backend="reference").out
    else:
        common["sink_logit"] = torch.full(q.shape[:2], float(sink_logit), dtype=torch.float32, device=q.device)
        ref = reference_attention(q, k, v, causal=causal, sm_scale=sm_scale, sink_logit=common["sink_logit"],
                                  causal_offset=offset)
    ref_power = float((ref**2).mean())
    defaults = Policy(name="defaults").attention_kwargs()
    fulls = [{**defaults, **kw} for _, kw in runs]  # every column, defaults where not set
    # the V-cast floor: the same call with fmt=None (and so float32 P·V), when the policy casts V
    floors = [i for i, full in enumerate(fulls) if full["v_fmt"] is not None]
    results = _attend(q, k, v, calls=[kw for _, kw in runs] + [_floor_call(runs[i][1]) for i in floors],
                      common=common, head_ksink=head_ksink)
    floor_of = dict(zip(floors, results[len(runs):]))
    rows, done = [], []
    for i, ((name, _), full, r) in enumerate(zip(runs, fulls, results)):
        row = {**_config(name, full), **_stats(r, ref, ref_power)}
        _floor(row, floor_of.get(i), ref, ref_power)
        row["layer"] = layer
        rows.append(row)
        done.append((name, full, r, floor_of.get(i)))
    head_rows = _head_rows(q, k, ref, done, ksink=ksink, head_ksink=head_ksink, sinks=sinks, layer=layer,
                           per_head=per_head, sink_logit=sink_logit, sm_scale=sm_scale, causal=causal,
                           offset=offset)
    return rows, head_rows


def _head_rows(q, k, ref, done, *, ksink, head_ksink, sinks, layer, per_head, sink_logit, sm_scale, causal,
               offset=0):
    """One row per (batch, head, run) of :func:`audit_heads` from its runs ``done``
    (``[(name, full kwargs, result, floor result or None), ...]``); with ``per_head`` each row also gets
    the head's measures (:func:`pcast.audit.measure.head_measures`)."""
    head_rows = []
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            ref_h = ref[b, h]
            power_h = float((ref_h**2).mean())
            ks = head_ksink[(b, h)] if head_ksink is not None else ksink
            extra = {"layer": layer, "batch": b, "head": h, "ksink": ks,
                     "sinks": ";".join(map(str, sinks[(b, h)])) if sinks is not None else ""}
            hm = None
            if per_head:
                keys = sinks[(b, h)] if sinks is not None else list(range(ks))
                hm = head_measures(q, k, b, h, sm_scale=sm_scale, causal=causal, sinks=keys, offset=offset)
            for name, full, r, floor in done:
                hr = {**_config(name, full), **_stats(_head(r, b, h), ref_h, power_h)}
                _floor(hr, None if floor is None else _head(floor, b, h), ref_h, power_h)
                hr.update(extra, **dict.fromkeys(MEASURE_COLUMNS))
                if hm is not None:
                    hr.update(run_measures(hm, hr, full, ksink=ks, sink_logit=sink_logit,
                                           where=f"pcast-audit: layer {layer}, batch {b}, head {h}, "
                                                 f"run {name!r}"))
                head_rows.append(hr)
    return head_rows


def audit(q, k, v, *, order="reverse", scale=256.0, fmt="e4m3fn", block_n=64, rowsum="unrounded", causal=False,
          ksink=1, backend="auto", policies=(), sink_logit=None, sm_scale=None):
    """Rows (dicts) for your policy, the four reference combinations and each of ``policies``
    (:class:`pcast.policies.Policy` objects); see module docstring.

    ``sink_logit``: None, or one float logit given to every (batch, head), in the reference too.
    ``ksink``: an int, or ``{(b, h): ksink}`` per head (see :func:`audit_heads`).
    """
    mine = Policy("yours", order=order, scale=float(scale), fmt=getattr(fmt, "name", fmt), block_n=block_n,
                  rowsum=rowsum)  # an FP8Format by its name
    return audit_heads(q, k, v, runs=plan_runs(mine, policies), causal=causal, ksink=ksink, backend=backend,
                       sink_logit=sink_logit, sm_scale=sm_scale)[0]


def worst_head(head_rows):
    """The head row pair (forward S=1, reverse S=256) with the largest MSE ratio, as
    ``(layer, batch, head, ratio, mse_forward, mse_reverse)``; None when there is none."""
    fwd_label, rev_label = (combo_label(o, s) for o, s in WORST_HEAD_COMBOS)
    by_head: dict = {}
    for r in head_rows:
        if r["policy"] in (fwd_label, rev_label):
            by_head.setdefault((r["layer"], r["batch"], r["head"]), {}).setdefault(r["policy"], r["mse"])
    best = None
    for key, got in by_head.items():
        if fwd_label not in got or rev_label not in got:
            continue
        x, y = got[fwd_label], got[rev_label]
        ratio = x / y if y > 0 else (math.inf if x > 0 else float("nan"))
        rank = -math.inf if math.isnan(ratio) else ratio
        if best is None or rank > best[0]:
            best = (rank, (*key, ratio, x, y))
    return None if best is None else best[1]

