"""pcast-audit --kernel and pcast.audit_kernel: a kernel written outside the package (tests/support/own_kernels.py)
measured beside the prediction of its declared policy; a true declaration passes, a false one is a mismatch."""

import json

import pytest
import torch
from own_kernels import KERNELS, make_kernel
from safetensors.torch import save_file

from pcast.cli.audit import main
from pcast.models.sinks import make_inputs

FWD = "forward-offset8-lazy8"
OPTS, DECLARED = KERNELS[FWD]


@pytest.fixture(scope="module")
def kernel_file(tmp_path_factory):
    """A bf16 file (two heads, d = 128, a sink of Δ = 6 and a plain head) and a module holding the kernel."""
    root = tmp_path_factory.mktemp("kernel")
    heads = [make_inputs(n=256, d=128, seed=s, ksink=1, delta=dl) for s, dl in ((1, 6.0), (2, 0.0))]
    qkv = [torch.cat([h[i] for h in heads], dim=1).bfloat16() for i in range(3)]
    path = root / "qkv.safetensors"
    save_file(dict(zip("qkv", qkv)), str(path))
    mod = root / "mykernel.py"
    mod.write_text(f"from own_kernels import make_kernel\nfn = make_kernel(**{OPTS!r})\n")
    return path, mod, qkv


@pytest.fixture(scope="module")
def schema():
    from pcast.audit.report import SCHEMA_PATH

    with open(SCHEMA_PATH) as fh:
        return json.load(fh)


def _flags(policy: dict) -> list:
    out = []
    for key, value in policy.items():
        out += ["--" + key.replace("_", "-"), str(value)]
    return out


def test_a_true_declaration_passes_and_a_false_one_exits_1(kernel_file, schema, tmp_path, capsys):
    import jsonschema

    path, mod, _ = kernel_file
    common = [str(path), "--kernel", f"{mod}:fn", "--only", "yours", "--backend", "emulator", "--quiet",
              "--fail-on", "mismatch"]
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    assert main([*common, *_flags(DECLARED), "--json", str(good)]) == 0
    out = capsys.readouterr().out
    assert "2 of 2 heads agree" in out and "the kernel implements the declared policy" in out
    wrong = {**DECLARED, "order": "reverse"}
    assert main([*common, *_flags(wrong), "--json", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "the kernel does not implement the declared policy: measured" in out and "mismatch: yours" in out
    for p, agrees in ((good, True), (bad, False)):
        doc = json.load(open(p))
        jsonschema.validate(doc, schema)
        heads = doc["kernel"]["heads"]
        assert [h["agrees"] for h in heads] == [agrees, agrees]
        assert all(h["measured_mse"] > 0 and h["predicted_mse"] > 0 for h in heads)
    # the true declaration's prediction is the kernel's own error; the false one's is not
    g, b = (json.load(open(p))["kernel"]["heads"][0] for p in (good, bad))
    assert g["measured_mse"] == pytest.approx(g["predicted_mse"], rel=1e-3)
    assert b["measured_mse"] == pytest.approx(g["measured_mse"], rel=1e-6)
    assert b["predicted_mse"] != pytest.approx(b["measured_mse"], rel=1e-2)


def test_audit_kernel_api_takes_bf16_and_named_or_dict_policies(kernel_file):
    import pcast

    _, _, (q, k, v) = kernel_file
    fn = make_kernel(**KERNELS["reverse-s256-multiply"][0])
    for policy in ("fa3", {"order": "forward", "scale": 1.0, "block_n": 128}):
        got = pcast.audit_kernel(fn, q, k, v, policy=policy)
        assert got.policy_source == "declared" and not any(h.agrees for h in got.heads), policy
    right = pcast.audit_kernel(fn, q, k, v, policy=KERNELS["reverse-s256-multiply"][1])
    assert all(h.agrees for h in right.heads) and right.heads[0].rows == 256
    with pytest.raises(ValueError, match="policy"):
        pcast.audit_kernel(fn, q, k, v, policy=3)


def test_mismatch_needs_a_kernel_and_a_bad_kernel_spec_is_named(kernel_file, capsys):
    path, mod, _ = kernel_file
    assert main([str(path), "--fail-on", "mismatch"]) == 2
    assert "--fail-on mismatch needs --kernel" in capsys.readouterr().err
    assert main([str(path), "--kernel", f"{mod}:nope"]) == 2
    assert "has no callable 'nope'" in capsys.readouterr().err
    assert main([str(path), "--kernel", "nocolon"]) == 2
    assert "--kernel='nocolon' is not allowed" in capsys.readouterr().err


def test_without_a_declaration_the_fingerprinted_policy_is_the_prediction(kernel_file, capsys):
    path, mod, _ = kernel_file
    assert main([str(path), "--kernel", f"{mod}:fn", "--only", "yours", "--backend", "emulator", "--quiet",
                 "--fail-on", "mismatch"]) == 0
    out = capsys.readouterr().out
    assert "kernel vs the fingerprinted policy" in out and "2 of 2 heads agree" in out
    line = out.split("kernel vs the fingerprinted policy")[1].splitlines()[0]
    assert "order='forward'" in line and "scale=256.0" in line and "rescale_threshold=8.0" in line, line
