"""The audit's settings are one frozen value, built by one function for the command line and for
pcast.audit_kernel; no module of pcast.audit reads an argparse Namespace."""

import ast
import dataclasses
from pathlib import Path

import pytest
import torch
from own_kernels import KERNELS, make_kernel

import pcast
from pcast.audit.settings import AuditSettings, audit_settings
from pcast.cli.audit import _parser, settings

AUDIT = Path(__file__).resolve().parents[2] / "kernels" / "audit"


def test_no_audit_module_takes_or_reads_a_namespace():
    found = []
    for path in sorted(AUDIT.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.arg) and node.arg == "args":
                found.append(f"{path.name}:{node.lineno}: parameter args")
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "args":
                found.append(f"{path.name}:{node.lineno}: args.{node.attr}")
            elif isinstance(node, (ast.Import, ast.ImportFrom)) and "argparse" in ast.unparse(node):
                found.append(f"{path.name}:{node.lineno}: imports argparse")
    assert found == []


def test_the_flags_become_one_frozen_typed_value():
    s = settings(_parser().parse_args(["x.safetensors", "--fail-on", "rel-mse>0.1", "--fail-on", "rel-mse:0.05",
                                       "--fail-on", "collapse", "--only", "yours", "--ksink", "auto", "--order",
                                       "forward", "--policy", "fa3"]))
    assert isinstance(s, AuditSettings)
    assert s.fail_on == (("rel-mse", 0.1), ("rel-mse", 0.05), ("collapse", None))
    assert s.bounds == {"rel-mse": 0.05} and s.rel_mse_bound == 0.05
    assert s.ksink == "auto" and not s.combos and s.measure
    assert s.declared and s.policy.order == "forward" and [p.name for p in s.policies] == ["fa3"]
    assert s.kernel_fn is None and s.kernel_policy is None and s.input_dtype is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.combos = True


def test_the_cli_and_the_api_share_the_checks_each_naming_its_own_words():
    fn = make_kernel(**KERNELS["reverse-s256-multiply"][0])
    q = torch.randn(1, 1, 64, 16, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"^allow=1\.5 is not allowed"):
        pcast.audit_kernel(fn, q, q, q, allow=1.5)
    with pytest.raises(ValueError, match=r"^--kernel-allow=1\.5 is not allowed"):
        audit_settings(kernel_fn=fn, kernel_allow=1.5)
    # with a kernel, mismatch is gated unless --report-mismatch; the API's declared policy is resolved once
    s = audit_settings(api=True, kernel_fn=fn, kernel_policy="fa3")
    assert s.fail_on == (("mismatch", None),) and s.kernel_policy.name == "fa3"
    assert audit_settings(kernel_fn=fn, report_mismatch=True).fail_on == ()
    with pytest.raises(TypeError, match="unknown keywords"):
        audit_settings(kernel_allowance=0.1)
