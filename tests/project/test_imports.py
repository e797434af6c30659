"""The package's import graph: no cycles, and each trade imports only the trades below it.

The graph is read with ``ast`` from every module of ``kernels/``: ``import pcast.x``,
``from pcast.x import y`` and relative imports, at module level and inside functions alike (a
lazy import is still a dependency). A module's trade is its first package under ``pcast``; the
root modules (``kernels/__init__.py``, ``api.py``, ``api_multi.py``, ``aot.py``) form the ``api`` trade.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from slim import PIPELINE_IMPORTS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "kernels"

#: Each trade and the trades it may import (its own modules are always allowed).
ALLOWED = {
    "formats": set(),
    "contract": {"formats"},
    "reference": {"contract", "formats"},
    "theory": {"contract", "formats"},
    "emulator": {"contract", "formats", "reference"},
    "triton": {"contract", "formats", "reference"},
    "policies": {"contract", "formats"},
    "api": {"contract", "formats", "reference", "theory", "emulator", "triton", "policies"},
    "conformance": {"api", "contract", "formats", "reference", "theory", "emulator", "triton", "policies"},
    "models": {"api", "contract", "formats", "reference", "theory", "emulator", "triton", "policies"},
}
ALLOWED["probes"] = {"api", "policies", "models", "conformance", "reference", "theory", "contract", "formats"}
ALLOWED["cases"] = set(ALLOWED["probes"]) | {"probes"}  # pcast.cases: the public name of pcast.probes.cases
ALLOWED["analysis"] = {"models", "policies", "theory", "contract", "formats"}
ALLOWED["deployed"] = {"triton", "policies", "contract", "formats"}  # deployed kernels as black boxes
# what the pipeline and the instrument both keep on this machine: atomic writes, the emulator's calibration
ALLOWED["host"] = set(ALLOWED["models"]) | {"models"}
ALLOWED["pipeline"] = set(ALLOWED["conformance"]) | {"conformance", "models", "analysis", "probes", "cases", "deployed",
                                                     "host"}
# the audit is the instrument: it never imports the pipeline
ALLOWED["audit"] = set(ALLOWED["pipeline"]) - {"pipeline"}
ALLOWED["cli"] = set(ALLOWED["audit"]) | {"audit", "pipeline"}
ROOT_MODULES = {"pcast", "pcast.api", "pcast.api_multi", "pcast.api_decode", "pcast.api_dynamic", "pcast.api_inputs", "pcast.aot", "pcast.result"}


def _modules() -> dict[str, Path]:
    mods = {}
    for p in PACKAGE.rglob("*.py"):
        parts = ("pcast",) + p.relative_to(PACKAGE).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return mods


def _imports(name: str, path: Path, mods) -> set[str]:
    """The pcast modules that ``name`` imports (a name imported from a package counts as the
    submodule when there is one of that name)."""
    out = set()
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "pcast"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                mod = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != "pcast":
                continue
            for a in node.names:
                out.add(f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod)
    return out - {name}


def trade(module: str) -> str:
    return "api" if module in ROOT_MODULES else module.split(".")[1]


@pytest.fixture(scope="module")
def graph():
    mods = _modules()
    return {n: _imports(n, p, mods) for n, p in mods.items()}


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each a cycle or several."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _upward(graph) -> list[str]:
    return sorted(f"{a} -> {b}" for a, bs in graph.items() for b in bs
                  if trade(a) != trade(b) and trade(b) not in ALLOWED[trade(a)])


def test_every_module_belongs_to_a_known_trade(graph):
    assert len(graph) > 40
    unknown = sorted({trade(m) for m in graph} - set(ALLOWED))
    assert not unknown, f"modules of unknown trades {unknown}: add each to ALLOWED with what it may import"
    assert {"pcast.formats.rounding", "pcast.emulator.core", "pcast.triton.kernel",
            "pcast.theory.collapse"} <= set(graph)


def test_no_import_cycles(graph):
    assert _cycles(graph) == []


def test_no_upward_imports(graph):
    assert _upward(graph) == []


def test_the_audit_never_imports_the_pipeline(graph):
    """The instrument stands without the pipeline: no module of pcast.audit imports one of pcast.pipeline,
    directly or through another trade."""
    assert "pipeline" not in ALLOWED["audit"]
    reach, todo = set(), [m for m in graph if trade(m) == "audit"]
    while todo:
        m = todo.pop()
        for dep in graph.get(m, ()):
            if dep not in reach:
                reach.add(dep)
                todo.append(dep)
    assert sorted(m for m in reach if trade(m) == "pipeline") == []


def test_the_trades_form_a_partial_order():
    """ALLOWED itself has no cycle: no two trades may import each other, directly or through others."""
    tgraph = {t: set(deps) for t, deps in ALLOWED.items()}
    assert _cycles(tgraph) == []


def test_the_checks_can_fail():
    """A cycle and an upward edge, planted in a copy of a small graph, are both reported."""
    g = {"pcast.formats.fp8": {"pcast.formats.rounding"}, "pcast.formats.rounding": {"pcast.formats.fp8"},
         "pcast.theory.collapse": {"pcast.emulator.core"}, "pcast.emulator.core": set()}
    assert _cycles(g) == [["pcast.formats.fp8", "pcast.formats.rounding"]]
    assert _upward(g) == ["pcast.theory.collapse -> pcast.emulator.core"]


def test_relative_imports_are_resolved(tmp_path):
    """``from ..x import y`` inside a subpackage resolves to the right module."""
    pkg = tmp_path / "m.py"
    pkg.write_text("from ..formats import fp8\nfrom . import core\nimport pcast.contract\n")
    mods = {"pcast.formats.fp8": None, "pcast.emulator.core": None}
    got = _imports("pcast.emulator.m", pkg, mods)
    assert got == {"pcast.formats.fp8", "pcast.emulator.core", "pcast.contract"}


# The instrument's modules, imported and run with the pipeline's packages (and Triton's, mmasim's) made
# unimportable: the fast twin of tests/project/test_install.py's fresh slim venv.
INSTRUMENT_IMPORT_CHECK = f"""
import importlib.abc, sys
BLOCKED = set({PIPELINE_IMPORTS!r})
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(name + " is not part of the slim install")
sys.meta_path.insert(0, Refuse())
import torch
import pcast, pcast.probes, pcast.policies, pcast.theory, pcast.audit, pcast.cli.audit, pcast.cli.fingerprint, pcast.cli.bench
q = torch.randn(1, 1, 32, 16, generator=torch.Generator().manual_seed(0))
for order in ("forward", "reverse"):
    pcast.attention(q, q, q, order=order, scale=256.0)
pcast.attention(q, q, q, policy="fa3")
for cli in (pcast.cli.audit, pcast.cli.fingerprint, pcast.cli.bench):
    try:
        cli.main(["--help"])
    except SystemExit as e:
        assert e.code == 0, cli
print(sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED))
"""


def test_the_instrument_imports_and_runs_without_the_pipelines_packages():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", INSTRUMENT_IMPORT_CHECK], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
