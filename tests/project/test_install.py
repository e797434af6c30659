"""Fresh installs: the slim instrument alone, and this project beside Hugging Face's ``kernels``.

Each test builds on one fresh virtual environment (no system site-packages) that holds only the
instrument's own requirements from the lock: torch, numpy, scipy, safetensors and PyYAML. In it:

* the instrument (``pcast.attention``, the probes, ``pcast-audit``, ``pcast-fingerprint``) runs, and
  none of the pipeline's packages is installed or imported;
* Hugging Face's ``kernels`` (the distribution that owns the import name ``kernels``) and this
  project, editable and then not, import side by side, each with its own API, and neither writes
  into the other's folder.

Marker ``install``: they need pip's index (the lock's versions, and ``kernels`` itself) and about a
minute; the inner loop leaves them out, the README's test command runs them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from slim import PIPELINE_IMPORTS

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements" / "cpu.lock"
HF_KERNELS = "kernels==0.17.2"
# the pipeline's, Triton's and mmasim's import names: never needed by the instrument
PIPELINE = PIPELINE_IMPORTS

pytestmark = [pytest.mark.install, pytest.mark.xdist_group("install")]

# What the instrument does in the venv: one attention call, the probes' fingerprint of a policy's own
# emulator, an audit of a saved q, k, v through the CLI; then which pipeline packages exist or were imported.
PROBE = textwrap.dedent(f"""
    import importlib.util, json, subprocess, sys, tempfile, os
    import torch
    import pcast
    from pcast import probes
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 16, generator=g) for _ in range(3))
    r = pcast.attention(q, k, v, policy="fa3")
    fp = probes.fingerprint(lambda q, k, v, **kw: pcast.attention(q, k, v, policy="fa3", **kw).out)
    path = os.path.join(tempfile.mkdtemp(), "qkv.safetensors")
    save_file({{"q": q, "k": k, "v": v}}, path)
    audit = subprocess.run([os.path.join(os.path.dirname(sys.executable), "pcast-audit"), path, "--policy", "fa3"],
                           capture_output=True, text=True)
    names = {PIPELINE!r}
    print(json.dumps({{
        "pcast": pcast.__file__, "out_shape": list(r.out.shape), "fingerprint": str(fp.policy),
        "audit_rc": audit.returncode, "audit_tail": (audit.stdout + audit.stderr)[-800:],
        "installed": sorted(n for n in names if importlib.util.find_spec(n) is not None),
        "imported": sorted(n for n in names if n in sys.modules),
    }}))
""")

HF_PROBE = textwrap.dedent("""
    import json, os
    import kernels, pcast, torch
    folder = os.path.dirname(kernels.__file__)
    q = torch.zeros(1, 1, 32, 16)
    print(json.dumps({
        "kernels": kernels.__file__, "get_kernel": callable(getattr(kernels, "get_kernel", None)),
        "rust": os.path.exists(os.path.join(folder, "_rust.abi3.so")),
        "ours_in_theirs": sorted(n for n in ("emulator", "probes", "contract", "api.py") if
                                 os.path.exists(os.path.join(folder, n))),
        "pcast": pcast.__file__, "attention": list(pcast.attention(q, q, q, policy="fa3").out.shape),
    }))
""")


def _pip(venv: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    return proc


def _run(venv: Path, code: str, cwd: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh venv with the instrument's requirements from the lock and this checkout, editable."""
    where = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300)
    proc = _pip(where, "-c", str(LOCK), "-e", str(ROOT))
    if proc.returncode != 0:
        pytest.fail("the slim install failed: " + proc.stderr[-3000:])
    return where


def test_the_slim_install_runs_the_instrument_without_the_pipeline(venv, tmp_path):
    got = _run(venv, PROBE, tmp_path)
    assert got["pcast"] == str(ROOT / "kernels" / "__init__.py")
    assert got["out_shape"] == [1, 2, 64, 16]
    assert "fa3" in got["fingerprint"], got["fingerprint"]
    assert got["audit_rc"] == 0, got["audit_tail"]
    assert got["installed"] == [], f"the slim install brought pipeline packages: {got['installed']}"
    assert got["imported"] == []


def test_hugging_face_kernels_and_pcast_install_side_by_side(venv, tmp_path):
    proc = _pip(venv, HF_KERNELS)
    if proc.returncode != 0:
        pytest.skip(f"{HF_KERNELS} could not be installed from pip's index here: {proc.stderr[-500:]}")
    site = next((venv / "lib").glob("python3*/site-packages"))
    for mode in ("editable", "installed"):
        if mode == "installed":
            assert subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "uninstall", "-y", "-q", "pcast-fp8"],
                                  capture_output=True, timeout=300).returncode == 0
            proc = _pip(venv, "--no-deps", str(ROOT))
            assert proc.returncode == 0, proc.stderr[-3000:]
        got = _run(venv, HF_PROBE, tmp_path)
        assert got["kernels"] == str(site / "kernels" / "__init__.py"), (mode, got)
        assert got["get_kernel"] and got["rust"], (mode, got)
        assert got["ours_in_theirs"] == [], (mode, got)
        want = ROOT / "kernels" / "__init__.py" if mode == "editable" else site / "pcast" / "__init__.py"
        assert got["pcast"] == str(want), (mode, got)
        assert got["attention"] == [1, 1, 32, 16]
