"""The stored inputs are the same bytes on every run: the safetensors writer keeps no fixed order of
its header (its metadata's keys flip between processes), so every writer goes through
pcast.host.files.atomic_write_safetensors, which sorts the header."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pcast.host import files

REPO = Path(__file__).resolve().parents[2]
CACHED = REPO / "workflow" / "resources" / "realmodel-smoke.safetensors"

_INPUTS = """
import sys
from pcast.pipeline.inputs import write_inputs
write_inputs({"experiment": "collapse", "shard": 0, "seeds": [0, 1], "batch": 1, "heads": 1,
              "nd": [[32, 16]], "sigma": [1.0]}, sys.argv[1])
"""

_REALMODEL = """
import sys
from pcast.pipeline.realmodel_runs import run_capture
run_capture({"tensors": sys.argv[2], "layers": 1}, tensors_out=sys.argv[1], meta_out=sys.argv[1] + ".json")
"""


def _digests(tmp_path: Path, script: str, runs: int, *extra: str) -> set[str]:
    """sha256 of the file ``script`` writes, each time in a fresh process (the writer's order is per process)."""
    out = set()
    for i in range(runs):
        path = tmp_path / f"run{i}.safetensors"
        subprocess.run([sys.executable, "-c", script, str(path), *extra], check=True, capture_output=True, timeout=300)
        out.add(hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def test_metadata_order_cannot_change_the_bytes():
    import torch
    from safetensors.torch import load, save

    t = {"b": torch.arange(6, dtype=torch.float32).reshape(2, 3), "a": torch.ones(3, dtype=torch.float16)}
    one = files.canonical_safetensors(save(t, metadata={"spec": "{}", "format": "v1", "z": "1"}))
    two = files.canonical_safetensors(save(dict(reversed(t.items())), metadata={"z": "1", "format": "v1", "spec": "{}"}))
    assert one == two
    n = int.from_bytes(one[:8], "little")
    assert n % 8 == 0 and json.loads(one[8:8 + n])["__metadata__"] == {"format": "v1", "spec": "{}", "z": "1"}
    back = load(one)
    assert torch.equal(back["b"], t["b"]) and torch.equal(back["a"], t["a"])


def test_an_input_job_rerun_writes_the_same_bytes(tmp_path):
    assert len(_digests(tmp_path, _INPUTS, 4)) == 1


@pytest.mark.skipif(not CACHED.exists(), reason="the smoke preset's cached real-model layer is not in this checkout")
def test_the_realmodel_writer_rerun_writes_the_same_bytes(tmp_path):
    """The realmodel input (a user's tensors, as the smoke preset reads them; several metadata keys)."""
    assert len(_digests(tmp_path, _REALMODEL, 3, str(CACHED))) == 1
