"""A kernel that ignores a declared P scale S is told from one that applies it, on the probes alone.

The black box is cuDNN-like, in plain PyTorch: 128-key tiles in forward order, the running max and the tile
sum of the unscaled softmax, P multiplied by ``scale_s`` just before a saturating E4M3 cast, ``descale_s`` on
the output. Its engines dropped the pair (an implicit S = 1); their tests could not see it, because with a
reciprocal power-of-two pair and every P in E4M3's normal range both give the same O. The pairs here are no
powers of two (448 = 7·2^6 and 3), where the blind spot lives."""

import math

import pytest
import torch

from pcast.policies import Policy
from pcast.probes import assert_policy, fingerprint

pytestmark = pytest.mark.usefixtures("one_thread")


def cudnn_like(scale_s: float, descale_s: float, tile: int = 128):
    """``fn(q, k, v) -> out``: the convention's forward pass with the pair (scale_s, descale_s); no learned sinks."""
    def fn(q, k, v, *, sink_logit=None):
        if sink_logit is not None:
            raise TypeError("this kernel takes no sink logit")
        q, k, v = q.float(), k.float(), v.float()
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        m = torch.full(s.shape[:-1] + (1,), -math.inf)
        row_sum, acc = torch.zeros_like(m), torch.zeros(q.shape[:-1] + (v.shape[-1],))
        for j in range(0, s.shape[-1], tile):
            m_new = torch.maximum(m, s[..., j:j + tile].amax(-1, keepdim=True))
            alpha, p = torch.exp(m - m_new), torch.exp(s[..., j:j + tile] - m_new)
            p8 = (p * scale_s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).float()
            row_sum, acc, m = row_sum * alpha + p.sum(-1, keepdim=True), acc * alpha + p8 @ v[..., j:j + tile, :], m_new
        return acc * descale_s / row_sum
    return fn


def _declared(scale: float) -> Policy:
    return Policy(f"cudnn-s{scale:g}", order="forward", scale=scale, block_n=128)


def _normal_range_inputs():
    """One row of 256 logits over [-4, 0] (P >= e^-4, above E4M3's smallest normal 2^-6) and random V."""
    g = torch.Generator().manual_seed(1)
    q = torch.zeros(1, 1, 1, 16)
    q[..., 0] = 4.0  # sqrt(16): the score is k[..., 0]
    k = torch.zeros(1, 1, 256, 16)
    k[..., 0] = torch.linspace(-4.0, 0.0, 256)
    return q, k, torch.randn(1, 1, 256, 16, generator=g)


def test_the_blind_spot_a_power_of_two_pair_and_normal_p_give_the_same_o():
    q, k, v = _normal_range_inputs()
    ignores = cudnn_like(1.0, 1.0)(q, k, v)
    assert torch.equal(cudnn_like(2.0, 0.5)(q, k, v), ignores)
    assert torch.equal(cudnn_like(0.25, 4.0)(q, k, v), ignores)
    assert not torch.equal(cudnn_like(448.0, 1 / 448.0)(q, k, v), ignores)
    assert not torch.equal(cudnn_like(3.0, 1 / 3.0)(q, k, v), ignores)


def test_assert_policy_passes_the_kernel_that_applies_s_and_names_s_1_in_the_one_that_ignores_it():
    assert_policy(cudnn_like(448.0, 1 / 448.0), _declared(448.0), sinks=False)
    with pytest.raises(AssertionError) as e:
        assert_policy(cudnn_like(1.0, 1.0), _declared(448.0), sinks=False)
    assert "scale = 1 " in str(e.value) and "declared 448" in str(e.value)


def test_a_scale_off_the_fingerprints_grid_is_told_apart_too():
    assert_policy(cudnn_like(3.0, 1 / 3.0), _declared(3.0), sinks=False, small=True)
    with pytest.raises(AssertionError, match="probe "):
        assert_policy(cudnn_like(1.0, 1.0), _declared(3.0), sinks=False, small=True, diagnose=False)


def test_the_fingerprint_reads_the_scale_each_kernel_applies():
    for scale_s, want in ((448.0, 448.0), (1.0, 1.0)):
        fp = fingerprint(cudnn_like(scale_s, 1 / scale_s), small=True)
        assert not fp.sinks.supported
        got = fp.params["scale"]
        assert (got.value, got.confidence) == (want, 1.0), fp.params
        assert (fp.params["order"].value, fp.params["block_n"].value) == ("forward", 128)
