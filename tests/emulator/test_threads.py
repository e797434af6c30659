"""The compiled P path's threads: never more than torch is allowed, and waiting asleep, not spinning.

On a machine loaded by other work, OpenMP threads that spin while they wait starve the threads doing the work:
beside two busy processes on 2 cores, the emulator fell to 0.04-0.06 of its matmul pair with the runtimes'
default wait policy, and ran at 0.2-0.7 of it with ``OMP_WAIT_POLICY=PASSIVE`` (docs/performance.md).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import pcast
from pcast.emulator import compiled, fused

pytestmark = pytest.mark.skipif(not compiled.AVAILABLE, reason="numba is not installed")


def test_the_compiled_pass_runs_at_most_torchs_thread_count(monkeypatch):
    import numba

    from pcast.emulator import fusedmath

    asked = []
    real = numba.set_num_threads
    monkeypatch.setattr(fusedmath.numba, "set_num_threads", lambda n: asked.append(n) or real(n))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 512, 32, generator=g) for _ in range(3))
    old = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            start = len(asked)
            pcast.attention(q, k, v, scale=256.0, ksink=4, backend="emulator")
            assert asked[start:] and max(asked[start:]) <= threads
            assert torch.get_num_threads() == threads  # torch's count left as it was
    finally:
        torch.set_num_threads(old)
    assert fused.ENABLED


_CHILD = r"""
import os, sys
import pcast, torch
from pcast.emulator import fusedmath
import numba
numba.set_num_threads(1)  # numba's OpenMP runtime loads here
print(os.environ.get("OMP_WAIT_POLICY"), numba.threading_layer())
"""


@pytest.mark.parametrize("given, want", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_openmp_threads_wait_asleep_unless_the_user_chose(given, want):
    """Importing pcast (before torch) sets ``OMP_WAIT_POLICY=PASSIVE`` for torch's and numba's OpenMP runtimes,
    unless the user set it."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given:
        env["OMP_WAIT_POLICY"] = given
    done = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    policy, layer = done.stdout.split()
    assert policy == want
    if "NUMBA_THREADING_LAYER" not in os.environ:
        assert layer == "omp"
