"""pcast-fingerprint: a preset found from a module:function, and one-line errors for bad targets and bad
callables."""

import json
import sys
import textwrap

import pytest

from pcast.cli.fingerprint import main

BOXES = textwrap.dedent("""
    import torch
    import pcast

    def fa3(q, k, v, *, sink_logit=None):
        return pcast.attention(q, k, v, policy="fa3", sink_logit=sink_logit, backend="emulator").out

    def raises(q, k, v, *, sink_logit=None):
        raise RuntimeError("unsupported head dim")

    def half_width(q, k, v, *, sink_logit=None):
        return torch.zeros(q.shape[:-1] + (q.shape[-1] // 2,))

    def integers(q, k, v, *, sink_logit=None):
        return torch.zeros(q.shape, dtype=torch.int64)

    NOT_CALLABLE = 3
""")


@pytest.fixture
def boxes(tmp_path, monkeypatch):
    (tmp_path / "probe_boxes.py").write_text(BOXES)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "probe_boxes"
    sys.modules.pop("probe_boxes", None)


def test_a_preset_is_found_and_written_as_json(boxes, tmp_path, capsys):
    path = tmp_path / "fp.json"
    assert main([f"{boxes}:fa3", "--candidates", "fa3,fa4,reverse-s256", "--no-params", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "policy: 'fa3'" in out and "ex2.approx" in out
    data = json.loads(path.read_text())
    assert data["policy"] == "fa3" and data["distance"]["fa3"] == 0.0 and data["distance"]["fa4"] > 0.05


@pytest.mark.parametrize("target, words", [
    ("no_colon", "module:function"),
    ("no_such_module_xyz:f", "cannot be imported"),
    ("{m}:missing", "has no attribute"),
    ("{m}:NOT_CALLABLE", "not callable"),
    ("{m}:raises", "raised on probe 'mass-2048': RuntimeError: unsupported head dim"),
    ("{m}:half_width", "returned shape (1, 1, 12, 8)"),
    ("{m}:integers", "returned dtype torch.int64"),
])
def test_errors_are_one_line_and_exit_2(boxes, capsys, target, words):
    assert main([target.format(m=boxes), "--no-params"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pcast-fingerprint: error:") and words in err and "\n" not in err


def test_a_bad_device_is_refused(boxes, capsys):
    assert main([f"{boxes}:fa3", "--device", "tpu"]) == 2
    assert "--device='tpu' is not allowed" in capsys.readouterr().err
