"""Kernels with dynamic P scales, written here from their definitions (float64 loops, not the package's
code), are fingerprinted to their mode and never named a static scale (docs/interfaces.md, "Dynamic P
scales"; docs/probes.md)."""

import math

import pytest
import torch

from pcast.probes import assert_policy, fingerprint, small_probes

E4M3_MAX = 448.0


def _e4m3(x: torch.Tensor) -> torch.Tensor:
    """float64 -> the nearest E4M3FN value (torch's cast of float32, saturating at 448), back to float64."""
    return x.float().clamp(max=E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float64)


def dynamic_kernel(mode: str, *, block_m: int = 64, block_n: int = 64, reverse: bool = False, pad_ones=False):
    """A FlashAttention-style kernel in float64: per KV block p = exp(s − m) against the running max, P scaled
    by 448 / max(p) over the block's row (``"row"``) or over the tile's ``block_m`` rows (``"tile"``; with
    ``pad_ones`` rows past Nq count as q = 0 rows, p = 1), cast to E4M3, P·V divided back; the row sum adds the
    unrounded p."""

    def fn(q, k, v, sink_logit=None):
        assert sink_logit is None
        q, k, v = (t.to(torch.float64) for t in (q, k, v))
        B, H, Nq, d = q.shape
        k, v = (t.repeat_interleave(H // t.shape[1], 1) for t in (k, v))
        Nk = k.shape[2]
        s_all = q @ k.transpose(-1, -2) / math.sqrt(d)
        m = torch.full((B, H, Nq), -math.inf, dtype=torch.float64)
        l = torch.zeros(B, H, Nq, dtype=torch.float64)
        acc = torch.zeros(B, H, Nq, d, dtype=torch.float64)
        blocks = list(range(0, Nk, block_n))
        for j0 in (blocks[::-1] if reverse else blocks):
            s = s_all[..., j0:j0 + block_n]
            m_new = torch.maximum(m, s.amax(-1))
            p = torch.exp(s - m_new[..., None])
            r = p.amax(-1)  # [B, H, Nq]
            if mode == "tile":
                for i in range(0, Nq, block_m):
                    t = r[..., i:i + block_m].amax(-1, keepdim=True)
                    if pad_ones and i + block_m > Nq:
                        t = torch.maximum(t, torch.ones_like(t))
                    r[..., i:i + block_m] = t
            scale = torch.where(r > 0, E4M3_MAX / r, torch.ones_like(r))
            pq = _e4m3(p * scale[..., None])
            alpha = torch.exp(m - m_new)
            l = l * alpha + p.sum(-1)
            acc = acc * alpha[..., None] + (pq @ v[..., j0:j0 + block_n, :]) / scale[..., None]
            m = m_new
        return (acc / l[..., None]).to(q.dtype if False else torch.float32)

    return fn


def _dtype_fn(fn, dtype):
    return lambda q, k, v, sink_logit=None: fn(q, k, v, sink_logit).to(dtype)


def _static(fp) -> bool:
    """Whether the fingerprint names a static scale: a preset, or scale_mode multiply / exp2_offset at confidence."""
    p = fp.params.get("scale_mode")
    return fp.policy is not None or (p is not None and p.value in ("multiply", "exp2_offset") and p.confidence > 0)


@pytest.mark.parametrize("small", [True, False])
def test_tile_max_64_is_fingerprinted_to_its_mode(small):
    fn = dynamic_kernel("tile", block_m=64)
    fp = fingerprint(fn, small=small, d=64)
    assert not _static(fp), str(fp)
    assert fp.params["scale_mode"].value in ("tile_max", "tile_max_padded"), str(fp)
    assert fp.params["scale_mode"].confidence >= 0.5, str(fp)
    # a 64-row probe fills tiles of 16, 32 and 64 rows; a 128-row tile holding 64 rows is the same tile
    assert 64 in fp.params["block_m"].consistent and not {16, 32} & set(fp.params["block_m"].consistent), str(fp)


def test_row_block_max_reverse_bf16_d64_is_fingerprinted_to_its_mode():
    fn = _dtype_fn(dynamic_kernel("row", reverse=True), torch.bfloat16)
    fp = fingerprint(fn, small=True, d=64, dtype=torch.bfloat16)
    assert not _static(fp), str(fp)
    assert fp.params["scale_mode"].value == "per_row" and fp.params["scale_mode"].confidence == 1.0, str(fp)
    assert fp.params["order"].value == "reverse", str(fp)


def test_padded_tile_kernel_is_not_a_static_scale_on_the_small_set():
    """Padded rows pin a short call's tile max at 1 (a static 448 on every probe below 64 rows); the small set's
    tile probe fills the tile, so neither assert_policy nor the fingerprint names S = 448."""
    fn = dynamic_kernel("tile", block_m=64, pad_ones=True)
    assert any(p.shape[0] >= 64 for p in small_probes())
    with pytest.raises(AssertionError):
        assert_policy(fn, {"name": "s448", "scale": 448.0}, small=True, d=64, diagnose=False, sinks=False)
    assert_policy(fn, {"name": "tile", "scale_mode": "tile_max_padded", "block_m": 64}, small=True, d=64, sinks=False)
    fp = fingerprint(fn, small=True, d=64, candidates=[{"name": "s448", "scale": 448.0}], params=False)
    assert fp.policy is None, str(fp)


def test_a_layout_below_64_dimensions_leaves_the_tile_probe_out():
    from pcast.probes.inputs import Shape, fitting

    assert all(p.shape[0] <= 32 for p in fitting(small_probes(), Shape(d=32)))
    assert len(fitting(small_probes(), Shape(d=64))) == len(small_probes())
    fp = fingerprint(dynamic_kernel("row"), small=True, d=32, params=False)  # runs: no probe exceeds d
    assert fp.policy is None
