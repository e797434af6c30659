"""The audit's verdicts mean what they say: the collapse gate reads the count and the lost mass together, the
pooled lines count heads so they never contradict a head's FAIL, and the gates on lost mass and on the ratio to
the best of the four combinations fail exactly the heads past their bounds."""

import json

import pytest
import torch
from safetensors.torch import save_file

from pcast.cli.audit import main
from pcast.models.sinks import make_inputs

EMU = ["--backend", "emulator", "--quiet"]
FWD_S1 = ["--order", "forward", "--scale", "1"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("verdicts")
    # a strong sink over widely spread scores: most non-sink P round to zero, but they carry little mass
    spread = root / "spread.safetensors"
    save_file(dict(zip("qkv", make_inputs(seed=5, n=256, d=32, ksink=1, delta=9.0, sigma=4.0))), str(spread))
    # two heads: a collapsing one (Δ = 9, zero-value sink) and a clean one; pooled, the count is below half
    heads = [make_inputs(seed=s, n=128, d=32, ksink=1, delta=dl, sink_v_scale=0.0) for s, dl in ((1, 9.0), (2, 0.0))]
    two = root / "two.safetensors"
    save_file(dict(zip("qkv", (torch.cat([h[i] for h in heads], dim=1) for i in range(3)))), str(two))
    return spread, two


def _doc(path):
    return json.load(open(path))


def test_many_tiny_p_rounding_away_is_no_collapse(files, tmp_path, capsys):
    spread, _ = files
    out = tmp_path / "a.json"
    assert main([str(spread), *FWD_S1, *EMU, "--fail-on", "collapse", "--json", str(out)]) == 0
    head = next(h for h in _doc(out)["heads"] if h["policy"] == "yours")
    # most of the non-sink P round to zero, yet they carry under 1% of the non-sink mass, and the error is tiny
    assert head["underflow_frac"] > 0.5 and head["mass_lost_share"] < 0.01 and head["rel_mse"] < 1e-3
    assert head["collapses"] is False
    # the count alone (any lost mass counts) fails the same head: the gate reads both, as its words say
    assert main([str(spread), *FWD_S1, *EMU, "--fail-on", "collapse", "--collapse-mass", "0"]) == 1
    text = capsys.readouterr().out
    assert "COLLAPSES: 83.88% of non-sink P round to zero (threshold 50%), carrying 0.0078" in text


def test_a_pooled_line_never_contradicts_a_head_that_fails(files, capsys):
    _, two = files
    assert main([str(two), *FWD_S1, "--backend", "emulator", "--only", "yours", "--fail-on", "collapse"]) == 1
    text = capsys.readouterr().out
    assert "collapse: yours: layer -, batch 0, head 0:" in text
    pooled = next(line for line in text.splitlines() if line.strip().startswith("yours: ") and "collapse" in line)
    assert "yours: COLLAPSES: 1 of 2 heads collapse" in pooled, pooled
    assert "does not collapse" not in pooled
    share = float(pooled.split("pooled over heads ")[1].split("%")[0])
    assert share < 50  # pooled, the count is below the threshold: the line counts heads instead


def test_mass_underflow_gate_fails_the_heads_past_it(files, tmp_path):
    _, two = files
    out = tmp_path / "m.json"
    assert main([str(two), *FWD_S1, *EMU, "--only", "yours", "--json", str(out)]) == 0
    masses = [h["mass_underflow"] for h in _doc(out)["heads"]]
    lo, hi = sorted(masses)
    assert hi > 10 * max(lo, 1e-12)
    mid = (lo + hi) / 2
    assert main([str(two), *FWD_S1, *EMU, "--only", "yours", "--fail-on", f"mass-underflow>{mid:.6g}", "--json",
                 str(out)]) == 1
    fails = _doc(out)["failures"]
    assert [f["value"] for f in fails] == [hi] and fails[0]["condition"] == f"mass-underflow>{mid:.6g}"
    assert main([str(two), *FWD_S1, *EMU, "--only", "yours", "--fail-on", f"mass-underflow>{hi * 1.01:.6g}"]) == 0


def test_ratio_gate_is_against_the_best_of_the_four_combinations(files, tmp_path, capsys):
    _, two = files
    out = tmp_path / "r.json"
    assert main([str(two), *FWD_S1, *EMU, "--fail-on", "ratio>2", "--json", str(out)]) == 1
    doc = _doc(out)
    best = {}
    for h in doc["heads"]:
        if h["policy"] in ("forward S=1", "forward S=256", "reverse S=1", "reverse S=256"):
            best[h["head"]] = min(best.get(h["head"], float("inf")), h["mse"])
    mine = {h["head"]: h for h in doc["heads"] if h["policy"] == "yours"}
    for head, h in mine.items():
        assert h["ratio_to_best"] == pytest.approx(h["mse"] / best[head], rel=1e-12)
    assert {f["head"] for f in doc["failures"]} == {hd for hd, h in mine.items() if h["ratio_to_best"] > 2} == {0}
    # reverse S=256 is itself one of the four: within 2x of the best on every head
    assert main([str(two), "--order", "reverse", "--scale", "256", *EMU, "--fail-on", "ratio>2"]) == 0
    capsys.readouterr()
    assert main([str(two), *FWD_S1, *EMU, "--only", "yours", "--fail-on", "ratio>2"]) == 2
    assert "needs the four reference combinations" in capsys.readouterr().err
