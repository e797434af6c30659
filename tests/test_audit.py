"""pcast-audit: a kernel engineer's own tensors through their policy and the four combinations."""

import csv
import math
from pathlib import Path

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


# ------------------------------------------------------------------------- named policies (--policy)

def test_named_policies_get_rows_and_verdicts(sink_file, tmp_path, capsys):
    out = tmp_path / "audit.csv"
    argv = [str(sink_file), "--policy", "fa3", "--policy", "hpc-ops", "--policy", "hpc-ops-s1", "--csv", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    rows = {r["policy"]: r for r in csv.DictReader(open(out))}
    assert list(rows)[5:] == ["fa3", "hpc-ops", "hpc-ops-s1"]
    # the rows really ran each policy's keywords
    assert (rows["fa3"]["order"], rows["fa3"]["scale_mode"], rows["fa3"]["block_n"]) == ("reverse", "exp2_offset", "128")
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
    assert list(r["policy"] for r in csv.DictReader(open(out)))[5:] == ["fa4"]
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

    from kernels.cli.audit import load_policies
    from kernels.policies import policies_from_config

    path = Path(__file__).resolve().parents[1] / "config.yaml"
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
    assert main([str(p), "--ksink", "0", "--sink-logit", "9", "--policy", "vllm-unified", "--csv", str(out)]) == 0
    text = capsys.readouterr().out
    rows = {r["policy"]: r for r in csv.DictReader(open(out))}
    # vLLM starts the running max at the logit 9: every key meets it, as in forward order with a sink key
    assert "vllm-unified: COLLAPSES:" in text and float(rows["vllm-unified"]["underflow_frac"]) > 0.9
    # the same S = 1 forward walk with the logit added at the end ("final") loses nothing to it
    assert "forward S=1: does not collapse:" in text and float(rows["forward S=1"]["underflow_frac"]) < 0.05
    # errors are against the reference with the sink in its denominator: the fix is accurate
    assert float(rows["reverse S=256"]["rel_mse"]) < 1e-2 < float(rows["vllm-unified"]["rel_mse"])


# ----------------------------------------------------------------------------- bad input before any work (issue 10)


@pytest.fixture()
def no_work(monkeypatch):
    """Any attention call (the work) fails the test: the errors below must come first."""
    import kernels.api

    monkeypatch.setattr(kernels.api, "attention", lambda *a, **kw: pytest.fail("the audit started work"))


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
    # fractions only after the MSEs: the counts live in --csv
    assert out[1].split() == ["policy", "backend", "MSE", "rel", "MSE", "uf", "frac", "sink", "uf", "frac", "sat",
                              "frac"]
    for line in out[2:7]:  # every fraction column of every row is within [0, 1]
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
