"""pcast.reference.reference_stack: the float64 reference of a Δ stack, reusing partial sums.

The sweeps and the policies experiment measure every error against it, so it must be the same
softmax as :func:`pcast.reference.reference_attention` of each item alone. The oracle here is
exactly that: every (batch, head) item computed on its own, with nothing shared.

Tolerance. Both are float64 softmax-weighted sums of N <= 300 value vectors, in two orders of
operations (one pass over all keys; or partial sums over the shared keys under their own max,
rescaled by exp(m_t - m) and added to the leading keys' terms). Each sum of N terms carries at most
about N·ε·Σ_j p_j|v_j| of rounding (ε = 2^-53 ≈ 1.1e-16), and Σ_j p_j|v_j| <= max|v|, while an output
of random values is about max|v|/√N_eff; the bound relative to max|ref| is therefore of the order
N^1.5·ε ≈ 6e-13 at N = 300. ``REL_TOL = 1e-12`` sits above that bound. Measured on this machine
(x86-64, one torch thread): the largest max|stack - ref| / max|ref| over every item of this file is
1.4e-14 (sink keys; Δ up to 30), 2.5e-15 with a learned sink logit: 70x below REL_TOL.
"""

import pytest
import torch

import pcast.reference as reference
from pcast.pipeline.runs import value_stack
from pcast.reference import expand_kv, reference_attention, reference_stack
from pcast.models.sinks import learned_sink, make_base


CPU = torch.device("cpu")
REL_TOL = 1e-12
DELTAS = [0.0, 2.0, 5.0, 10.0, 20.0, 30.0]


def per_item(q, k, v, *, causal, sm_scale=None, sink_logit=None):
    """reference_attention of every (batch, head) item on its own: [B, H, Nq, d] float64."""
    B, H = q.shape[:2]
    kx, vx = expand_kv(k, H), expand_kv(v, H)
    sig = None if sink_logit is None else sink_logit.expand(B, H)
    out = torch.empty(*q.shape[:3], v.shape[-1], dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            s = None if sig is None else sig[b:b + 1, h:h + 1]
            out[b, h] = reference_attention(q[b:b + 1, h:h + 1], kx[b:b + 1, h:h + 1], vx[b:b + 1, h:h + 1],
                                            causal=causal, sm_scale=sm_scale, sink_logit=s)[0, 0]
    return out


def worst_rel(got, want):
    """The largest max|got - want| / max|want| over the (batch, head) items."""
    err = (got - want).abs().amax(dim=(-2, -1))
    scale = want.abs().amax(dim=(-2, -1))
    assert bool((scale > 0).all())
    return float((err / scale).max())


def check_stack(q, k, values, *, causal, sm_scale=None, sink_logit=None):
    refs = reference_stack(q, k, values, causal=causal, sm_scale=sm_scale, sink_logit=sink_logit)
    assert isinstance(refs, list) and len(refs) == len(values)
    worst = 0.0
    for v, r in zip(values, refs):
        assert r.dtype == torch.float64 and r.shape == (*q.shape[:3], v.shape[-1])
        want = per_item(q, k, v, causal=causal, sm_scale=sm_scale, sink_logit=sink_logit)
        worst = max(worst, worst_rel(r, want))
    assert worst < REL_TOL, worst
    return refs


@pytest.fixture
def full_calls(monkeypatch):
    """Counts reference_stack's calls of reference_attention (one per item computed in full and value
    tensor); the test's own oracle calls go through the name imported above, not counted."""
    count = {"n": 0}
    real = reference.reference_attention

    def counting(*a, **kw):
        count["n"] += 1
        return real(*a, **kw)

    monkeypatch.setattr(reference, "reference_attention", counting)
    return count


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("ksink", [1, 4, 16])
def test_keys_kind(ksink, causal, full_calls):
    """Sink keys at Δ 0..30 and sink_v_scale 0, 0.5, 1, 2; N = 300; batch 2 and 3 heads per Δ: every
    item within REL_TOL of its own reference_attention, and only the anchors computed in full."""
    batch, heads = 2, 3
    q, k, values = value_stack(make_base(ksink, batch=batch, heads=heads, n=300, d=32), ksink, DELTAS,
                               [0.0, 0.5, 1.0, 2.0], CPU)
    check_stack(q, k, values, causal=causal)
    # the first Δ's batch·heads items are the anchors; every other item reused their partial sums
    assert full_calls["n"] == batch * heads * len(values)


@pytest.mark.parametrize("causal", [False, True])
def test_learned_sink_logit_kind(causal, full_calls):
    """No sink key (ksink 0), one v (sink_v_scale 0), a learned sink logit per item at Δ 0..30 (as
    kernels/pipeline/policy_runs.py stacks them): the items differ only in their sink logit."""
    batch, heads = 2, 2
    q, k, values = value_stack(make_base(21, batch=batch, heads=heads, n=300, d=32), 0, DELTAS, [0.0], CPU)
    sink = torch.cat([learned_sink(dl, batch=batch, heads=heads) for dl in DELTAS])
    check_stack(q, k, values, causal=causal, sink_logit=sink)
    assert full_calls["n"] == batch * heads * len(values)


def test_logit_per_head_and_sm_scale():
    """A sink logit given per head [H] (broadcast over the batch) and an explicit sm_scale."""
    q, k, values = value_stack(make_base(22, heads=2, n=200, d=16), 0, [0.0, 3.0, 9.0], [0.0], CPU)
    check_stack(q, k, values, causal=False, sm_scale=0.3, sink_logit=torch.tensor([1.5, 7.0]))
    q, k, values = value_stack(make_base(22, heads=2, n=200, d=16), 4, [0.0, 3.0, 9.0], [1.0, 0.0], CPU)
    check_stack(q, k, values, causal=True, sm_scale=0.3)


def test_repeated_items():
    """Items equal to their anchor (Δ repeated): nothing differs, and the leading key is still taken
    from the item itself."""
    q, k, values = value_stack(make_base(23, n=250, d=32), 4, [8.0, 8.0, 0.0, 8.0], [1.0, 0.0], CPU)
    check_stack(q, k, values, causal=False)
    check_stack(q, k, values, causal=True)


@pytest.mark.parametrize("causal", [False, True])
def test_gqa_and_nq_not_nk(causal):
    """H = 4 query heads on H_kv = 2 key/value heads; fewer queries than keys."""
    q, k, values = value_stack(make_base(24, batch=2, heads=4, n=200, d=32), 4, [0.0, 10.0, 25.0], [1.0, 0.0], CPU)
    q = q[:, :, :150].contiguous()
    k = k[:, :2].contiguous()
    values = [v[:, :2].contiguous() for v in values]
    check_stack(q, k, values, causal=causal)


@pytest.mark.parametrize("causal", [False, True])
def test_unrelated_items_fall_back_exactly(causal, full_calls):
    """Items from different seeds share nothing: every item is computed in full, so the stack equals
    each item's own reference_attention bit for bit."""
    parts = [value_stack(make_base(s, heads=2, n=300, d=32), 4, [12.0], [1.0, 0.0], CPU) for s in (30, 31, 32)]
    q = torch.cat([p[0] for p in parts])
    k = torch.cat([p[1] for p in parts])
    values = [torch.cat([p[2][j] for p in parts]) for j in range(2)]
    refs = reference_stack(q, k, values, causal=causal)
    for v, r in zip(values, refs):
        assert torch.equal(r, per_item(q, k, v, causal=causal))
    assert full_calls["n"] == 3 * 2 * len(values)


def test_same_q_and_keys_but_other_values_fall_back(full_calls):
    """q and k equal to an earlier item's but the values differ in the LAST key: nothing can be reused
    (the shared keys' partial sums carry the values), so the item is computed in full, exactly."""
    q, k, values = value_stack(make_base(33, n=200, d=16), 4, [6.0, 6.0], [1.0], CPU)
    v = values[0].clone()
    v[1, :, -1] += 1.0
    refs = reference_stack(q, k, [v], causal=False)
    assert torch.equal(refs[0], per_item(q, k, v, causal=False))
    assert full_calls["n"] == 2


def test_mixed_stack(full_calls):
    """A Δ stack with an unrelated item between its items: the unrelated one exact, the others within
    REL_TOL, and two items in full (the Δ stack's anchor and the stranger)."""
    q, k, values = value_stack(make_base(34, n=300, d=32), 4, [0.0, 10.0, 30.0], [0.5], CPU)
    q2, k2, values2 = value_stack(make_base(35, n=300, d=32), 4, [10.0], [0.5], CPU)
    order = [0, 3, 1, 2]
    q, k = torch.cat([q, q2])[order], torch.cat([k, k2])[order]
    values = [torch.cat([values[0], values2[0]])[order]]
    refs = check_stack(q, k, values, causal=True)
    assert torch.equal(refs[0][1], per_item(q[1:2], k[1:2], values[0][1:2], causal=True)[0])
    assert full_calls["n"] == 2
