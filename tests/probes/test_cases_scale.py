"""The scale cases of T9 (pcast.probes.cases_scale) against independent loops: FlashAttention-4's lazy rescale on
the reports' paged-decode fixture in float64, and cuDNN's scale_s convention in plain torch."""

import math

import numpy as np
import pytest
import torch

from pcast.cases import CASES, t9_rows
from pcast.probes.cases_scale import CUDNN_SCALE_S, DECODE_LENGTHS, FA4, saturating_lengths, scale_s_differences

pytestmark = pytest.mark.usefixtures("one_thread")

LOG2E = math.log2(math.e)


def _decode_scores() -> np.ndarray:
    """The fixture as the case states it, drawn again: six query heads and 1,023 keys of head_dim 128, N(0, 1)
    from seed 0 (q first), rounded to E4M3 by torch's own cast; scores in float64."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(6, 128, generator=g).to(torch.float8_e4m3fn).double()
    k = torch.randn(1023, 128, generator=g).to(torch.float8_e4m3fn).double()
    return ((q @ k.T) / math.sqrt(128)).numpy()


def _saturates(s: np.ndarray, tau: float, offset: float = 8.0, tile: int = 128) -> bool:
    """Reverse order over 128-key tiles; the max moves only when a tile raises it by more than tau (log2 units);
    x = exp2((s - m)·log2 e + offset): does any x pass 448?"""
    m = np.full(s.shape[0], -np.inf)
    for j in reversed(range(0, s.shape[1], tile)):
        bm = s[:, j:j + tile].max(1)
        m = np.where((m == -np.inf) | ((bm - m) * LOG2E > tau), bm, m)
        if (np.exp2((s[:, j:j + tile] - m[:, None]) * LOG2E + offset) > 448).any():
            return True
    return False


def test_both_cases_are_in_the_registry_and_every_row_passes_or_says_why():
    assert FA4 in CASES and CUDNN_SCALE_S in CASES
    rows = t9_rows((FA4, CUDNN_SCALE_S))
    status = {r["measured"]: r["status"] for r in rows}
    assert sum(s == "PASS" for s in status.values()) == len(rows) - 2  # the two random-data tables
    assert all(s == "INCONCLUSIVE" for m, s in status.items() if "cosine" in m or "rel_l2" in m)
    bound = next(r for r in rows if r["measured"].startswith("largest tau"))
    assert abs(float(bound["instrument"]) - (math.log2(448) - 8)) < 1e-4


def test_the_paged_decode_fixture_saturates_at_tau_4_and_not_under_the_fixes_as_a_float64_loop():
    s = _decode_scores()
    loop = {tau: sum(_saturates(s[:, :n], tau) for n in DECODE_LENGTHS) for tau in (4.0, 0.0, 0.75)}
    assert loop[4.0] > 0 and loop[0.0] == loop[0.75] == 0
    assert {tau: saturating_lengths(tau) for tau in loop} == loop
    # one tile holds no stale max: every length up to 128 is safe even at tau = 4
    assert not any(_saturates(s[:, :n], 4.0) for n in range(1, 129))


def test_the_loop_can_fail():
    s = np.array([[0.0] * 128 + [-1.0]])  # the 1-key tile first, then a max 1 natural unit (1.44 log2) higher
    assert _saturates(s, 4.0) and not _saturates(s, 0.75) and not _saturates(s, 0.0)


def test_the_blind_spot_only_for_a_power_of_two_pair():
    assert scale_s_differences(2.0) == 0 and scale_s_differences(4.0) == 0
    assert scale_s_differences(448.0) > 0 and scale_s_differences(3.0) > 0
