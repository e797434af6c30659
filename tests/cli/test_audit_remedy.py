"""The why and the remedy: every failing head gets its cause in words from the theory and the nearest option change
that removes the failure, checked by rerunning; the fix is checked here again by an independent audit run."""

import json

import pytest
import torch
from safetensors.torch import save_file

from pcast.cli.audit import main
from pcast.models.sinks import make_inputs
from pcast.theory.policy import best_lazy_scale, critical_delta_policy, max_safe_tau

EMU = ["--backend", "emulator", "--quiet", "--only", "yours"]
FA3_LAZY = ["--order", "forward", "--exp2-offset", "8", "--rescale-threshold", "8", "--block-n", "128"]


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """Two heads: a strong zero-value sink (Δ = 9) and none."""
    heads = [make_inputs(seed=s, n=256, d=32, ksink=1, delta=dl, sink_v_scale=0.0) for s, dl in ((1, 9.0), (2, 0.0))]
    path = tmp_path_factory.mktemp("remedy") / "two.safetensors"
    save_file(dict(zip("qkv", (torch.cat([h[i] for h in heads], dim=1) for i in range(3)))), str(path))
    return path


@pytest.fixture(scope="module")
def schema():
    from pcast.audit.report import SCHEMA_PATH

    with open(SCHEMA_PATH) as fh:
        return json.load(fh)


def test_saturation_gets_its_bound_and_a_checked_fix(two, schema, tmp_path, capsys):
    import jsonschema

    out = tmp_path / "s.json"
    assert main([str(two), *FA3_LAZY, *EMU, "--fail-on", "saturation", "--json", str(out)]) == 1
    text = capsys.readouterr().out
    assert "offset 8 with τ = 8 lets P reach 2^16 > 448: saturates. Keep offset + τ ≤ log2 448" in text
    assert f"τ ≤ {max_safe_tau(256.0):.3g} at this S" in text and f"S ≤ {best_lazy_scale(8.0):g} at this τ" in text
    doc = json.load(open(out))
    jsonschema.validate(doc, schema)
    failing = {(f["batch"], f["head"]) for f in doc["failures"]}
    assert {(r["batch"], r["head"]) for r in doc["remedies"]} == failing
    fix = doc["remedies"][0]["fix"]
    assert fix["option"] == "rescale_threshold" and fix["to"] == 0.0
    # the fix, applied by hand, passes the same gate on the same file
    fixed = [a if a != "8" or FA3_LAZY[i - 1] != "--rescale-threshold" else "0" for i, a in enumerate(FA3_LAZY)]
    assert main([str(two), *fixed, *EMU, "--fail-on", "saturation"]) == 0


def test_collapse_gets_its_delta_c_and_the_nearest_fix(two, tmp_path, capsys):
    out = tmp_path / "c.json"
    assert main([str(two), "--order", "forward", "--scale", "1", *EMU, "--fail-on", "collapse", "--json",
                 str(out)]) == 1
    text = capsys.readouterr().out
    dc = critical_delta_policy(1.0, k=1)
    assert f"is past Δc = {dc:.3g}" in text and "forward order meets the sink first" in text
    (entry,) = json.load(open(out))["remedies"]
    assert (entry["batch"], entry["head"]) == (0, 0)
    assert entry["fix"]["option"] == "order" and entry["fix"]["to"] == "reverse"
    assert main([str(two), "--order", "reverse", "--scale", "1", *EMU, "--fail-on", "collapse"]) == 0


def test_no_failure_no_remedy_and_an_unfixable_one_says_so(two, tmp_path, capsys):
    out = tmp_path / "n.json"
    assert main([str(two), "--order", "reverse", "--scale", "256", *EMU, "--fail-on", "collapse", "--json",
                 str(out)]) == 0
    assert json.load(open(out))["remedies"] == [] and "Why, and the remedy" not in capsys.readouterr().out
    # a bound no P policy meets (relative MSE 1e-30): every single change is tried and none clears it
    assert main([str(two), "--order", "forward", "--scale", "1", *EMU, "--fail-on", "rel-mse>1e-30", "--json",
                 str(out)]) == 1
    text = capsys.readouterr().out
    assert "fix: no single option change removes it (checked: order = reverse, scale = 256.0)" in text
    assert all(e["fix"] is None and len(e["tried"]) == 2 for e in json.load(open(out))["remedies"])


def test_microscaled_saturation_is_the_group_scale_and_e4m3_clears_it(two, schema, tmp_path, capsys):
    import jsonschema

    out = tmp_path / "mx.json"
    assert main([str(two), "--order", "reverse", "--scale", "256", "--fmt", "nvfp4", *EMU, "--fail-on", "saturation",
                 "--json", str(out)]) == 1
    text = capsys.readouterr().out
    assert "nvfp4: a group's scale is amax/6 rounded to E4M3" in text and "not a bound on S or τ" in text
    doc = json.load(open(out))
    jsonschema.validate(doc, schema)
    assert doc["remedies"] and all(e["fix"]["option"] == "fmt" and e["fix"]["from"] == "nvfp4"
                                   and e["fix"]["to"] == "e4m3fn" for e in doc["remedies"])
    assert main([str(two), "--order", "reverse", "--scale", "256", "--fmt", "e4m3fn", *EMU, "--fail-on",
                 "saturation"]) == 0
