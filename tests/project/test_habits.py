"""Habits a newcomer can rely on, read with ``ast`` from ``kernels/`` and the README:

* imports sit at the top of a module; the lazy ones (inside a function) are listed here, each with a
  ``# lazy: why`` comment on its line or the line above (an optional package, or a module kept torch-free);
* no private name (``_x``) is imported from another module;
* a docstring names only modules that exist (``pcast.x.y``, a trade's ``emulator.core``, a root module's
  ``api_multi.x``), and a name it gives in a module exists there;
* the README's layout block lists every subpackage of ``kernels/``, and only those.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "kernels"
SOURCES = sorted(PKG.rglob("*.py"))

#: Modules whose habits are not checked yet (none).
PENDING: tuple = ()

#: Every import inside a function: module -> the modules it imports there.
LAZY = {
    "kernels/analysis/paired.py": {"statsmodels.stats.multitest"},
    "kernels/analysis/plots/realmodel.py": {"matplotlib.colors", "seaborn"},
    "kernels/analysis/plots/style.py": {"matplotlib.ticker", "seaborn"},
    "kernels/analysis/realmodel.py": {"pcast.models.heads"},
    "kernels/analysis/tables.py": {"tabulate"},
    "kernels/aot.py": {"pcast.triton.aot", "pcast.triton.deploy", "pcast.triton.kernel"},
    "kernels/api.py": {"pcast.triton.kernel", "pcast.triton.splits"},
    "kernels/audit/remedy.py": {"scipy.stats"},
    "kernels/cli/compile_check.py": {"pcast.triton.aot", "pcast.triton.kernel"},
    "kernels/cli/gpu_check.py": {"pcast.triton.deploy", "pcast.triton.kernel"},
    "kernels/emulator/fused.py": {"pcast.emulator"},
    "kernels/emulator/tensorcore.py": {"mmasim.nv_ptx"},
    "kernels/deployed/__init__.py": {"pcast.triton.fp8cast", "pcast.triton.interpret", "triton"},
    "kernels/host/files.py": {"safetensors.torch"},
    "kernels/host/calibration.py": {"pcast", "pcast.emulator.core", "pcast.models.sinks", "pcast.reference", "torch"},
    "kernels/models/decoder.py": {"transformers.masking_utils", "transformers.modeling_utils"},
    "kernels/models/realmodel.py": {"transformers", "transformers.masking_utils"},
    "kernels/pipeline/calibration.py": {"pcast", "pcast.models.sinks", "pcast.reference", "torch",
                                        "pcast.pipeline.decode_runs", "pcast.pipeline.runs"},
    "kernels/pipeline/inputs.py": {"pcast.models.sinks", "safetensors", "safetensors.torch", "torch"},
    "kernels/pipeline/validation.py": {"snakemake.exceptions", "snakemake.utils"},
    "kernels/triton/aot.py": {"triton.compiler", "triton.runtime.jit"},
    "kernels/triton/fp8cast.py": {"triton.language", "triton.runtime"},
    "kernels/triton/interpret.py": {"triton", "triton.language", "triton.runtime.interpreter", "triton.runtime.jit"},
}

#: Private names still imported across modules: the Triton kernels' helpers, whose names are the compiled kernels'
#: symbols that the AOT and GPU tests read (renamed together with those tests, on a machine that runs them).
PRIVATE_IMPORTS = {
    ("kernels/aot.py", "pcast.triton.kernel", "_attn_fwd"), ("kernels/aot.py", "pcast.triton.deploy", "_attn_fwd_fp8"),
    ("kernels/cli/compile_check.py", "pcast.triton.kernel", "_builtin_cast_kernel"),
    ("kernels/triton/splits.py", "pcast.triton.kernel", "_attn_fwd_inner"),
    ("kernels/triton/splits.py", "pcast.triton.kernel", "_launch"),
    ("kernels/triton/splits.py", "pcast.triton.kernel", "_load_operand"),
    ("kernels/triton/splits.py", "pcast.triton.kernel", "_store_diagnostics"),
}


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def _checked(p: Path) -> bool:
    return not _rel(p).startswith(PENDING)


def _lazy_imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for st in ast.walk(fn):
                if isinstance(st, (ast.Import, ast.ImportFrom)):
                    yield st, ([a.name for a in st.names] if isinstance(st, ast.Import) else [st.module])


def test_the_lazy_imports_are_the_listed_ones_each_saying_why():
    found, silent = {}, []
    for p in filter(_checked, SOURCES):
        lines = p.read_text(encoding="utf-8").splitlines()
        for st, mods in _lazy_imports(p):
            found.setdefault(_rel(p), set()).update(mods)
            here = lines[st.lineno - 1] + (lines[st.lineno - 2] if st.lineno > 1 else "")
            if "# lazy: " not in here:
                silent.append(f"{_rel(p)}:{st.lineno}: {ast.unparse(st)}")
    assert found == LAZY, "a lazy import added or gone: move it to the top, or list it in LAZY with its reason"
    assert silent == [], "lazy imports without a '# lazy: why' comment"


def test_a_lazy_import_must_say_why_and_be_listed(tmp_path):
    """The check itself: an unlisted, silent lazy import is found."""
    p = tmp_path / "m.py"
    p.write_text("def f():\n    import torch\n    return torch\n")
    assert [mods for _, mods in _lazy_imports(p)] == [["torch"]]


def test_torch_free_modules_import_without_torch():
    """What the lazy torch imports are for: the modules whose docstrings say torch-free load without it."""
    names = []
    for p in filter(_checked, SOURCES):
        doc = ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) or ""
        if re.search(r"\btorch-free\b", doc, flags=re.I) and p.name != "__init__.py":
            names.append("pcast." + ".".join(p.relative_to(PKG).with_suffix("").parts))
    assert "pcast.pipeline.plan" in names or "pcast.pipeline.config" in names
    code = f"import sys\nfor m in {names!r}:\n    __import__(m)\n    assert 'torch' not in sys.modules, m\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]


def _private_imports(path: Path):
    for st in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(st, ast.ImportFrom) and (st.module or "").split(".")[0] == "pcast":
            for a in st.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    yield (_rel(path), st.module, a.name)


def test_no_private_name_is_imported_across_modules():
    found = {t for p in filter(_checked, SOURCES) for t in _private_imports(p)}
    assert found - PRIVATE_IMPORTS == set(), "make the name public in its trade, or move it"
    assert PRIVATE_IMPORTS - found == set(), "gone: take it off PRIVATE_IMPORTS"


# ----------------------------------------------------------------------------- docstrings name modules that exist

TRADES = sorted(p.name for p in PKG.iterdir() if (p / "__init__.py").exists())
ROOT_MODULES = sorted(p.stem for p in PKG.glob("*.py") if p.stem != "__init__")
_REF = re.compile(r"(?<![\w./])((?:pcast|%s)(?:_\w+)?(?:\.[A-Za-z_]\w*)+)" % "|".join(TRADES + ["api"]))
_MODULE_LIKE = re.compile(r"^(pcast|(%s)(_\w+)?)$" % "|".join(TRADES + ["api"]))


def _top_names(path: Path) -> set:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for st in tree.body:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(st.name)
        elif isinstance(st, (ast.Assign, ast.AnnAssign)):
            for t in st.targets if isinstance(st, ast.Assign) else [st.target]:
                out |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(st, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in st.names}
    # names a package exports lazily (its __all__ or a name -> module map)
    out |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and n.value.isidentifier()}
    return out


def unresolved(dotted: str) -> str | None:
    """None when ``dotted`` (``pcast.x.y``, or ``x.y`` for a trade or root module x) names a module of the
    package, or a name that a module or package defines; else why not."""
    parts = dotted.split(".")
    if parts[0] != "pcast":
        parts = ["pcast"] + parts
    path = PKG
    for i, part in enumerate(parts[1:], 1):
        if part.startswith("__"):
            return None
        if (path / part / "__init__.py").exists():
            path = path / part
            continue
        if (path / f"{part}.py").exists():
            if i + 1 < len(parts) and parts[i + 1] not in _top_names(path / f"{part}.py"):
                return f"{'.'.join(parts[:i + 1])} has no {parts[i + 1]}"
            return None
        if part not in _top_names(path / "__init__.py"):
            return f"no module or name {'.'.join(parts[:i + 1])}"
        return None
    return None


def _bad_references(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for m in _REF.finditer(ast.get_docstring(node, clean=False) or ""):
            name = m.group(1)
            first = name.split(".")[0]
            if not _MODULE_LIKE.match(first):
                continue
            if first == "triton" and not (PKG / "triton" / f"{name.split('.')[1]}.py").exists():
                continue  # Triton's own names (triton.jit, triton.language)
            why = unresolved(name)
            if why:
                out.append(f"{_rel(path)}:{getattr(node, 'lineno', 1)}: {name}: {why}")
    return out


def test_docstrings_name_only_modules_that_exist():
    bad = [line for p in filter(_checked, SOURCES) for line in _bad_references(p)]
    assert bad == []


def test_a_docstring_naming_a_gone_module_is_found():
    doc = ("Shared with ``emulator_calls._Shared`` and :func:`pcast.emulator.core.nothing_here`; "
           "pcast.api_multi.attention_calls, emulator.core and the emulator exist.")
    got = [m.group(1) for m in _REF.finditer(doc) if _MODULE_LIKE.match(m.group(1).split(".")[0])
           and unresolved(m.group(1))]
    assert got == ["emulator_calls._Shared", "pcast.emulator.core.nothing_here"]


# ----------------------------------------------------------------------------- the README's layout block

def test_the_readme_layout_lists_every_subpackage():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## Layout", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    listed = set(re.findall(r"^kernels/([\w/]+)/", block, flags=re.M))
    packages = {str(p.parent.relative_to(PKG)) for p in PKG.rglob("__init__.py") if p.parent != PKG}
    assert listed == packages, f"missing: {sorted(packages - listed)}; not a package: {sorted(listed - packages)}"


@pytest.mark.parametrize("path", [p for p in SOURCES if p.name == "__init__.py"], ids=_rel)
def test_every_package_has_a_docstring(path):
    assert ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))), _rel(path)
