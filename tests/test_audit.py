"""pcast-audit: a kernel engineer's own tensors through their policy and the four combinations."""

import csv

import pytest
import torch
from safetensors.torch import save_file

from kernels.cli.audit import audit, main
from kernels.sinks import make_inputs


@pytest.fixture()
def sink_file(tmp_path):
    q, k, v = make_inputs(3, n=256, d=32, ksink=1, delta=9.0, sink_v_scale=0.0)
    p = tmp_path / "qkv.safetensors"
    # [N, d] layout, bfloat16: the loader must lift both
    save_file({"q": q[0, 0].bfloat16(), "k": k[0, 0].bfloat16(), "v": v[0, 0].bfloat16()}, str(p))
    return p


def test_audit_ranks_the_policies_as_the_physics_says(sink_file, tmp_path, capsys):
    out = tmp_path / "audit.csv"
    assert main([str(sink_file), "--order", "forward", "--scale", "448", "--csv", str(out)]) == 0
    rows = {r["policy"]: r for r in csv.DictReader(open(out))}
    assert list(rows) == ["yours", "forward S=1", "forward S=256", "reverse S=1", "reverse S=256"]
    assert rows["yours"]["order"] == "forward" and float(rows["yours"]["scale"]) == 448.0
    # Δ = 9 is far past Δc(S=1) = 6.93: forward S=1 collapses, reverse S=256 keeps almost everything
    assert float(rows["forward S=1"]["underflow_frac"]) > 0.9
    assert float(rows["reverse S=256"]["underflow_frac"]) < 0.05
    assert float(rows["forward S=1"]["mse"]) > 10 * float(rows["reverse S=256"]["mse"])
    assert "forward S=1" in capsys.readouterr().out


def test_audit_no_rounding_matches_the_reference():
    q, k, v = make_inputs(4, n=128, d=16, ksink=1, delta=6.0)
    rows = audit(q, k, v, fmt=None, backend="emulator")
    assert rows[0]["fmt"] == "none" and rows[0]["mse"] < 1e-12 and rows[0]["underflow"] == 0


@pytest.mark.parametrize("content,msg", [
    (None, "does not exist"),
    ({"q": torch.ones(4, 16), "k": torch.ones(4, 16)}, "lacks tensor\\(s\\) v"),
    ({"q": torch.ones(4, 16, dtype=torch.int32), "k": torch.ones(4, 16), "v": torch.ones(4, 16)},
     "'q' must be floating point"),
    ({"q": torch.ones(16), "k": torch.ones(16), "v": torch.ones(16)}, "must have 2, 3 or 4 dims"),
])
def test_bad_inputs_name_the_problem(tmp_path, capsys, content, msg):
    p = tmp_path / "x.safetensors"
    if content is not None:
        save_file(content, str(p))
    assert main([str(p)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pcast-audit: error:")
    import re
    assert re.search(msg, err)


def test_bad_policy_names_the_argument(sink_file, capsys):
    assert main([str(sink_file), "--order", "sideways"]) == 2
    assert "order='sideways'" in capsys.readouterr().err
