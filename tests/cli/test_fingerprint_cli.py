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

    from own_kernels import make_kernel

    fa3_s128 = make_kernel(order="reverse", scale=128.0, scale_mode="exp2_offset", block_n=160)
    no_sinks = make_kernel(order="reverse", scale=256.0, scale_mode="exp2_offset", block_n=160, sinks="none")

    def only_bf16_d128(q, k, v, *, sink_logit=None):
        if q.dtype != torch.bfloat16 or q.shape[-1] != 128:
            raise ValueError("this kernel takes bf16 at d = 128 only")
        return fa3_s128(q, k, v, sink_logit=sink_logit)
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


def test_a_kernel_at_its_own_head_dim_and_dtype_near_fa3_with_its_worst_rows(boxes, tmp_path, capsys):
    path = tmp_path / "fp.json"
    assert main([f"{boxes}:only_bf16_d128", "--d", "128", "--dtype", "bf16", "--small", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "policy: None" in out and "near: fa3? 1 of 114 rows outside (mass-512: 1): scale looks like 128" in out
    assert "probes: d = 128, bfloat16" in out and "worst: mass-512 row" in out
    data = json.loads(path.read_text())
    assert data["near"]["candidate"] == "fa3" and data["near"]["explains"] == {"scale": {"kernel": 128.0,
                                                                                          "candidate": 256.0}}
    assert data["worst"]["fa3"]["probe"] == "mass-512" and data["shape"]["d"] == 128
    assert data["shape"]["dtype"] == "bfloat16" and data["learned_sinks"]["supported"] is True
    assert data["params"]["scale"]["value"] == 128.0
    assert main([f"{boxes}:only_bf16_d128", "--no-params", "--small"]) == 2  # at d = 16, float32 it raises
    assert "this kernel takes bf16 at d = 128 only" in capsys.readouterr().err


def test_a_kernel_without_learned_sinks_is_named_with_sinks_not_supported(boxes, tmp_path, capsys):
    path = tmp_path / "fp.json"
    assert main([f"{boxes}:no_sinks", "--d", "128", "--dtype", "bf16", "--small", "--no-params", "--json",
                 str(path)]) == 0
    assert "learned sinks: not supported (the callable raised with sink_logit" in capsys.readouterr().out
    data = json.loads(path.read_text())
    assert data["policy"] == "fa3" and data["learned_sinks"]["supported"] is False


@pytest.mark.parametrize("argv, words", [(["--d", "100"], "d=100 is not allowed"),
                                         (["--dtype", "int8"], "dtype='int8' is not allowed")])
def test_a_bad_layout_exits_2(boxes, capsys, argv, words):
    assert main([f"{boxes}:fa3", "--no-params", *argv]) == 2
    assert words in capsys.readouterr().err
