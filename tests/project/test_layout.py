"""The layout stays readable: small modules, short functions, one home per concern.

Sizes are measured with ``ast`` on the package and the workflow's scripts. A function's length
is its span in lines, from ``def`` to its last line, docstring included. No exception is
needed: the Triton program's KV loop lives in ``_attn_fwd_inner``, so ``_attn_fwd`` fits too.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60

SOURCES = sorted([*ROOT.glob("kernels/**/*.py"), *ROOT.glob("workflow/scripts/*.py")])


def _functions(tree):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_there_are_sources_to_check():
    names = {str(p.relative_to(ROOT)) for p in SOURCES}
    assert {"kernels/contract/__init__.py", "kernels/api.py", "kernels/emulator/core.py"} <= names


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_module_is_small(path):
    n = len(path.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)} has {n} lines (at most {MAX_MODULE_LINES})"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_functions_are_short(path):
    rel = str(path.relative_to(ROOT))
    tree = ast.parse(path.read_text(encoding="utf-8"))
    too_long = [f"{fn.name} ({fn.end_lineno - fn.lineno + 1} lines)" for fn in _functions(tree)
                if fn.end_lineno - fn.lineno + 1 > MAX_FUNCTION_LINES]
    assert not too_long, f"{rel}: functions over {MAX_FUNCTION_LINES} lines: {', '.join(too_long)}"


def test_one_rule_file_per_stage_and_one_script_per_rule():
    rules_dir = ROOT / "workflow" / "rules"
    stages = ["common", "inputs", "sweeps", "realmodel", "tensorcore", "conformance", "statistics", "figures", "tables",
              "verdict"]
    assert sorted(p.stem for p in rules_dir.glob("*.smk")) == sorted(stages)
    snakefile = (ROOT / "Snakefile").read_text()
    included = [line.split('"')[1] for line in snakefile.splitlines() if line.startswith("include:")]
    assert included == [f"workflow/rules/{s}.smk" for s in stages], "the Snakefile includes the stages in order"
    scripts = {p.stem for p in (ROOT / "workflow" / "scripts").glob("*.py")}
    for smk in rules_dir.glob("*.smk"):
        text = smk.read_text()
        for block in text.split("\nrule ")[1:]:
            rule = block.split(":", 1)[0].strip()
            if "script:" in block:
                script = block.split("script:", 1)[1].split('"')[1]
                assert Path(script).stem == rule, f"rule {rule} runs {script}; scripts are named after rules"
                assert rule in scripts
