"""pcast-audit: a kernel engineer's own tensors through their policy and the four combinations."""

import csv
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from pcast.audit import audit
from pcast.cli.audit import main
from pcast.models.sinks import make_inputs


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


# ------------------------------------------------------------------------- named policies (--policy)

def test_named_policies_get_rows_and_verdicts(sink_file, tmp_path, capsys):
    out = tmp_path / "audit.csv"
    argv = [str(sink_file), "--policy", "fa3", "--policy", "hpc-ops", "--policy", "hpc-ops-s1", "--csv", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    rows = {r["policy"]: r for r in csv.DictReader(open(out))}
    assert list(rows)[5:] == ["fa3", "hpc-ops", "hpc-ops-s1"]
    # the rows really ran each policy's keywords
    assert (rows["fa3"]["order"], rows["fa3"]["scale_mode"], rows["fa3"]["block_n"]) == ("reverse", "exp2_offset", "160")
    assert (rows["hpc-ops"]["order"], float(rows["hpc-ops"]["scale"])) == ("forward", 256.0)
    # Δ = 9: past Δc(S=1) = 6.93, short of Δc(S=256) = 12.5: only forward S = 1 (hpc-ops before its fix) collapses
    assert "threshold 50%" in text
    assert "hpc-ops-s1: COLLAPSES:" in text
    assert "fa3: does not collapse:" in text and "hpc-ops: does not collapse:" in text
    assert "fa3: does not saturate" in text and "hpc-ops: does not saturate" in text
    assert float(rows["hpc-ops-s1"]["underflow_frac"]) > 0.9 > 0.05 > float(rows["fa3"]["underflow_frac"])
    assert rows["fa3"]["floor_mse"] == ""  # presets keep V in float32: no V-cast floor


def test_policies_file_runs_the_users_policies_with_the_v_cast_floor(sink_file, tmp_path, capsys):
    pol = tmp_path / "mine.yaml"
    pol.write_text("policies:\n"
                   "  mine: {order: forward, scale: 16, block_n: 32}\n"
                   "  deployed: {order: reverse, scale: 256, qk_fmt: e4m3fn, v_fmt: e4m3fn}\n"
                   "  fa4-s256: {order: reverse, scale: 256, scale_mode: exp2_offset, rescale_threshold: 8.0,\n"
                   "             block_m: 128, block_n: 128}\n")
    out = tmp_path / "audit.csv"
    assert main([str(sink_file), "--policies", str(pol), "--policy", "fa4", "--csv", str(out)]) == 0
    # --policy and --policies together: the named policy, then every policy of the file
    assert list(r["policy"] for r in csv.DictReader(open(out)))[5:] == ["fa4", "mine", "deployed", "fa4-s256"]
    capsys.readouterr()
    assert main([str(sink_file), "--policies", str(pol), "--csv", str(out)]) == 0  # no --policy: all of the file
    text = capsys.readouterr().out
    rows = {r["policy"]: r for r in csv.DictReader(open(out))}
    assert list(rows)[5:] == ["mine", "deployed", "fa4-s256"]
    assert (rows["mine"]["block_n"], float(rows["mine"]["scale"])) == ("32", 16.0)
    # the floor (fmt=None, same FP8 Q, K, V) carries the operand casts: far above the P-only error
    assert rows["mine"]["floor_mse"] == "" and "mine: P-cast error" not in text
    assert float(rows["deployed"]["floor_rel_mse"]) > 10 * float(rows["reverse S=256"]["rel_mse"])
    assert "deployed: P-cast error is within 2x the V-cast floor" in text
    # FA4's lazy threshold 8 with the pre-fix offset 8: P reaches 256·2^8 > 448 and saturates
    assert int(rows["fa4-s256"]["saturated"]) > 0 and "fa4-s256: SATURATES:" in text


def test_config_yaml_is_a_policies_file():
    import yaml

    from pcast.audit import load_policies
    from pcast.policies import policies_from_config

    path = Path(__file__).resolve().parents[2] / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    assert load_policies(str(path)) == policies_from_config(cfg.get("policies"))


@pytest.mark.parametrize("argv,msg", [
    (["--policy", "fa5"], r"policy='fa5' is not allowed; allowed: .*fa3, fa4, sage2"),
    (["--policies", "MISSING.yaml"], r"policies file 'MISSING.yaml' does not exist"),
    (["--sink-logit", "nan"], r"--sink-logit=nan is not allowed"),
    (["--collapse-threshold", "1.5"], r"--collapse-threshold=1.5 is not allowed"),
])
def test_bad_policy_options_fail_before_any_work(tmp_path, capsys, argv, msg):
    import re

    # the inputs file does not exist: the policy options must be refused before it is read
    assert main([str(tmp_path / "absent.safetensors"), *argv]) == 2
    err = capsys.readouterr().err
    assert re.search(msg, err) and "absent.safetensors" not in err


def test_bad_key_in_policies_file_names_it(sink_file, tmp_path, capsys):
    pol = tmp_path / "bad.yaml"
    pol.write_text("mine: {order: forward, bogus: 1}\n")
    assert main([str(sink_file), "--policies", str(pol)]) == 2
    assert "policies.mine.bogus is not a policy key" in capsys.readouterr().err


def test_learned_sink_logit_collapses_only_the_policy_that_seeds_the_max(tmp_path, capsys):
    q, k, v = make_inputs(5, n=256, d=32, ksink=0)  # no sink key: the sink is the learned logit alone
    p = tmp_path / "qkv.safetensors"
    save_file({"q": q, "k": k, "v": v}, str(p))
    out = tmp_path / "audit.csv"
    assert main([str(p), "--ksink", "0", "--sink-logit", "9", "--policy", "vllm-unified-1c98a49", "--csv", str(out)]) == 0
    text = capsys.readouterr().out
    rows = {r["policy"]: r for r in csv.DictReader(open(out))}
    # vLLM starts the running max at the logit 9: every key meets it, as in forward order with a sink key
    assert "vllm-unified-1c98a49: COLLAPSES:" in text and float(rows["vllm-unified-1c98a49"]["underflow_frac"]) > 0.9
    # the same S = 1 forward walk with the logit added at the end ("final") loses nothing to it
    assert "forward S=1: does not collapse:" in text and float(rows["forward S=1"]["underflow_frac"]) < 0.05
    # errors are against the reference with the sink in its denominator: the fix is accurate
    assert float(rows["reverse S=256"]["rel_mse"]) < 1e-2 < float(rows["vllm-unified-1c98a49"]["rel_mse"])


# ----------------------------------------------------------------------------- bad input before any work


@pytest.mark.parametrize("argv,msg", [
    (["--ksink", "256"], r"--ksink=256 is not allowed; allowed: 0 <= ksink < N = 256"),
    (["--ksink", "-1"], r"--ksink=-1 is not allowed; allowed: 0 <= ksink < N = 256"),
    (["--backend", "reference"], r"--backend='reference' is not allowed; allowed: auto, triton, emulator"),
    (["--sm-scale", "0"], r"--sm-scale=0.0 is not allowed; allowed: a finite number > 0"),
    (["--sm-scale", "inf"], r"--sm-scale=inf is not allowed"),
    (["--csv", "/nonexistent-dir-pcast/x.csv"], r"--csv=.*directory '/nonexistent-dir-pcast' does not exist"),
])
def test_bad_arguments_fail_before_any_work(sink_file, capsys, no_work, argv, msg):
    import re

    assert main([str(sink_file), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pcast-audit: error:") and err.count("\n") == 1 and re.search(msg, err), err


def test_csv_that_is_a_directory_or_under_a_file_fails_before_any_work(sink_file, tmp_path, capsys, no_work):
    assert main([str(sink_file), "--csv", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert main([str(sink_file), "--csv", str(sink_file / "x.csv")]) == 2  # parent is a file
    assert "does not exist" in capsys.readouterr().err


def test_scores_that_overflow_float32_are_an_error_naming_the_cause(tmp_path, capsys, no_work):
    p = tmp_path / "big.safetensors"
    q = torch.full((8, 16), 1e20)  # q.k = 16e40 > 3.4e38 even after 1/sqrt(16)
    save_file({"q": q, "k": q.clone(), "v": torch.ones(8, 16)}, str(p))
    assert main([str(p), "--ksink", "0"]) == 2
    err = capsys.readouterr().err
    assert "scores overflow float32: max |q.k| * sm_scale = 4e+40" in err and "--sm-scale" in err


def test_fmt_none_in_either_case_runs_unrounded(sink_file, tmp_path, capsys):
    for spelling in ("none", "None"):
        out = tmp_path / f"{spelling}.csv"
        assert main([str(sink_file), "--fmt", spelling, "--csv", str(out), "--backend", "emulator"]) == 0
        yours = next(csv.DictReader(open(out)))
        assert yours["fmt"] == "none" and int(yours["underflow"]) == 0 and float(yours["mse"]) < 1e-12


def test_header_and_one_unit_per_table(sink_file, capsys):
    assert main([str(sink_file), "--backend", "emulator"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"inputs {sink_file}: q [1, 1, 256, 32], k and v [1, 1, 256, 32]")
    assert "ksink=1 (given)" in out[0] and "block_n=64" in out[0] and "causal=False" in out[0]
    assert "sm_scale=0.176777" in out[0]  # 1/sqrt(32)
    # the summary block comes first: one line per policy, then the table
    assert out[1].startswith("Summary over 1 heads") and [x.split()[0] for x in out[2:7]] == [
        "yours", "forward", "forward", "reverse", "reverse"]
    out = out[8:]
    # fractions only after the MSEs: the counts live in --csv
    assert out[0].split() == ["policy", "backend", "MSE", "rel", "MSE", "uf", "frac", "sink", "uf", "frac", "sat",
                              "frac"]
    for line in out[1:6]:  # every fraction column of every row is within [0, 1]
        fracs = [float(x) for x in line.split()[-3:]]
        assert all(0.0 <= f <= 1.0 for f in fracs), line


def test_sm_scale_is_the_score_scale(sink_file, tmp_path):
    """The default is 1/sqrt(d): passing it gives the same bytes; doubling it doubles every score
    gap, so the sink (Δ = 9 at the default) collapses forward S=256 too (Δ = 18 > Δc = 12.5)."""
    a, b, c = (tmp_path / f"{n}.csv" for n in "abc")
    assert main([str(sink_file), "--backend", "emulator", "--csv", str(a)]) == 0
    default = repr(1 / math.sqrt(32))  # the api's default, to the bit (32 ** -0.5 is one ulp away)
    assert main([str(sink_file), "--backend", "emulator", "--csv", str(b), "--sm-scale", default]) == 0
    assert a.read_bytes() == b.read_bytes()
    assert main([str(sink_file), "--backend", "emulator", "--csv", str(c), "--sm-scale", repr(2 / math.sqrt(32))]) == 0
    base = {r["policy"]: r for r in csv.DictReader(open(a))}
    doubled = {r["policy"]: r for r in csv.DictReader(open(c))}
    assert float(base["forward S=256"]["underflow_frac"]) < 0.5 < float(doubled["forward S=256"]["underflow_frac"])


def test_grouped_query_tensors_are_audited(tmp_path):
    """[H, N, d] q with [H_kv, N, d] k and v (H_kv dividing H), d = 80: the audit runs them; a k whose
    heads do not divide q's is a one-line error."""
    g = torch.Generator().manual_seed(2)
    q, k, v = torch.randn(4, 64, 80, generator=g), torch.randn(2, 64, 80, generator=g), torch.randn(2, 64, 80,
                                                                                                     generator=g)
    p = tmp_path / "gqa.safetensors"
    save_file({"q": q, "k": k, "v": v}, str(p))
    out = tmp_path / "gqa.csv"
    assert main([str(p), "--backend", "emulator", "--csv", str(out)]) == 0
    assert int(next(csv.DictReader(open(out)))["terms"]) == 4 * 64 * 63  # every query head, 63 non-sink keys
    save_file({"q": q, "k": k[:1].repeat(3, 1, 1), "v": v[:1].repeat(3, 1, 1)}, str(p))
    assert main([str(p)]) == 2


# ----------------------------------------------------------------------------- several layers, --ksink auto, --per-head


def _heads(*specs, n=128, d=32):
    """q, k, v [1, H, n, d], head h from make_inputs(**specs[h]) (seed, ksink, delta, sink_v_scale)."""
    qkv = [make_inputs(**{"n": n, "d": d, **s}) for s in specs]
    return tuple(torch.cat([t[i] for t in qkv], dim=1) for i in range(3))


def _layered(tmp_path, layers, name="layers.safetensors"):
    """A safetensors file of layer{L}/q, k, v for {L: (q, k, v)}."""
    p = tmp_path / name
    save_file({f"layer{L}/{n}": t for L, qkv in layers.items() for n, t in zip("qkv", qkv)}, str(p))
    return p


def _csv(path):
    return list(csv.DictReader(open(path)))


def test_columns_carry_the_layer_and_the_head():
    from pcast.audit import COLUMNS, PER_HEAD_COLUMNS

    assert COLUMNS[-1] == "layer" and COLUMNS[:7] == ("policy", "order", "scale", "fmt", "block_n", "rowsum", "backend")
    assert PER_HEAD_COLUMNS == COLUMNS + ("batch", "head", "ksink", "sinks", "mass_underflow", "mass_lost_share", "delta", "sigma",
                                          "delta_c", "distance_to_delta_c")


def test_layer_picks_the_layers_tensors(tmp_path, capsys):
    """Layer 10's rows are the rows of a plain file holding layer 10's tensors, to the bit; the layers
    run in numeric order (2 before 10)."""
    two = _heads(dict(seed=11, ksink=1, delta=9.0))
    ten = _heads(dict(seed=12, ksink=2, delta=7.0), dict(seed=13, ksink=1, delta=3.0))
    p = _layered(tmp_path, {10: ten, 2: two})
    plain = tmp_path / "plain.safetensors"
    save_file(dict(zip("qkv", ten)), str(plain))
    a, b, c = (tmp_path / f"{x}.csv" for x in "abc")
    assert main([str(p), "--layer", "10", "--backend", "emulator", "--csv", str(a)]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "q [1, 2, 128, 32]" in header and "layers 10;" in header
    assert main([str(plain), "--backend", "emulator", "--csv", str(b)]) == 0
    assert "layers none (plain q, k, v)" in capsys.readouterr().out.splitlines()[0]
    layered, flat = _csv(a), _csv(b)
    assert [r["layer"] for r in layered] == ["10"] * 5 and [r["layer"] for r in flat] == [""] * 5
    for x, y in zip(layered, flat):
        assert {c: v for c, v in x.items() if c != "layer"} == {c: v for c, v in y.items() if c != "layer"}
    assert main([str(p), "--backend", "emulator", "--csv", str(c)]) == 0  # default: every layer, numeric order
    every = _csv(c)
    assert [r["layer"] for r in every] == ["2"] * 5 + ["10"] * 5 and every[5:] == layered
    assert "layers 2, 10;" in capsys.readouterr().out.splitlines()[0]


def test_unknown_layer_fails_before_any_work(tmp_path, capsys, no_work):
    p = _layered(tmp_path, {0: _heads(dict(seed=1)), 1: _heads(dict(seed=2))})
    for bad in ("7", "x"):
        assert main([str(p), "--layer", "0", "--layer", bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("pcast-audit: error:") and err.count("\n") == 1, err
        assert f"--layer={bad} is not allowed" in err and "0, 1" in err
    plain = tmp_path / "plain.safetensors"
    save_file(dict(zip("qkv", _heads(dict(seed=1)))), str(plain))
    assert main([str(plain), "--layer", "0"]) == 2
    assert "--layer=0 is not allowed" in capsys.readouterr().err
    # neither layout: the missing-tensor error names both; a layer lacking a tensor is named too
    save_file({"layer0/q": torch.ones(4, 16), "w": torch.ones(4, 16)}, str(p))
    assert main([str(p), "--layer", "0"]) == 2
    assert "lacks tensor(s) layer0/k, layer0/v" in capsys.readouterr().err
    save_file({"w": torch.ones(4, 16)}, str(p))
    assert main([str(p)]) == 2
    err = capsys.readouterr().err
    assert "lacks tensor(s) q, k, v" in err and "layer{L}/q" in err


@pytest.mark.parametrize("value", ["x", "1.5", "", "autoo"])
def test_bad_ksink_fails_before_any_work(tmp_path, capsys, no_work, value):
    assert main([str(tmp_path / "absent.safetensors"), "--ksink", value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pcast-audit: error:") and err.count("\n") == 1
    assert f"--ksink={value!r} is not allowed" in err and "or auto" in err and "absent" not in err


def test_ksink_auto_detects_the_sinks(tmp_path, capsys):
    p = _layered(tmp_path, {0: _heads(*(dict(seed=s, ksink=4, delta=10.0) for s in (1, 2, 3))),
                            1: _heads(*(dict(seed=s, ksink=4, delta=0.0) for s in (4, 5, 6)))})
    assert main([str(p), "--ksink", "auto", "--layer", "0", "--backend", "emulator"]) == 0
    assert "ksink=auto (ksink = 4 on 3 of 3 heads);" in capsys.readouterr().out.splitlines()[0]
    assert main([str(p), "--ksink", "AUTO", "--layer", "1", "--backend", "emulator"]) == 0
    assert "ksink=auto (ksink = 0 on 3 of 3 heads);" in capsys.readouterr().out.splitlines()[0]
    assert main([str(p), "--ksink", "auto", "--backend", "emulator"]) == 0
    assert "ksink=auto (ksink = 0 on 3 of 6 heads, ksink = 4 on 3 of 6);" in capsys.readouterr().out.splitlines()[0]


def test_leading_ksink():
    from pcast.audit import leading_ksink

    assert [leading_ksink(s) for s in ([0, 1, 2, 7], [5], [], [0], [1, 2])] == [3, 0, 0, 1, 0]


def test_ksink_auto_is_per_head_calls(tmp_path):
    """Heads with different detected ksinks (4, 0, 1) run grouped; each head's numbers are those of the
    head alone with its ksink given."""
    specs = [dict(seed=21, ksink=4, delta=10.0), dict(seed=22, ksink=1, delta=0.0),
             dict(seed=23, ksink=1, delta=8.0)]
    p = tmp_path / "three.safetensors"
    save_file(dict(zip("qkv", _heads(*specs))), str(p))
    out = tmp_path / "auto.csv"
    assert main([str(p), "--ksink", "auto", "--per-head", "--backend", "emulator", "--csv", str(out)]) == 0
    rows = _csv(out)
    assert [r["ksink"] for r in rows[::5]] == ["4", "0", "1"]
    assert [r["sinks"] for r in rows[::5]] == ["0;1;2;3", "", "0"]
    for h, spec in enumerate(specs):
        single, one = tmp_path / f"h{h}.safetensors", tmp_path / f"h{h}.csv"
        save_file(dict(zip("qkv", _heads(spec))), str(single))
        assert main([str(single), "--ksink", rows[5 * h]["ksink"], "--per-head", "--backend", "emulator",
                     "--csv", str(one)]) == 0
        for x, y in zip(rows[5 * h:5 * h + 5], _csv(one)):
            assert {c: v for c, v in x.items() if c not in ("head", "sinks")} == \
                {c: v for c, v in y.items() if c not in ("head", "sinks")}


def test_per_head_rows_add_up_to_the_table(tmp_path, capsys):
    p = _layered(tmp_path, {0: _heads(*(dict(seed=s, ksink=4, delta=10.0) for s in (31, 32))),
                            1: _heads(*(dict(seed=s, ksink=4, delta=10.0) for s in (33, 34)))})
    agg, per = tmp_path / "agg.csv", tmp_path / "per.csv"
    argv = [str(p), "--ksink", "auto", "--backend", "emulator", "--policy", "fa3"]
    assert main([*argv, "--csv", str(agg)]) == 0
    assert main([*argv, "--per-head", "--csv", str(per)]) == 0
    text = capsys.readouterr().out
    assert "mass uf" in text and "worst head: layer" in text
    total, heads = _csv(agg), _csv(per)
    assert len(heads) == 2 * 1 * 2 * 6  # (layer, batch, head, run)
    assert [(r["layer"], r["batch"], r["head"], r["policy"]) for r in heads[:7]] == \
        [("0", "0", "0", n) for n in ("yours", "forward S=1", "forward S=256", "reverse S=1", "reverse S=256",
                                      "fa3")] + [("0", "0", "1", "yours")]
    for row in total:
        mine = [r for r in heads if (r["layer"], r["policy"]) == (row["layer"], row["policy"])]
        assert len(mine) == 2
        for c in ("underflow", "terms", "underflow_sink", "terms_sink", "saturated"):
            assert sum(int(r[c]) for r in mine) == int(row[c]), c
        assert math.isclose(sum(float(r["mse"]) for r in mine) / 2, float(row["mse"]), rel_tol=1e-9)
    by = {(r["layer"], r["head"], r["policy"]): r for r in heads}
    for L in "01":
        for h in "01":
            assert by[(L, h, "yours")]["sinks"] == "0;1;2;3"
            fwd, rev = (float(by[(L, h, n)]["mass_underflow"]) for n in ("forward S=1", "reverse S=256"))
            assert 0.0 <= rev < fwd <= 1.0
            # exp2_offset: the rule states it too, and its count matched the kernel's (checked in the run)
            assert 0.0 <= float(by[(L, h, "fa3")]["mass_underflow"]) < fwd


def test_per_head_mass_check_catches_a_rule_that_disagrees(tmp_path, monkeypatch):
    """mass_underflow's mask is checked against the kernel's own count: a wrong rule is an error."""
    import pcast.models.heads

    p = tmp_path / "x.safetensors"
    save_file(dict(zip("qkv", _heads(dict(seed=41, ksink=1, delta=9.0)))), str(p))
    assert main([str(p), "--per-head", "--backend", "emulator"]) == 0
    real = pcast.models.heads.underflow_mask
    monkeypatch.setattr(pcast.models.heads, "underflow_mask", lambda s, **kw: ~real(s, **kw))
    with pytest.raises(RuntimeError, match="underflow_mask"):
        main([str(p), "--per-head", "--backend", "emulator"])


def test_worst_head_is_the_one_with_the_strong_sink(tmp_path, capsys):
    weak = dict(ksink=1, delta=0.0)
    strong = dict(ksink=1, delta=9.0, sink_v_scale=0.0)
    p = _layered(tmp_path, {0: _heads(dict(seed=51, **weak), dict(seed=52, **weak)),
                            1: _heads(dict(seed=53, **weak), dict(seed=54, **strong))})
    per = tmp_path / "per.csv"
    for extra in ([], ["--per-head", "--csv", str(per)]):
        assert main([str(p), "--backend", "emulator", *extra]) == 0
        lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("worst head:")]
        assert len(lines) == 1 and lines[0].startswith(
            "worst head: layer 1, batch 0, head 1: forward S=1 / reverse S=256 MSE ratio "), lines
    by = {(r["layer"], r["head"], r["policy"]): float(r["mse"]) for r in _csv(per)}
    x, y = by[("1", "1", "forward S=1")], by[("1", "1", "reverse S=256")]
    assert x > 10 * y
    assert lines[0].endswith(f"MSE ratio {x / y:.4g} (MSE {x:.4g} vs {y:.4g})")


def test_ksink_auto_with_grouped_query_heads_is_the_plain_call(tmp_path):
    """Four query heads on two key/value heads, every head a sink at key 0: --ksink auto (heads run
    grouped by ksink, each on its key/value head h // 2) gives the numbers of --ksink 1 (one call)."""
    q, k, v = _heads(dict(seed=61, ksink=1, delta=9.0), dict(seed=62, ksink=1, delta=9.0))
    q4 = torch.stack([q[:, 0], 1.1 * q[:, 0], q[:, 1], 0.9 * q[:, 1]], dim=1)
    p = tmp_path / "gqa.safetensors"
    save_file({"q": q4, "k": k, "v": v}, str(p))
    a, b = tmp_path / "auto.csv", tmp_path / "one.csv"
    assert main([str(p), "--ksink", "auto", "--per-head", "--backend", "emulator", "--csv", str(a)]) == 0
    assert main([str(p), "--ksink", "1", "--per-head", "--backend", "emulator", "--csv", str(b)]) == 0
    auto, one = _csv(a), _csv(b)
    assert len(auto) == 4 * 5 and {r["sinks"] for r in auto} == {"0"} and {r["sinks"] for r in one} == {""}
    for x, y in zip(auto, one):
        assert {c: v for c, v in x.items() if c != "sinks"} == {c: v for c, v in y.items() if c != "sinks"}
