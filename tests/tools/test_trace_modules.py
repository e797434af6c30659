"""tools/trace_modules.py: the modules one pcast.attention call enters, in order; docs/contributing.md's walk
names every module the traced call enters, and only modules that exist."""

import re
from pathlib import Path

import torch

import pcast
import trace_modules  # tools/, on sys.path through tests/conftest.py
from pcast.models.sinks import make_inputs

ROOT = Path(__file__).resolve().parents[2]


def _walk() -> str:
    text = (ROOT / "docs" / "contributing.md").read_text(encoding="utf-8")
    return text.split("## One call, followed", 1)[1].split("\n## ", 1)[0]


def test_the_trace_starts_at_the_front_door_and_reaches_the_compiled_pass():
    q, k, v = make_inputs(0, n=128, d=64, ksink=4, delta=10.0)
    run = lambda: pcast.attention(q, k, v, order="forward", scale=1.0, ksink=4, backend="emulator")  # noqa: E731
    run()
    visits = trace_modules.trace(run)
    mods = [m for m, _ in visits]
    assert mods[0] == "pcast" and mods[1] == "pcast.api"
    assert "pcast.emulator.core" in mods and mods[-1] == "pcast.api_inputs"
    assert any(m.startswith("pcast.emulator.fused") for m in mods)  # the compiled pass's Python side
    assert torch.equal(run().out, run().out)


def test_the_walk_names_every_module_the_call_enters():
    q, k, v = make_inputs(0, n=128, d=64, ksink=4, delta=10.0)
    run = lambda: pcast.attention(q, k, v, order="forward", scale=1.0, ksink=4, backend="emulator")  # noqa: E731
    run()
    entered = {m for m, _ in trace_modules.trace(run)}
    walk = _walk()
    named = set(re.findall(r"`(kernels/[\w/]+(?:\.py|/))`", walk))
    assert named and all((ROOT / p).exists() for p in named), sorted(p for p in named if not (ROOT / p).exists())
    missing = []
    for m in sorted(entered):
        parts = m.split(".")[1:]
        path = "kernels/" + "/".join(parts)
        file = path + ".py" if (ROOT / (path + ".py")).exists() else (path + "/__init__.py").replace("kernels//", "kernels/")
        folder = file.rsplit("/", 1)[0] + "/"
        if file not in named and folder not in named:
            missing.append(m)
    assert missing == []
