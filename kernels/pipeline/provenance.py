"""Which library code a rule runs, and whether the imported ``pcast`` is this checkout's.

The import package ``pcast`` has its source in the checkout's folder ``kernels/`` (``pcast.<x>`` is
``kernels/x``).

* :func:`modules_used`: the ``pcast`` modules a script imports, followed through their own imports
  (lazy ones inside functions included) and the package ``__init__`` files Python runs on the way,
  read from the source with ``ast`` (nothing is imported);
* :func:`code_digest`: the sha256 of those modules' source, the ``code`` param of every rule that
  runs library code, so that Snakemake's params rerun trigger sees a library edit;
* :func:`imported_by_jobs`: the ``pcast/__init__.py`` a rule's script imports (Snakemake puts the
  Snakefile's folder on its own path, not on a job's, so a job imports whatever ``pcast`` the
  environment has: another checkout installed in editable mode, say);
* :func:`checkout_mismatch`: a one-line message when that package's files differ from the
  checkout's ``kernels/``, else None.

Standard library only: the workflow calls these before any job. Sources are read once per process
(an edit is seen by the next snakemake run).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import subprocess
from pathlib import Path

__all__ = ["PACKAGE", "FOLDER", "import_path", "module_file", "modules_used", "code_digest", "tree_digest", "imported_by_jobs",
           "checkout_mismatch"]

PACKAGE = "pcast"
FOLDER = "kernels"  # the package's source folder in a checkout


@functools.cache
def module_file(root: Path, name: str) -> Path | None:
    """The source of module ``name`` (``pcast.<x>.<y>``, in ``kernels/<x>/<y>``) under the checkout ``root``, or None."""
    head, *rest = name.split(".")
    if head != PACKAGE:
        return None
    base = Path(root).joinpath(FOLDER, *rest)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _lazy_table(tree: ast.Module) -> dict:
    """A package's ``_LAZY = {name: submodule}`` table (names resolved on first use), or {}."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_LAZY" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def _from_import(root: Path, module: str, name: str) -> set[str]:
    """``from module import name``: the submodule ``name``, else ``module`` and, when ``module``
    resolves ``name`` lazily (its ``_LAZY`` table), the submodule that defines it."""
    if module_file(root, f"{module}.{name}"):
        return {f"{module}.{name}"}
    path = module_file(root, module)
    lazy = _lazy_table(_parse(path)) if path is not None else {}
    return {module} | ({f"{module}.{lazy[name]}"} if name in lazy else set())


@functools.cache
def _imports(root: Path, path: Path) -> frozenset[str]:
    """The ``pcast`` modules one source file imports, anywhere in it (lazy imports included)."""
    tree = _parse(path)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == PACKAGE or node.module.startswith(PACKAGE + "."):
                for alias in node.names:
                    found |= _from_import(root, node.module, alias.name)
    return frozenset(m for m in found if m == PACKAGE or m.startswith(PACKAGE + "."))


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def modules_used(root: Path, script: Path) -> list[str]:
    """Sorted names of the ``pcast`` modules ``script`` runs (``root``: the checkout)."""
    root = Path(root)
    todo = sorted(_imports(root, Path(script)))
    seen: set[str] = set()
    while todo:
        for name in _with_parents(todo.pop()):
            path = module_file(root, name)
            if name in seen or path is None:
                continue
            seen.add(name)
            todo.extend(_imports(root, path))
    return sorted(seen)


def code_digest(root: Path, script: Path) -> str:
    """sha256 over the names and the sha256 of the sources of the modules :func:`modules_used` lists."""
    h = hashlib.sha256()
    for name in modules_used(root, script):
        h.update(f"{name} {_file_sha256(module_file(root, name))}\n".encode())
    return h.hexdigest()


@functools.cache
def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_digest(package_dir: Path) -> dict[str, str]:
    """{path relative to the package folder: sha256} of every ``.py`` file of a package."""
    package_dir = Path(package_dir)
    return {p.relative_to(package_dir).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(package_dir.rglob("*.py")) if "__pycache__" not in p.parts}


def imported_by_jobs(python: str) -> str | None:
    """``pcast.__file__`` as a job's script sees it: ``python`` with neither the current folder nor
    the Snakefile's on its path (``-P``), the environment's PYTHONPATH and installs kept; None when
    ``pcast`` cannot be imported."""
    res = subprocess.run([python, "-P", "-c", "import pcast; print(pcast.__file__)"], capture_output=True,
                         text=True)
    return res.stdout.strip() if res.returncode == 0 and res.stdout.strip() else None


def checkout_mismatch(checkout: Path, imported_init: str | None) -> str | None:
    """None when the ``pcast`` jobs import (its ``__init__.py`` path) has this checkout's code.

    The code is this checkout's when every ``.py`` file of the imported package equals the file
    of the same name in ``checkout/kernels`` and neither has a file the other lacks.
    """
    checkout = Path(checkout).resolve()
    if imported_init is None:
        return f"the rules' scripts cannot import 'pcast' from a file: {_fix(checkout)}"
    imported = Path(imported_init).resolve().parent
    if imported == checkout / FOLDER:
        return None
    mine, theirs = tree_digest(checkout / FOLDER), tree_digest(imported)
    if mine == theirs:
        return None
    differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
    return (f"the 'pcast' the rules' scripts import is {imported}, not this checkout's {checkout / FOLDER} "
            f"({len(differ)} files differ, first {differ[0]}): {_fix(checkout)}")


def import_path(checkout: Path, where: Path) -> str:
    """A ``PYTHONPATH`` under which ``import pcast`` gives ``checkout``'s ``kernels/`` without an install.

    ``where/pcast`` is made a link to ``checkout/kernels`` (``where`` is created). The checkout
    itself follows on the path, for a checkout whose package imports under its folder's name.
    """
    where = Path(where)
    where.mkdir(parents=True, exist_ok=True)
    link = where / PACKAGE
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(Path(checkout).resolve() / FOLDER, target_is_directory=True)
    return f"{where}{os.pathsep}{Path(checkout).resolve()}"


def _fix(checkout: Path) -> str:
    return f"run `python -m pip install --no-deps -e {checkout}` in this environment, then start snakemake again"
