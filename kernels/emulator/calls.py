"""The emulator's multi-run engine: several calls on the same q, k and values (``pcast.attention_calls``).

Every call is run by the emulator's own steps (:func:`pcast.emulator.core._rows`, the step markers' home);
what this module adds is the bookkeeping that lets calls and items share work, all of it exact
(docs/interfaces.md, ``pcast.attention_calls``):

* calls whose scores have the same bits (same q/k cast, sm_scale, causal flag, padded length) take
  step 1 once per chunk of rows; calls that differ only in S share steps 1-2 (one emulator call with
  several scales);
* an item of a Δ stack whose queries equal an earlier anchor's and whose keys differ only in leading
  positions recomputes only a SCORE_SLICE-wide block of leading scores (:class:`_Shared`), where
  :func:`_probe_slice` shows the sliced matmul gives the full one's bits on this machine;
* an item whose scores and values equal its anchor's bit for bit repeats the anchor's steps 1-5 in
  every call whose sink does not seed the max, so it reuses them (:func:`_clone_rows`);
* in reverse order, the blocks an item visits before its leading (sink) block are its anchor's: they are
  computed once per chunk of rows (:mod:`pcast.emulator.reverse`).
"""

from __future__ import annotations

import torch

from pcast.emulator import core as _em
from pcast.emulator import fused as _fused
from pcast.emulator import reverse as _rev
from pcast.emulator.parts import sink_term
from pcast.reference import bits_of

__all__ = ["emulate_calls", "SCORE_SLICE", "SHARING"]

#: Keys a Δ stack's item recomputes at a time when it shares the rest of its scores (docs/interfaces.md):
#: narrow matmuls may take another BLAS path than a wide one, so a slice is never narrower.
SCORE_SLICE = 64
#: The most bytes of shared scores :func:`emulate_calls` may keep, counted as whole score matrices of the
#: items whose scores later items share (an upper bound: chunks of rows are the outer loop, so one chunk of
#: each is kept at a time); items beyond it compute their scores in full.
_SHARED_BYTES = 256 * 2**20
#: What :func:`emulate_calls` shared since the process started (tests and benchmarks read it):
#: ``full`` / ``sliced`` / ``copied``: chunks of rows whose scores were one full matmul, a matmul of the
#: leading keys over shared ones, a copy of shared ones; ``reused``: chunks a further call took as they were;
#: ``cloned``: chunks of a call whose steps 1-5 were an earlier item's (:func:`_clone_rows`); ``reverse``: chunks
#: of a reverse-order call whose blocks past the leading ones were the anchor's (:mod:`pcast.emulator.reverse`).
SHARING = {"full": 0, "sliced": 0, "copied": 0, "reused": 0, "cloned": 0, "reverse": 0}


def _clone_rows(c: _em._Call, g: int, a: int, r0: int, r1: int, outs: tuple, diags: tuple, kept: list) -> None:
    """Rows r0:r1 of item g whose scores and values have the bits of item a's and whose sink logit, if
    any, joins only the final row sum (no ``sink_init``): steps 1-5 are a's, so a's accumulators, row
    sum and final max (``kept``, from :func:`_rows`) are reused and only the normalisation is g's own,
    with the operations :func:`_rows` applies there."""
    for sc, outs_i, diag, (accs, l, m_final) in zip(c.scales, outs, diags, kept):
        for name, t in diag.items():
            t[g, r0:r1] = t[a, r0:r1]
        if c.sink is not None:
            l = l + sink_term(c, c.sink[g], m_final)
        for out, acc in zip(outs_i, accs):
            out[g, r0:r1] = acc / l[:, None] if c.exp2 else acc / (l * sc.scale)[:, None]
        diag["lse"][g, r0:r1] = _em.row_lse(c, m_final, l)


def _probe_slice(rows: int, d: int, np_: int, cols: int, device) -> bool:
    """Whether, on this machine and at these shapes, a matmul of q rows against the first ``cols`` keys
    gives the bits of the same columns of the full matmul, and the other columns do not depend on the
    first ``cols`` keys (:class:`_Shared`). Keys are laid out as :func:`_layout` lays them out."""
    key = (rows, d, np_, cols, str(device), torch.get_num_threads())
    if key not in _PROBES:
        gen = torch.Generator().manual_seed(0)
        a = torch.randn(rows, d, generator=gen).to(device)
        k1 = torch.randn(np_, d, generator=gen).to(device)
        k2 = k1.clone()
        k2[:cols] = torch.randn(cols, d, generator=gen).to(device)
        full1, full2 = torch.matmul(a, k1.t()), torch.matmul(a, k2.t())
        _PROBES[key] = (torch.equal(full1[:, cols:], full2[:, cols:])
                        and torch.equal(full2[:, :cols], torch.matmul(a, k2.t()[:, :cols])))
    return _PROBES[key]


_PROBES: dict = {}


class _Shared:
    """Step 1 for every call of a score group (same qs, kT, visibility: :func:`emulate_calls`), with the
    items of a Δ stack sharing their non-sink scores.

    An item ``g`` is the twin of an earlier anchor ``a`` when its scaled queries have the bits of a's
    and its keys differ from a's only in the first ``cols[g]`` positions (a multiple of SCORE_SLICE,
    less than the padded length). A twin's scores are the anchor's with the first ``cols`` columns
    recomputed by one matmul, which gives the same bits as its own full matmul where
    :func:`_probe_slice` says so at the chunk's shapes; elsewhere the full matmul runs."""

    def __init__(self, c: _em._Call, rows: int):
        G, Nq, d = c.qs.shape
        np_ = c.kT.shape[-1]
        self.c, self.rows = c, rows
        self.twin, self.cols = [None] * G, [np_] * G
        anchors: list[int] = []
        for g in range(G):
            for a in anchors:
                if not torch.equal(bits_of(c.qs[g]), bits_of(c.qs[a])):
                    continue
                diff = (bits_of(c.kT[g]) != bits_of(c.kT[a])).any(0).nonzero()
                cols = 0 if diff.numel() == 0 else -(-(int(diff[-1]) + 1) // SCORE_SLICE) * SCORE_SLICE
                if cols < np_ and all(_probe_slice(r1 - r0, d, np_, cols, c.qs.device)
                                      for r0, r1 in self._chunks(Nq) if cols):
                    self.twin[g], self.cols[g] = a, cols
                    break
            else:
                anchors.append(g)
        keep = sorted({a for a in self.twin if a is not None})
        per = Nq * np_ * 4
        for a in keep[max(0, _SHARED_BYTES // per):]:  # beyond the memory bound: compute those in full
            self.twin = [None if t == a else t for t in self.twin]
        self.last_use = {a: max(g for g, t in enumerate(self.twin) if t == a) for a in set(self.twin) - {None}}
        self.kept: dict[int, dict] = {}
        self.work: dict[tuple, list] = {}  # (anchor, r0) -> [the twins' shared scores, columns last written]

    def _chunks(self, nq: int):
        return [(r0, min(nq, r0 + self.rows)) for r0 in range(0, nq, self.rows)]

    def copies(self, g: int) -> int | None:
        """The anchor whose scores item g has bit for bit (its keys and queries equal), else None."""
        return self.twin[g] if self.twin[g] is not None and self.cols[g] == 0 else None

    def skip(self, g: int, r0: int) -> None:
        """Rows from r0 (one chunk) of item g need no scores (every call reuses its anchor's results)."""
        a = self.twin[g]
        if a is not None and g == self.last_use[a]:
            self._drop(a, r0)

    def _drop(self, a: int, r0: int) -> None:
        """The anchor's kept chunk at r0 after its last twin took it (chunks of rows are the outer loop)."""
        self.kept.get(a, {}).pop(r0, None)
        self.work.pop((a, r0), None)

    def scores(self, g: int, r0: int, r1: int) -> torch.Tensor:
        """Step 1's scores of rows r0:r1 of item g, which the caller reads only: an anchor's are kept as they are
        for its twins, and the twins of one anchor share one tensor, the anchor's scores with the first columns
        of the twin at hand (those of the previous twin past them restored from the anchor's)."""
        a = self.twin[g]
        if a is None:
            s = _em._scores(self.c, g, r0, r1)
            SHARING["full"] += 1
            if g in self.last_use:
                self.kept.setdefault(g, {})[r0] = s
            return s
        anchor = self.kept[a][r0]
        if (a, r0) not in self.work:
            self.work[a, r0] = [anchor.clone(), 0]
        s, dirty = self.work[a, r0]  # dirty: the columns the previous twin wrote
        cols = self.cols[g]
        if dirty > cols:
            s[:, cols:dirty] = anchor[:, cols:dirty]
        if cols:
            s[:, :cols] = _em._scores(self.c, g, r0, r1, cols)
            SHARING["sliced"] += 1
        else:
            SHARING["copied"] += 1
        self.work[a, r0][1] = cols
        if g == self.last_use[a]:
            self._drop(a, r0)
        return s


def _unit_key(kw: dict):
    """Calls with equal keys (less ``scale``) share steps 1-2 when their scale mode is multiply."""
    return tuple(sorted((n, id(x) if isinstance(x, torch.Tensor) else x) for n, x in kw.items()))


def _units(calls) -> dict:
    """Calls that differ only in S (multiply mode) as one emulator call with several scales:
    key -> [keywords less scale, [scales], {call index: scale index}]."""
    units: dict = {}
    for i, kw in enumerate(calls):
        kw = dict(kw)
        sc = float(kw.pop("scale"))
        key = _unit_key(kw) if kw.get("scale_mode", "multiply") == "multiply" else ("call", i)
        u = units.setdefault(key, [kw, [], {}])
        if sc not in u[1]:
            u[1].append(sc)
        u[2][i] = u[1].index(sc)
    return units


def _groups(q, k, v: tuple, calls) -> dict:
    """The calls laid out (:func:`pcast.emulator.core._layout`, sharing operand casts) with their outputs,
    grouped by what their scores depend on: score key -> [(layout, outs, diags, {call: scale}), ...]."""
    B, H, Nq, d = q.shape
    G = B * H
    groups: dict = {}
    memo: dict = {}  # operand casts and layouts shared between the calls (_layout)
    for kw, scales, which in _units(calls).values():
        c = _em._layout(q, k, v, scales=tuple(scales), memo=memo, **kw)
        outs, diags = _em._buffers(c, G, Nq, d, q.device)
        fmt = kw.get("qk_fmt")
        key = (None if fmt is None else fmt.name, kw.get("qk_scale") if fmt is not None else None, c.sm_scale,
               bool(kw["causal"]), kw.get("causal_offset", 0), c.nblk * c.block_n)
        groups.setdefault(key, []).append((c, outs, diags, which))
    return groups


def emulate_calls(q, k, v: tuple, calls) -> list:
    """:func:`pcast.emulator.core.emulate_attention` of the value tensors ``v`` (a tuple) under each keyword
    dict of ``calls`` (its keywords), sharing what their results do not depend on (docs/interfaces.md,
    ``pcast.attention_calls``). Returns one ``(outs, diag)`` per call, as ``emulate_attention`` with a
    tuple ``v`` returns, bit for bit."""
    B, H, Nq, d = q.shape
    G = B * H
    results: list = [None] * len(calls)
    for members in _groups(q, k, v, calls).values():
        _run_group(members, G, Nq)
        for c, outs, diags, which in members:
            taken: set = set()
            for i, j in which.items():  # two equal calls share one scale: each result gets its own tensors
                own = (lambda t: t.clone()) if j in taken else (lambda t: t)
                taken.add(j)
                results[i] = (tuple(own(out).view(B, H, Nq, d) for out in outs[j]),
                              {n: own(t).view(B, H, Nq) for n, t in diags[j].items()})
    return results


def _reverse_leads(members: list, shared: _Shared, clones: list) -> list[dict]:
    """Per call: item -> (anchor, leading columns) for the items, anchors included, that take their anchor's
    blocks past the leading ones (:mod:`pcast.emulator.reverse`); empty for a call that is not eligible or that
    the compiled P path runs."""
    leads = []
    for m, (c, *_) in enumerate(members):
        lead: dict = {}
        # (through the compiled P path an item's own pass is faster than the eager shared one)
        for a in shared.last_use if _rev.eligible(c) and not _fused.covers(c, c.qs) else ():
            items = [g for g, t in enumerate(shared.twin) if t == a and clones[m][g] is None]
            c0 = _rev.lead_columns(c.block_n, c.nblk, c.ks, [shared.cols[g] for g in items]) if items else None
            if c0 is not None:
                lead.update((g, (a, c0)) for g in [a, *items])
        leads.append(lead)
    return leads


def _run_group(members: list, G: int, Nq: int) -> None:
    """Every chunk of rows of every item of one score group, under each of its calls. Chunks of rows are the
    outer loop, so what items share with their anchor is kept for one chunk at a time."""
    c0 = members[0][0]
    rows = max(1, min(_fused.chunk_elems(c, _em.CHUNK_ELEMS) for c, *_ in members) // (c0.nblk * c0.block_n))
    shared = _Shared(c0, rows)
    # An item whose scores and values copy its anchor's bits repeats the anchor's steps 1-5 in every
    # call without a sink that seeds the max (a stack of learned sink logits on one base): reuse them.
    copies = list(map(shared.copies, range(G)))
    same_v: dict = {}  # id of a call's value tensors (shared through _layout's memo) -> items equal to their anchor's
    for c, *_ in members:
        if id(c.vf) not in same_v:
            same_v[id(c.vf)] = [a is not None and all(torch.equal(bits_of(vf[g]), bits_of(vf[a])) for vf in c.vf)
                                for g, a in enumerate(copies)]
    clones = [[a if same and not c.sink_init else None for a, same in zip(copies, same_v[id(c.vf)])]
              for c, *_ in members]
    leads = _reverse_leads(members, shared, clones)
    anchors = [{a for a in cl if a is not None} for cl in clones]
    kept: list[dict] = [{} for _ in members]  # per call: (anchor, r0) -> per scale (accs, l, m_final)
    for r0 in range(0, Nq, rows):
        r1 = min(Nq, r0 + rows)
        states: dict = {}  # (call, anchor) -> this chunk's blocks past the leading ones (emulator_reverse)
        for g in range(G):
            for m, (c, outs, diags, _) in enumerate(members):
                a = clones[m][g]
                if a is not None:
                    SHARING["cloned"] += 1
                    _clone_rows(c, g, a, r0, r1, outs, diags, kept[m][(a, r0)])
            need = [m for m in range(len(members)) if clones[m][g] is None]
            if not need:
                shared.skip(g, r0)
                continue
            s = shared.scores(g, r0, r1)
            for m in need:  # (every call reads the scores only)
                c, outs, diags, _ = members[m]
                SHARING["reused"] += m != need[0]
                keep = kept[m].setdefault((g, r0), []) if g in anchors[m] else None
                if g in leads[m]:
                    a, lead = leads[m][g]
                    if g == a:
                        states[m, a] = _rev.anchor_state(c, s, lead, a, r0, r1)
                    SHARING["reverse"] += 1
                    _rev.item_rows(c, g, r0, r1, s, states[m, a], outs, diags, keep)
                else:
                    _em._rows(c, g, r0, r1, outs, diags, s, keep)  # (s is read only)
