"""pcast-audit's --pv-arith and --pv-promote (pcast.audit_kernel's pv_arith and pv_promote): the tensor core's P·V
arithmetic reaches your policy's run and the kernel's prediction, and nothing else; a bad value is refused, naming
its flag, before any work."""

import json
import math
import re

import pytest
import torch
from safetensors.torch import save_file

import pcast
from pcast.cli.audit import _parser, main

# your policy: reverse S = 256 (the audit's defaults) with V cast to E4M3, one head, N = 256 (4 KV blocks of 64)
YOURS = dict(order="reverse", scale=256.0, fmt="e4m3fn", v_fmt="e4m3fn", block_n=64)
PV = ["--v-fmt", "e4m3fn", "--pv-arith", "wgmma-sm90", "--pv-promote", "1"]


def _tensors(n=256, d=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(1, 1, n, d, generator=g) for _ in range(2))
    k[..., 0, :] *= 4.0  # a strong first key: P spans several binades, so the accumulation's truncation shows
    v = torch.randn(1, 1, n, d, generator=g)
    return q, k, v


def _mse64(out, q, k, v) -> float:
    """The MSE of ``out`` against softmax(q·kᵀ/√d)·v in float64, written here."""
    q, k, v = (t.double() for t in (q, k, v))
    p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
    return float(((out.double() - p @ v) ** 2).mean())


@pytest.fixture()
def qkv_file(tmp_path):
    q, k, v = _tensors()
    path = tmp_path / "qkv.safetensors"
    save_file({"q": q.contiguous(), "k": k.contiguous(), "v": v.contiguous()}, str(path))
    return path, (q, k, v)


def _audit(path, tmp_path, *flags, code=0) -> dict:
    out = tmp_path / f"audit{len(list(tmp_path.glob('audit*.json')))}.json"
    assert main([str(path), "--only", "yours", "--quiet", "--json", str(out), *flags]) == code
    return json.loads(out.read_text())


def test_the_flags_reach_your_run_and_only_it(qkv_file, tmp_path, capsys):
    path, (q, k, v) = qkv_file
    fp32 = _audit(path, tmp_path, "--v-fmt", "e4m3fn", "--policy", "fa3")
    tc = _audit(path, tmp_path, *PV, "--policy", "fa3")
    rows32, rows = ({r["policy"]: r for r in d["rows"]} for d in (fp32, tc))
    direct = {n: _mse64(pcast.attention(q, k, v, **YOURS, backend="emulator", pv_arith=a, pv_promote=p).out, q, k, v)
              for n, a, p in (("fp32", "fp32", 0), ("tc", "wgmma-sm90", 1))}
    # your run is pcast.attention with those options, measured against float64 softmax·V
    assert rows["yours"]["mse"] == pytest.approx(direct["tc"], rel=1e-9)
    assert rows32["yours"]["mse"] == pytest.approx(direct["fp32"], rel=1e-9)
    assert abs(direct["tc"] - direct["fp32"]) > 1e-6 * direct["fp32"]  # the arithmetic shows in the MSE
    assert (rows["yours"]["pv_arith"], rows["yours"]["pv_promote"], rows["yours"]["backend"]) == \
        ("wgmma-sm90", 1, "emulator")
    # a named policy stays in float32, its numbers unchanged
    assert (rows["fa3"]["pv_arith"], rows["fa3"]["pv_promote"]) == ("fp32", 0)
    assert rows["fa3"]["mse"] == rows32["fa3"]["mse"]
    # the V-cast floor is the same call with fmt=None, so float32 P·V: the same with and without the flags
    assert rows["yours"]["floor_mse"] == rows32["yours"]["floor_mse"]
    assert "P·V wgmma-sm90 (promoted every 1 KV block, emulator) for yours" in tc["header"]
    assert "P·V" not in fp32["header"]


def test_the_combinations_stay_in_float32(qkv_file, tmp_path):
    path, _ = qkv_file
    out = tmp_path / "all.json"
    assert main([str(path), "--quiet", "--json", str(out), *PV]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["policy"], r["pv_arith"], r["pv_promote"]) for r in rows] == \
        [("yours", "wgmma-sm90", 1)] + [(r["policy"], "fp32", 0) for r in rows[1:]]
    assert len(rows) == 5


@pytest.mark.parametrize("argv,msg", [
    (["--pv-arith", "wgmma"], r"--pv-arith='wgmma' is not allowed; allowed: fp32, mma-sm89, wgmma-sm90, tcgen05-sm100"),
    (["--pv-promote", "1"], r"--pv-promote=1 is not allowed without --pv-arith"),
    (["--v-fmt", "e4m3fn", "--pv-arith", "fp32", "--pv-promote", "4"], r"--pv-promote=4 is not allowed without"),
    ([*PV[:4], "--pv-promote", "-1"], r"--pv-promote='-1' is not allowed; allowed: an int >= 0"),
    ([*PV[:4], "--pv-promote", "two"], r"--pv-promote='two' is not allowed; allowed: an int >= 0"),
    (["--pv-arith", "wgmma-sm90"], r"--pv-arith='wgmma-sm90' is not allowed with your policy's --v-fmt none .*"
                                   r"allowed: --v-fmt e4m3fn or e5m2"),
    ([*PV, "--fmt", "bf16"], r"--pv-arith='wgmma-sm90' is not allowed with your policy's --fmt bf16"),
    ([*PV, "--block-n", "48"], r"--pv-arith='wgmma-sm90' is not allowed with your policy's --block-n 48; "
                               r"allowed: a multiple of 32"),
    ([*PV, "--num-splits", "2"], r"--pv-arith='wgmma-sm90' is not allowed with your policy's split decode"),
    ([*PV, "--backend", "triton"], r"--pv-arith='wgmma-sm90' is not allowed with --backend triton"),
])
def test_bad_values_are_refused_naming_the_flag_before_any_work(qkv_file, tmp_path, capsys, no_work, argv, msg):
    path, _ = qkv_file
    out = tmp_path / "never.json"
    assert main([str(path), "--json", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pcast-audit: error:") and err.count("\n") == 1 and re.search(msg, err), err
    assert not out.exists()


def test_the_kernels_prediction_takes_the_arithmetic(tmp_path):
    q, k, v = _tensors(n=128)

    def kernel(q, k, v):  # a kernel that does its P·V on Hopper's tensor core, each tile promoted
        return pcast.attention(q, k, v, **YOURS, backend="emulator", pv_arith="wgmma-sm90", pv_promote=1).out

    got = pcast.audit_kernel(kernel, q, k, v, policy=dict(YOURS), pv_arith="wgmma-sm90", pv_promote=1)
    head, = got.heads
    assert head.agrees and head.rows_outside == 0
    assert head.predicted_mse == head.measured_mse == pytest.approx(_mse64(kernel(q, k, v), q, k, v), rel=1e-9)
    doc = got.document()
    assert (doc["options"]["pv_arith"], doc["options"]["pv_promote"]) == ("wgmma-sm90", 1)
    assert "pv_arith='wgmma-sm90', pv_promote=1" in str(got)
    plain = pcast.audit_kernel(kernel, q, k, v, policy=dict(YOURS))
    assert "pv_arith" not in plain.document()["options"]
    assert plain.heads[0].predicted_mse != head.predicted_mse


def test_the_command_lines_kernel_prediction_takes_the_arithmetic(qkv_file, tmp_path):
    path, (q, k, v) = qkv_file
    fn = tmp_path / "tc_kernel.py"
    fn.write_text("import pcast\n\n\ndef tc(q, k, v):\n    return pcast.attention(q, k, v, order='reverse', "
                  "scale=256.0, v_fmt='e4m3fn', block_n=64, backend='emulator', pv_arith='wgmma-sm90', "
                  "pv_promote=1).out\n")
    tc = _audit(path, tmp_path, *PV, "--kernel", f"{fn}:tc")
    # without the flags the prediction is in float32, and the tensor core's kernel is told from it: exit 1
    fp32 = _audit(path, tmp_path, "--v-fmt", "e4m3fn", "--kernel", f"{fn}:tc", code=1)
    (head,), (head32,) = tc["kernel"]["heads"], fp32["kernel"]["heads"]
    assert head32["agrees"] is False and head32["rows_outside"] > 0.02 * head32["rows"]
    assert head["agrees"] and head["predicted_mse"] == head["measured_mse"]
    assert head["predicted_mse"] == pytest.approx(_mse64(pcast.attention(
        q, k, v, **YOURS, backend="emulator", pv_arith="wgmma-sm90", pv_promote=1).out, q, k, v), rel=1e-9)
    assert head32["predicted_mse"] != head["predicted_mse"]
    assert (tc["kernel"]["options"]["pv_arith"], tc["kernel"]["options"]["pv_promote"]) == ("wgmma-sm90", 1)
    assert "pv_arith" not in fp32["kernel"]["options"]
    assert "for yours and the kernel's prediction" in tc["header"]


def test_the_api_refuses_them_for_a_fingerprinted_or_unfit_kernel_policy(monkeypatch):
    import pcast.audit.kernel

    q, k, v = _tensors(n=64)
    monkeypatch.setattr(pcast.audit.kernel, "fingerprint", lambda *a, **kw: pytest.fail("fingerprinted"))
    with pytest.raises(ValueError, match=r"^pv_arith='wgmma-sm90' is not allowed with a fingerprinted kernel"):
        pcast.audit_kernel(lambda q, k, v: q, q, k, v, pv_arith="wgmma-sm90")
    with pytest.raises(ValueError, match=r"^pv_arith='wgmma-sm90' is not allowed with the kernel's declared "
                                         r"policy's v_fmt none"):
        pcast.audit_kernel(lambda q, k, v: q, q, k, v, policy="fa3", pv_arith="wgmma-sm90")
    with pytest.raises(ValueError, match=r"^pv_promote=True is not allowed"):
        pcast.audit_kernel(lambda q, k, v: q, q, k, v, policy=dict(YOURS), pv_arith="wgmma-sm90", pv_promote=True)


def test_the_flags_are_documented_as_the_parser_states_them():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "audit.md").read_text(encoding="utf-8")
    helps = {a.option_strings[0]: a.help for a in _parser()._actions if a.option_strings}
    for name in ("--pv-arith", "--pv-promote"):
        row = re.search(rf"^\| `{name}` \| (.*?) \| (.*?) \|$", text, re.M)
        assert row is not None, name
        assert helps[name] == f"{row.group(1)} (default: {row.group(2)})", name
