"""With --kernel the gate judges the kernel it ran: a false declaration never passes. The black box here is an
independent float64 loop (not the package's code): forward KV-block order, S = 1, E4M3 P rounded in numpy."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from pcast.cli.audit import main
from pcast.models.sinks import make_inputs

BLOCK = 64


def _e4m3(x: np.ndarray) -> np.ndarray:
    """x >= 0 rounded to the nearest E4M3 value (ties to even), saturating at 448: 3 mantissa bits, normals from
    2^-6, subnormals spaced 2^-9."""
    e = np.floor(np.log2(np.maximum(x, 2.0 ** -6)))
    step = 2.0 ** (e - 3)
    return np.minimum(np.round(x / step) * step, 448.0)


def forward_s1(q, k, v, sink_logit=None):
    """Online softmax over KV blocks of 64 in forward order, in float64: P = exp(s - m) cast to E4M3 (S = 1)
    before P·V, the row sum of the unrounded P."""
    qn, kn, vn = (t.double().numpy() for t in (q, k, v))
    B, H, Nq, d = qn.shape
    group = H // kn.shape[1]
    out = np.zeros((B, H, Nq, d))
    for b in range(B):
        for h in range(H):
            s = qn[b, h] @ kn[b, h // group].T / np.sqrt(d)
            m = np.full(Nq, -np.inf)
            acc, l = np.zeros((Nq, d)), np.zeros(Nq)
            for j in range(0, s.shape[1], BLOCK):
                sb = s[:, j:j + BLOCK]
                m_new = np.maximum(m, sb.max(1))
                alpha = np.exp(m - m_new)
                p = np.exp(sb - m_new[:, None])
                acc = acc * alpha[:, None] + _e4m3(p) @ vn[b, h // group, j:j + BLOCK]
                l = l * alpha + p.sum(1)
                m = m_new
            out[b, h] = acc / l[:, None]
    return torch.from_numpy(out).to(q.dtype)


def test_the_rounding_is_e4m3():
    got = _e4m3(np.array([0.0, 2.0 ** -10, 1.5 * 2.0 ** -10, 3 * 2.0 ** -10, 1.0625, 1.1875, 500.0]))
    assert got.tolist() == [0.0, 0.0, 2.0 ** -9, 2 * 2.0 ** -9, 1.0, 1.25, 448.0]


@pytest.fixture(scope="module")
def sink_file(tmp_path_factory):
    """Two heads, d = 64, N = 256, float32: a clean sink at Δ = 14 (head 0) and one at Δ = 3 (head 1)."""
    heads = [make_inputs(n=256, d=64, seed=s, ksink=1, delta=dl, sink_v_scale=0.0) for s, dl in ((5, 14.0), (6, 3.0))]
    path = tmp_path_factory.mktemp("kgate") / "sink.safetensors"
    save_file(dict(zip("qkv", (torch.cat([h[i] for h in heads], dim=1) for i in range(3)))), str(path))
    return path


def _audit(path, *flags, json_path=None):
    argv = [str(path), "--kernel", f"{__file__}:forward_s1", "--backend", "emulator", "--block-n", str(BLOCK),
            *flags]
    return main(argv + (["--json", str(json_path)] if json_path else []))


def test_a_false_declaration_fails_on_mismatch_and_the_true_one_on_collapse(sink_file, tmp_path, capsys):
    import jsonschema

    from pcast.audit.report import SCHEMA_PATH

    schema = json.load(open(SCHEMA_PATH))
    false_json, true_json = tmp_path / "false.json", tmp_path / "true.json"
    assert _audit(sink_file, "--order", "reverse", "--scale", "256", "--fail-on", "collapse",
                  json_path=false_json) == 1
    out = capsys.readouterr().out
    assert "mismatch: yours (the kernel): layer -, batch 0, head 0: the predicted policy does not describe the " \
           "kernel: measured MSE" in out and "predicted MSE" in out
    assert "FAIL" in out and "not judged: collapse" in out
    doc = json.load(open(false_json))
    jsonschema.validate(doc, schema)
    assert doc["exit_code"] == 1 and doc["kernel"]["mismatch"] == "gated"
    assert {f["condition"] for f in doc["failures"]} == {"mismatch"}
    # the true declaration: the kernel agrees, so the prediction's collapse stands on the Δ = 14 head
    assert _audit(sink_file, "--order", "forward", "--scale", "1", "--fail-on", "collapse", json_path=true_json) == 1
    out = capsys.readouterr().out
    assert "collapse: yours (the kernel): layer -, batch 0, head 0:" in out and "mismatch: yours" not in out
    doc = json.load(open(true_json))
    jsonschema.validate(doc, schema)
    assert [(f["condition"], f["head"]) for f in doc["failures"]] == [("collapse", 0)]
    assert all(h["agrees"] for h in doc["kernel"]["heads"])


def test_report_mismatch_reports_without_gating_and_is_recorded(sink_file, tmp_path, capsys):
    js = tmp_path / "r.json"
    assert _audit(sink_file, "--order", "reverse", "--scale", "256", "--fail-on", "collapse", "--report-mismatch",
                  json_path=js) == 0
    out = capsys.readouterr().out
    assert "is reported, not gated (--report-mismatch)" in out and "not judged: collapse on 2 head(s)" in out
    doc = json.load(open(js))
    assert doc["kernel"]["mismatch"] == "reported" and doc["failures"] == []
    assert {u["condition"] for u in doc["not_judged"]} == {"collapse"}
    # measured conditions still apply to the kernel's own output
    assert _audit(sink_file, "--order", "reverse", "--scale", "256", "--report-mismatch", "--fail-on",
                  "ratio>1.5") == 1
    assert "ratio>1.5: yours (the kernel): layer -, batch 0, head 0" in capsys.readouterr().out
    assert _audit(sink_file, "--fail-on", "mismatch", "--report-mismatch") == 2
    assert "--report-mismatch is not allowed with --fail-on mismatch" in capsys.readouterr().err


def test_the_help_names_the_flag(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "--report-mismatch" in capsys.readouterr().out


def test_nothing_predicts_a_kernel_outside_the_model_and_measured_conditions_still_apply():
    """A KernelAudit with no policy (the fingerprint found the kernel outside the model): collapse and
    saturation are not judged, with the reason; ratio and rel-mse read the kernel's measured MSE."""
    from pcast.audit.kernel import KernelAudit, KernelHead
    from pcast.audit.report import gate

    why = "the fingerprint finds the kernel outside the model: no option of the contract reproduces these rows"
    kernel = KernelAudit(None, "fingerprinted", [KernelHead(None, 0, 0, 4e-6, 0.5, None, None, None, 64, None),
                                                 KernelHead(None, 0, 1, 1e-6, 0.01, None, None, None, 64, None)],
                         outside=why)
    combos = [{"policy": "reverse S=256", "layer": None, "batch": 0, "head": h, "mse": 1e-6} for h in (0, 1)]
    hits, unjudged = gate(combos, [("collapse", None), ("saturation", None), ("ratio", 2.0), ("rel-mse", 0.1),
                                   ("mismatch", None)], gated=["yours"], kernel=kernel)
    assert sorted((h["condition"], h["head"]) for h in hits) == [("ratio>2", 0), ("rel-mse>0.1", 0)]
    assert all(h["policy"] == "kernel" and h["kernel"] for h in hits)
    assert hits[0]["value"] in (4.0, 0.5)
    assert sorted((u["condition"], u["head"]) for u in unjudged) == [("collapse", 0), ("collapse", 1),
                                                                     ("saturation", 0), ("saturation", 1)]
    assert all(u["reason"] == why for u in unjudged)
