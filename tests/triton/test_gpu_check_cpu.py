"""The parts of ``pcast-gpu-check`` that run without a GPU."""

from __future__ import annotations

import torch

import pcast
from pcast.cli.gpu_check import result_on_cpu


def test_a_result_moves_to_the_cpu_with_its_other_fields_kept():
    """The kernel check compares a GPU result on the CPU: every tensor field moves, the fields that are not
    tensors (None where not asked for, the backend, the input dtype) stay as they are."""
    q = torch.randn(1, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    r = pcast.attention(q, q, q, backend="emulator")
    moved = result_on_cpu(r)
    assert moved.mse is None and moved.backend == "emulator" and moved.input_dtype is torch.float32
    assert torch.equal(moved.out, r.out) and torch.equal(moved.lse, r.lse)
