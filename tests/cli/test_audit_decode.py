"""pcast-audit with decode-time attention: the flags of the split options, the causal alignment of a decode
row, and the decode presets of pcast.policies."""

import csv

import pytest
import torch
from safetensors.torch import save_file

import pcast
from pcast.policies import DECODE_PRESETS

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _decode_file(tmp_path, nk=512, d=32, seed=0):
    """One decode row (Nq = 1) over ``nk`` keys, key 0 a sink 10 nats above the rest."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 1, 1, d, generator=g)
    k = torch.randn(1, 1, nk, d, generator=g) * 0.5
    v = torch.randn(1, 1, nk, d, generator=g)
    k[0, 0, 0] = q[0, 0, 0] / q[0, 0, 0].norm() ** 2 * 10.0 * d ** 0.5
    p = tmp_path / "decode.safetensors"
    save_file({"q": q, "k": k, "v": v}, str(p))
    return p, (q, k, v)


def _rows(path):
    return {r["policy"]: r for r in csv.DictReader(open(path))}


def test_split_flags_reach_the_contract(tmp_path):
    """--num-splits, --split-layout and --p-normalize give the MSE of pcast.attention with those options."""
    from pcast.cli.audit import main

    path, (q, k, v) = _decode_file(tmp_path)
    out = tmp_path / "a.csv"
    argv = [str(path), "--only", "yours", "--backend", "emulator", "--order", "forward", "--scale", "1",
            "--block-n", "64", "--num-splits", "4", "--split-layout", "interleaved", "--p-normalize", "partition",
            "--csv", str(out)]
    assert main(argv) == 0
    row = _rows(out)["yours"]
    assert (row["num_splits"], row["split_layout"], row["p_normalize"]) == ("4", "interleaved", "partition")
    ref = pcast.attention(q, k, v, backend="reference").out.double()
    kw = dict(order="forward", scale=1.0, block_n=64, ksink=1, backend="emulator")
    split = pcast.attention(q, k, v, num_splits=4, split_layout="interleaved", p_normalize="partition", **kw)
    single = pcast.attention(q, k, v, **kw)
    mse = float(((split.out.double() - ref) ** 2).mean())
    assert float(row["mse"]) == pytest.approx(mse, rel=1e-12)
    assert mse != pytest.approx(float(((single.out.double() - ref) ** 2).mean()), rel=1e-3)


def test_bad_split_flag_names_the_flag(tmp_path, capsys):
    from pcast.cli.audit import main

    path, _ = _decode_file(tmp_path, nk=128)
    assert main([str(path), "--num-splits", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pcast-audit: error:") and "--num-splits=0 is not allowed" in err
    assert main([str(path), "--split-layout", "diagonal"]) == 2
    assert "--split-layout='diagonal' is not allowed; allowed: contiguous, interleaved" in capsys.readouterr().err


def test_decode_causal_needs_an_alignment_and_bottom_right_sees_every_key(tmp_path, capsys):
    """Nq = 1 < Nk: --causal alone is refused naming --causal-align; top-left shows the row key 0 only (one
    visible key, the sink: no non-sink term), bottom-right every key (the non-causal row)."""
    from pcast.cli.audit import main

    path, _ = _decode_file(tmp_path, nk=256)
    base = [str(path), "--only", "yours", "--backend", "emulator", "--order", "forward", "--scale", "1"]
    assert main(base + ["--causal"]) == 2
    assert "needs --causal-align; allowed: top_left or bottom_right" in capsys.readouterr().err
    got = {}
    for name, extra in {"top": ["--causal", "--causal-align", "top_left"],
                        "bottom": ["--causal", "--causal-align", "bottom_right"], "none": []}.items():
        out = tmp_path / f"{name}.csv"
        assert main(base + extra + ["--csv", str(out)]) == 0
        got[name] = _rows(out)["yours"]
    assert int(got["top"]["terms"]) == 0 and float(got["top"]["mse"]) == 0.0
    assert int(got["bottom"]["terms"]) == 255
    assert got["bottom"]["mse"] == got["none"]["mse"] and got["bottom"]["underflow"] == got["none"]["underflow"]
    assert "causal=True (bottom_right)" in capsys.readouterr().out


def test_every_decode_preset_runs(tmp_path):
    """--policy NAME for each decode preset: one row each, carrying the preset's split options."""
    from pcast.cli.audit import main
    from pcast.policies import POLICIES

    path, _ = _decode_file(tmp_path, nk=1024)
    out = tmp_path / "p.csv"
    argv = [str(path), "--only", "yours", "--backend", "emulator", "--csv", str(out)]
    for name in DECODE_PRESETS:
        argv += ["--policy", name]
    assert main(argv) == 0
    rows = _rows(out)
    assert set(DECODE_PRESETS) <= set(rows)
    assert {"fa3-decode", "xqa-sm90", "aiter-pa-ragged", "vllm-paged-v2", "vllm-triton-decode"} <= set(DECODE_PRESETS)
    for name in DECODE_PRESETS:
        pol = POLICIES[name]
        r = rows[name]
        assert (int(r["num_splits"]), r["split_layout"], r["p_normalize"]) == (pol.num_splits, pol.split_layout,
                                                                            pol.p_normalize)
        assert int(r["terms"]) == 1023 and float(r["mse"]) >= 0.0
