"""pcast-audit: a kernel engineer's own tensors through their policy and the four combinations."""

import csv
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
