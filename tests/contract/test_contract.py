"""The shared contract is one thing: the same step markers in all three implementations, and
each shared name (kernels/contract/__init__.py, the claim registry) defined in exactly one place."""

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pcast import contract

ROOT = Path(__file__).resolve().parents[2]

# The three implementations of the per-row contract.
# The split contract (several splits, partition-normalised P) has its own emulator module with the same markers.
IMPLEMENTATIONS = ("kernels/triton/kernel.py", "kernels/emulator/core.py", "tests/support/loop_contract.py",
                   "kernels/emulator/splits.py")
MARKERS = tuple(contract.step_marker(n) for n in range(1, len(contract.STEPS) + 1))


def _text(rel):
    return (ROOT / rel).read_text()


# ------------------------------------------------------------------------- step markers

def test_the_six_markers_are_the_documented_names():
    assert MARKERS == ("# step 1: scores", "# step 2: running max", "# step 3: cast", "# step 4: row sum",
                       "# step 5: accumulate", "# step 6: normalise")


@pytest.mark.parametrize("rel", IMPLEMENTATIONS)
def test_each_step_is_marked_once_and_in_order(rel):
    text = _text(rel)
    for marker in MARKERS:
        # a whole comment: "# step 1: scores" but not "# step 1: scoresX"
        hits = re.findall(rf"^[ \t]*{re.escape(marker)}[ \t]*$", text, flags=re.M)
        assert len(hits) == 1, f"{rel}: {marker!r} appears {len(hits)} times as a comment line"
    positions = [re.search(rf"^[ \t]*{re.escape(m)}[ \t]*$", text, flags=re.M).start() for m in MARKERS]
    assert positions == sorted(positions), f"{rel}: the step markers are out of order"


@pytest.mark.parametrize("rel", IMPLEMENTATIONS)
def test_no_other_step_numbering(rel):
    """Every numbered-step comment ('# step N', '# N.') is one of the six markers (no stale numbering)."""
    stray = [ln.strip() for ln in _text(rel).splitlines()
             if re.match(r"\s*#\s*(step\s*)?\d+\s*[.:]", ln, flags=re.I) and ln.strip() not in MARKERS]
    assert not stray, f"{rel}: {stray}"


def test_attention_docstring_names_the_steps_in_order():
    import pcast

    doc = pcast.attention.__doc__
    positions = []
    for n, name in enumerate(contract.STEPS, 1):
        m = re.search(rf"^\s*{n}\. {re.escape(name)}:", doc, flags=re.M)
        assert m, f"pcast.attention's docstring lacks step '{n}. {name}:'"
        positions.append(m.start())
    assert positions == sorted(positions)


# ------------------------------------------------------------------------- names defined once

def _sources():
    """Every file in which a shared name could be (re)defined."""
    files = [p for p in (ROOT / "kernels").rglob("*.py")]
    files += [p for p in (ROOT / "workflow").rglob("*") if p.suffix in (".py", ".smk") or p.name == "Snakefile"]
    files += [p for p in (ROOT / "Snakefile",) if p.exists()]
    files.append(ROOT / "tests" / "support" / "loop_contract.py")
    return sorted({p for p in files if p.is_file() and "__pycache__" not in p.parts})


def _definitions(pattern, reexport=None):
    """Relative paths of the files where ``pattern`` (a regex anchored at a line start) matches,
    once per match. A line that only re-exports ``reexport`` (``NAME = contract.NAME``) is no
    second definition."""
    plain = re.compile(rf"=\s*[A-Za-z_][\w.]*\.{reexport}\s*(#.*)?$") if reexport else None
    where = []
    for p in _sources():
        text = p.read_text()
        for m in re.finditer(pattern, text, flags=re.M):
            line = text[m.start():].split("\n", 1)[0]
            if plain is None or not plain.search(line):
                where.append(str(p.relative_to(ROOT)))
    return sorted(where)


# Names of kernels/contract/__init__.py that must have no second definition (the workflow's config
# sections are EXPERIMENT_CFG, STATS_CFG and CRITERIA, so that no name reads as both).
SHARED_NAMES = ("EXPERIMENTS", "CONFORMANCE", "SCALE_MODES", "SINK_MODES", "OPERAND_SCALES", "V_SCALES", "MX_SEQ_BLOCK", "LOG2E", "DIAGNOSTICS", "ORDERS", "COMBOS", "COMBO_LABELS", "ROWSUMS", "BACKENDS", "BACKENDS_RAN",
                "PAPER_SCALES", "STEPS", "CONFIG_COLUMNS", "GROUP_COLUMNS", "COMBO_COLUMNS", "TIDY_COLUMNS",
                "CONFORMANCE_KEY", "CONFORMANCE_COLUMNS", "TIMING_COLUMNS", "HEAD_DIMS", "ATTENTION_HEAD_DIMS", "BLOCK_SIZES",
                "BLOCK_MULTIPLE", "INPUT_DTYPES", "SWEEP_EXPERIMENTS", "POLICY_EXPERIMENT", "SINK_KINDS", "VARIANTS", "POLICY_CONFIG_COLUMNS",
                "POLICY_TIDY_COLUMNS")
SHARED_FUNCTIONS = ("combo_label", "step_marker", "is_allowed", "is_block_size", "log2_scale")


def test_the_scan_sees_the_tree():
    rels = {str(p.relative_to(ROOT)) for p in _sources()}
    assert {"kernels/contract/__init__.py", "kernels/analysis/registry.py", "tests/support/loop_contract.py"} <= rels
    assert any(r.endswith(".smk") for r in rels)


@pytest.mark.parametrize("name", SHARED_NAMES)
def test_shared_name_is_defined_once_in_contract(name):
    assert name in contract.__all__
    where = _definitions(rf"^[ \t]*{name}[ \t]*(:[^=\n]*)?=(?!=)", reexport=name)
    assert where == ["kernels/contract/__init__.py"], f"{name} is defined in {where}"


@pytest.mark.parametrize("name", SHARED_FUNCTIONS)
def test_shared_function_is_defined_once_in_contract(name):
    assert name in contract.__all__
    where = _definitions(rf"^[ \t]*def\s+{name}\b")
    assert where == ["kernels/contract/__init__.py"], f"def {name} is in {where}"


def test_no_literal_copy_of_the_diagnostic_names():
    where = _definitions(r"""[(\[]\s*["']underflow["']\s*,\s*["']underflow_sink["']""")
    assert where == ["kernels/contract/__init__.py"], f"the diagnostic names are spelled out in {where}"


def test_claim_registries_live_only_in_the_registry():
    pattern = (r"^[ \t]*(CLAIMS|OUTPUTS|FIGURES|TABLES|CLAIM_OUTPUTS|CLAIM_TEXT|CLAIM_CATEGORY|CATEGORY|\w*_CATEGORY)"
               r"[ \t]*(:[^=\n]*)?=(?!=)")
    where = [w for w in _definitions(pattern) if w != "kernels/analysis/registry.py"]
    assert not where, f"a claim/category registry is defined outside kernels/analysis/registry.py: {where}"


# ------------------------------------------------------------------------- the names agree with the code

def test_contract_values():
    assert contract.COMBO_LABELS == ("forward S=1", "forward S=256", "reverse S=1", "reverse S=256")
    assert contract.combo_label("reverse", 256) == "reverse S=256"
    assert contract.is_allowed(64, contract.HEAD_DIMS) and not contract.is_allowed(64.0, contract.HEAD_DIMS)
    assert not contract.is_allowed(True, (1,)) and not contract.is_allowed(48, contract.BLOCK_SIZES)
    # the contract's blocks: any positive multiple of 16 (real kernels' 96, 160, 192), never a float or a bool
    assert all(contract.is_block_size(b) for b in (16, 48, 96, 160, 192, 256, 512))
    assert not any(contract.is_block_size(b) for b in (0, -16, 8, 100, 96.0, True, "64", None))


def test_attention_result_carries_exactly_the_diagnostics_in_order():
    from pcast.api import AttentionResult

    fields = [f.name for f in dataclasses.fields(AttentionResult)]
    # besides the diagnostics: the output, the backend that ran, the MSE of reference=True, the row's lse and the
    # inputs' dtype
    assert tuple(f for f in fields if f not in ("out", "backend", "mse", "mse_heads", "lse", "input_dtype")) == \
        contract.DIAGNOSTICS


def test_every_backend_reports_a_name_of_backends_ran():
    import torch

    import pcast

    q = torch.randn(1, 1, 4, 16)
    ran = {pcast.attention(q, q, q, backend=b).backend for b in contract.BACKENDS}
    assert ran <= set(contract.BACKENDS_RAN) and len(ran) >= 3


def test_contract_imports_nothing_heavy():
    code = ("import sys, pcast.contract; heavy = {'torch', 'pandas', 'numpy', 'triton'} & set(sys.modules);"
            " print(sorted(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
