"""pcast-audit as a CI gate: --fail-on exit codes, --json against its schema, per-head verdicts and
measures, the policy flags generated from Policy, and the traps (layout, a log2 offset given as S)."""

import csv
import dataclasses
import json

import pytest
import torch
from safetensors.torch import save_file

from pcast.cli.audit import _parser, main
from pcast.models.sinks import make_inputs

EMU = ["--backend", "emulator"]


def _heads(*specs, n=128, d=32):
    qkv = [make_inputs(**{"n": n, "d": d, **s}) for s in specs]
    return tuple(torch.cat([t[i] for t in qkv], dim=1) for i in range(3))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A collapsing file (two heads: Δ = 9 and Δ = 3, zero-value sinks) and a clean one (no sink)."""
    root = tmp_path_factory.mktemp("gate")
    sink, clean = root / "sink.safetensors", root / "clean.safetensors"
    save_file(dict(zip("qkv", _heads(dict(seed=1, ksink=1, delta=9.0, sink_v_scale=0.0),
                                     dict(seed=2, ksink=1, delta=3.0, sink_v_scale=0.0)))), str(sink))
    save_file(dict(zip("qkv", _heads(dict(seed=3, ksink=1, delta=0.0)))), str(clean))
    return sink, clean


@pytest.fixture(scope="module")
def schema():
    from pcast.audit.report import SCHEMA_PATH

    with open(SCHEMA_PATH) as fh:
        return json.load(fh)


def test_fail_on_collapse_exits_1_on_a_collapsing_input_and_0_on_a_clean_one(files, capsys):
    sink, clean = files
    forward_s1 = ["--order", "forward", "--scale", "1", *EMU, "--fail-on", "collapse"]
    assert main([str(sink), *forward_s1]) == 1
    out = capsys.readouterr().out
    assert "FAIL: 1 (condition, policy, head)" in out and "collapse: yours: layer -, batch 0, head 0:" in out
    assert main([str(clean), *forward_s1]) == 0
    assert "PASS" in capsys.readouterr().out
    # the four reference combinations are not gated (forward S=1 collapses there too), nor is anything without --fail-on
    assert main([str(sink), *EMU, "--fail-on", "collapse"]) == 0
    assert main([str(sink), "--order", "forward", "--scale", "1", *EMU]) == 0


def test_fail_on_bounds_are_per_head(files, capsys):
    sink, _ = files
    path = files[0].parent / "b.json"
    assert main([str(sink), "--policy", "fa3", *EMU, "--quiet", "--fail-on", "rel-mse:1e-30", "--json",
                 str(path)]) == 1
    doc = json.load(open(path))
    # every head of yours and fa3 is past 1e-30, and only those policies are judged
    assert sorted((f["policy"], f["head"]) for f in doc["failures"]) == [("fa3", 0), ("fa3", 1), ("yours", 0),
                                                                         ("yours", 1)]
    assert doc["exit_code"] == 1 and doc["gated_policies"] == ["yours", "fa3"]
    assert main([str(sink), *EMU, "--quiet", "--fail-on", "rel-mse:1"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("bad", ["collaps", "rel-mse", "rel-mse:0", "floor:0.5", "saturation:3", "rel-mse:x"])
def test_bad_fail_on_is_a_one_line_error(files, capsys, bad):
    assert main([str(files[0]), "--fail-on", bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--fail-on={bad!r} is not allowed; allowed: collapse, saturation" in err


def test_json_validates_against_its_schema_and_holds_the_table(files, schema, tmp_path):
    import jsonschema

    sink, _ = files
    js, cs = tmp_path / "a.json", tmp_path / "a.csv"
    policies = tmp_path / "p.yaml"
    policies.write_text("deployed: {order: reverse, scale: 256, qk_fmt: e4m3fn, v_fmt: e4m3fn}\n")
    assert main([str(sink), "--policy", "fa3", "--policy", "fa4", "--policies", str(policies), *EMU, "--json",
                 str(js), "--csv", str(cs), "--per-head", "--quiet"]) == 0
    doc = json.load(open(js))
    jsonschema.validate(doc, schema)
    assert doc["schema_version"] == 2 and doc["exit_code"] == 0
    names = ["yours", "forward S=1", "forward S=256", "reverse S=1", "reverse S=256", "fa3", "fa4", "deployed"]
    assert [r["policy"] for r in doc["rows"]] == names and len(doc["heads"]) == 2 * len(names)
    # the same numbers as --csv (per head), to the printed digits
    for r, c in zip(doc["heads"], csv.DictReader(open(cs))):
        assert (r["policy"], r["head"], r["underflow"]) == (c["policy"], int(c["head"]), int(c["underflow"]))
        assert c["collapses"] == str(r["collapses"]) and r["collapses"] == (r["underflow_frac"] > 0.5)
        assert float(c["mse"]) == pytest.approx(r["mse"], rel=1e-12)
    # a broken document fails the schema: it can tell
    bad = dict(doc, heads=[{**doc["heads"][0], "mass_underflow": "x"}])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_per_head_measures_and_mass_underflow_for_fa3_and_fa4(files, tmp_path):
    sink, _ = files
    js = tmp_path / "m.json"
    assert main([str(sink), "--policy", "fa3", "--policy", "fa4", *EMU, "--json", str(js), "--quiet"]) == 0
    heads = {(h["policy"], h["head"]): h for h in json.load(open(js))["heads"]}
    for name in ("fa3", "fa4"):  # exp2_offset, and lazy τ = 8: numbers, checked against the kernel's count in the run
        for h in (0, 1):
            assert isinstance(heads[(name, h)]["mass_underflow"], float) and 0 <= heads[(name, h)]["mass_underflow"] < 1
    # the Δ = 9 head is past forward S=1's Δc (6.93 + ln 1 logits for e4m3fn), the Δ = 3 head is not
    strong, weak = heads[("forward S=1", 0)], heads[("forward S=1", 1)]
    assert strong["delta_c"] == pytest.approx(6.931, abs=1e-3)
    assert strong["distance_to_delta_c"] < 0 < weak["distance_to_delta_c"]
    assert strong["distance_to_delta_c"] == pytest.approx(strong["delta_c"] - strong["delta"])  # logits
    assert strong["delta"] / strong["sigma"] == pytest.approx(9.0, abs=0.5)
    assert heads[("reverse S=256", 0)]["delta_c"] is None  # the sink's block comes last: no collapse from it
    # the collapsed head loses more mass than the clean one, and forward S=1 more than reverse S=256
    assert strong["mass_underflow"] > weak["mass_underflow"] and strong["mass_underflow"] > \
        heads[("reverse S=256", 0)]["mass_underflow"]


def test_mass_underflow_with_a_sink_logit_that_seeds_the_max(tmp_path):
    """vllm-unified seeds the max with the logit (the rule's m0): its mass is checked against the kernel's count."""
    p, js = tmp_path / "l.safetensors", tmp_path / "l.json"
    save_file(dict(zip("qkv", _heads(dict(seed=5, ksink=1, delta=0.0)))), str(p))
    assert main([str(p), "--policy", "vllm-unified-1c98a49", "--sink-logit", "9", *EMU, "--json", str(js), "--quiet"]) == 0
    heads = {h["policy"]: h for h in json.load(open(js))["heads"]}
    assert heads["vllm-unified-1c98a49"]["mass_underflow"] > 0.5 > heads["reverse S=256"]["mass_underflow"]


def test_summary_worst_head_is_by_each_policys_own_error(files, tmp_path, capsys):
    sink, _ = files
    js = tmp_path / "s.json"
    assert main([str(sink), "--policy", "fa4", *EMU, "--json", str(js)]) == 0
    doc = json.load(open(js))
    for block in doc["summary"]:
        mine = [h for h in doc["heads"] if h["policy"] == block["policy"]]
        worst = max(mine, key=lambda h: h["rel_mse"])
        assert (block["worst_head"]["head"], block["heads"]) == (worst["head"], 2)
        assert block["heads_collapsing"] == sum(h["underflow_frac"] > 0.5 for h in mine)
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("Summary over 2 heads") and out[2].split()[0] == "yours"


def test_quiet_prints_no_table(files, capsys):
    assert main([str(files[0]), *EMU, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "Summary" in out and "Verdicts" not in out and "sink uf frac" not in out


def test_only_yours_skips_the_four_combinations(files, tmp_path):
    for flag in (["--only", "yours"], ["--no-reference-combos"]):
        out = tmp_path / "o.csv"
        assert main([str(files[0]), *EMU, *flag, "--policy", "fa3", "--csv", str(out)]) == 0
        assert [r["policy"] for r in csv.DictReader(open(out))] == ["yours", "fa3"]


def test_every_policy_field_has_its_flag():
    from pcast.policies import Policy

    opts = {o for a in _parser()._actions for o in a.option_strings}
    fields = [f.name for f in dataclasses.fields(Policy) if f.name not in ("name", "source", "read")]
    assert {"--" + f.replace("_", "-") for f in fields} <= opts
    assert {"--scale-mode", "--rescale-threshold", "--sink-mode", "--v-fmt", "--exp2-offset"} <= opts


def test_policy_flags_set_yours(files, tmp_path):
    """--scale-mode exp2_offset --rescale-threshold 8 --block-n 128 --scale 1 is fa4's policy: the same row."""
    out = tmp_path / "f.csv"
    assert main([str(files[0]), *EMU, "--only", "yours", "--policy", "fa4", "--scale-mode", "exp2_offset",
                 "--rescale-threshold", "8", "--block-n", "128", "--block-m", "128", "--scale", "1",
                 "--csv", str(out)]) == 0
    mine, fa4 = csv.DictReader(open(out))
    assert {c: v for c, v in mine.items() if c != "policy"} == {c: v for c, v in fa4.items() if c != "policy"}


def test_exp2_offset_is_scale_2_to_the_k(files, tmp_path, capsys):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    assert main([str(files[0]), *EMU, "--exp2-offset", "8", "--csv", str(a)]) == 0
    assert main([str(files[0]), *EMU, "--scale-mode", "exp2_offset", "--scale", "2^8", "--csv", str(b)]) == 0
    ra, rb = next(csv.DictReader(open(a))), next(csv.DictReader(open(b)))
    assert ra == rb and float(ra["scale"]) == 256.0 and ra["scale_mode"] == "exp2_offset"
    assert "warning" not in capsys.readouterr().err
    assert main([str(files[0]), "--exp2-offset", "8", "--scale", "4"]) == 2
    assert "--exp2-offset is not allowed with --scale" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--scale-mode", "exp2_offset", "--scale", "8"], ["--scale", "8", "--policy", "fa3"]])
def test_a_scale_that_looks_like_a_log2_offset_warns_with_both_readings(files, capsys, argv):
    assert main([str(files[0]), *EMU, "--quiet", *argv]) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and "S = 8 " in err and "S = 2^8 = 256" in err and "--exp2-offset 8" in err


@pytest.mark.parametrize("argv,msg", [
    (["--scale-mode", "lazy"], "--scale-mode='lazy' is not allowed; allowed: multiply, exp2_offset, per_row"),
    (["--rescale-threshold", "-1"], "--rescale-threshold=-1.0 is not allowed; allowed: a finite number >= 0"),
    (["--block-n", "40"], "--block-n=40 is not allowed; allowed: a positive multiple of 16"),
    (["--scale", "x"], "--scale='x' is not allowed; allowed: a number or 2^K"),
])
def test_bad_policy_flag_names_the_flag(files, capsys, argv, msg):
    assert main([str(files[0]), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and msg in err


def test_flash_attn_layout_is_refused_then_read_with_layout_bnhd(tmp_path, capsys):
    q, k, v = make_inputs(7, heads=4, n=128, d=32, ksink=1, delta=8.0)
    bhnd, bnhd = tmp_path / "bhnd.safetensors", tmp_path / "bnhd.safetensors"
    save_file({"q": q, "k": k, "v": v}, str(bhnd))
    save_file({n: t.transpose(1, 2).contiguous() for n, t in zip("qkv", (q, k, v))}, str(bnhd))  # [B, N, H, d]
    assert main([str(bnhd), *EMU]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "[1, 128, 4, 32] read as [B, H, N, d] gives H = 128 heads of N = 4 tokens" in err
    assert "likely [B, N, H, d]" in err and "--layout bnhd" in err
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    assert main([str(bnhd), *EMU, "--layout", "bnhd", "--csv", str(a)]) == 0
    assert main([str(bhnd), *EMU, "--csv", str(b)]) == 0
    assert list(csv.DictReader(open(a))) == list(csv.DictReader(open(b)))


def test_policies_yaml_takes_nvfp4(files, tmp_path, capsys):
    pol, out = tmp_path / "fp4.yaml", tmp_path / "fp4.csv"
    pol.write_text("policies:\n  mine-fp4: {order: reverse, scale: 256, fmt: nvfp4}\n")
    assert main([str(files[0]), *EMU, "--policies", str(pol), "--only", "yours", "--csv", str(out)]) == 0
    rows = {r["policy"]: r for r in csv.DictReader(open(out))}
    assert rows["mine-fp4"]["fmt"] == "nvfp4" and float(rows["mine-fp4"]["mse"]) > float(rows["yours"]["mse"])
    assert main([str(files[0]), *EMU, "--fmt", "nvfp4", "--quiet"]) == 0
