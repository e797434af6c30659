"""The compiled kernels' instructions, read on a CPU (no GPU needed): pcast.aot, pcast.triton.aot_checks.

Each specialization compiles once per session (the ``facts`` fixture) and once per machine (Triton's
cache and pcast.triton.aot's). Each check is also shown to fail when its property is broken on purpose:
fusion left on, input_precision="tf32", an approximate division, a float16 or software FP8 cast, spills.
"""

from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

import pcast
from pcast.aot import compile_attention
from pcast.triton import aot_checks as C
from pcast.triton.aot import TARGETS, compile_launch, kernel_facts
from pcast.triton.kernel import LAUNCH_OPTIONS, _builtin_cast_kernel, attention_num_warps

SMALL = dict(n=64, d=16, block_m=16, block_n=16, ksink=4)  # fast to compile; every check but spills applies
_FACTS = {}


def facts_of(target, **kw):
    """kernel_facts of compile_attention(target, **kw), compiled once per session."""
    key = (target, tuple(sorted((k, repr(v)) for k, v in kw.items())))
    if key not in _FACTS:
        _FACTS[key] = kernel_facts(compile_attention(target, **kw))
    return _FACTS[key]


def _faithful_checks(f, *, exp2_offset, block_m, block_n, head_d):
    return {"fusion": C.check_fusion(f, C.dot_fmas(block_m, block_n, head_d, f["num_warps"])),
            "tf32": C.check_no_tf32(f), "exp": C.check_exp(f, exp2_offset), "div": C.check_div(f),
            "cast": C.check_cast(f, hardware=False), "target": C.check_target(f)}


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("mode", [dict(scale=256.0, order="reverse"),
                                  dict(scale=256.0, scale_mode="exp2_offset", rowsum="rounded", causal=True)],
                         ids=["multiply", "exp2_offset"])
def test_faithful_kernel_instructions_per_target(target, mode):
    f = facts_of(target, **SMALL, **mode)
    checks = _faithful_checks(f, exp2_offset=mode.get("scale_mode") == "exp2_offset", block_m=16, block_n=16,
                              head_d=16)
    assert all(ok for ok, _ in checks.values()), checks
    assert f["options"]["enable_fp_fusion"] is False


@pytest.mark.slow
def test_preset_block_sizes_compile_without_spills_on_sm90():
    """The default 64 x 64 blocks at d = 64 (the pipeline's shape): no spills, and the checks hold.
    (Slow: 10-30 s cold; ``pcast-gpu-check --compile-only`` checks this shape on every target in CI.)"""
    f = facts_of("sm_90", n=1024, d=64, scale=256.0)
    assert f["num_warps"] == attention_num_warps(64, 64, 64) == 16
    assert C.check_spills(f)[0], C.check_spills(f)
    checks = _faithful_checks(f, exp2_offset=False, block_m=64, block_n=64, head_d=64)
    assert all(ok for ok, _ in checks.values()), checks


@pytest.mark.slow
def test_spill_check_fails_with_four_warps_at_preset_blocks():
    """Four warps at 64 x 64 x 64 (the launcher passes eight): ptxas spills, and the check says so."""
    f = kernel_facts(compile_attention("sm_90", n=1024, d=64, scale=256.0, launch_options={"num_warps": 4}))
    ok, detail = C.check_spills(f)
    assert not ok and "stack 0 B" not in detail


def test_fusion_check_fails_with_fusion_on():
    f = kernel_facts(compile_attention("sm_90", **SMALL, scale=256.0, launch_options={"enable_fp_fusion": True}))
    ok, detail = C.check_fusion(f, C.dot_fmas(16, 16, 16, f["num_warps"]))
    assert not ok, detail
    assert any(op in f["ptx"] for op in ("mul.f32", "add.f32")) or f["ptx"].get("fma.rn.f32", 0) > C.dot_fmas(
        16, 16, 16, f["num_warps"])


def _broken_kernel_module(tmp_path: Path, old: str, new: str, name: str):
    """A copy of kernels/triton/kernel.py with ``old`` replaced by ``new`` (which must occur), imported."""
    import importlib.util

    import pcast.triton.kernel as kmod

    src = Path(kmod.__file__).read_text()
    assert old in src
    path = tmp_path / f"{name}.py"
    path.write_text(src.replace(old, new))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _compile_module_kernel(mod, target="sm_90"):
    q = torch.zeros(1, 2, 64, 16)
    grid, args, kwargs, _, _ = mod.attention_launch(
        q, q, q.clone(), reverse=False, scale=256.0, fmt=__import__("pcast").get_format("e4m3fn"), causal=False,
        ksink=4, block_m=16, block_n=16, sm_scale=0.25, rowsum_rounded=False)
    return kernel_facts(compile_launch(target, mod._attn_fwd, args, kwargs))


def test_tf32_check_fails_with_tf32_dots(tmp_path):
    mod = _broken_kernel_module(tmp_path, 'input_precision="ieee"', 'input_precision="tf32"', "kernel_tf32")
    f = _compile_module_kernel(mod)
    ok, detail = C.check_no_tf32(f)
    assert not ok and "tf32" in detail


def test_div_check_fails_with_a_plain_division(tmp_path):
    mod = _broken_kernel_module(tmp_path, "out = tl.div_rn(acc, tl.broadcast_to(den[:, None], acc.shape))",
                                "out = acc / den[:, None]", "kernel_div")
    f = _compile_module_kernel(mod)
    ok, detail = C.check_div(f)
    assert not ok and "div.full.f32" in detail


def test_exp_check_names_the_other_modes_instruction():
    mult = facts_of("sm_90", **SMALL, scale=256.0, order="reverse")
    assert C.check_exp(mult, False)[0] and not C.check_exp(mult, True)[0]


# --------------------------------------------------------------------------- the hardware FP8 cast


@triton.jit
def _cast_via_f16(X, Y, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < N, other=0.0)
    tl.store(Y + offs, x.to(tl.float16).to(tl.float8e4nv).to(tl.float32), mask=offs < N)


@triton.jit
def _cast_in_software(X, Y, N, BLOCK: tl.constexpr):
    """E4M3 bits built with integer operations (truncating, normal range only): a cast with no cvt."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < N, other=0.0)
    b = x.to(tl.int32, bitcast=True)
    e4m3 = (((b >> 31) & 1) << 7) | ((((b >> 23) & 255) - 120) << 3) | ((b >> 20) & 7)
    tl.store(Y + offs, e4m3.to(tl.int8).to(tl.float8e4nv, bitcast=True).to(tl.float32), mask=offs < N)


def _cast_facts(kernel, target):
    x = torch.zeros(1024)
    return kernel_facts(compile_launch(target, kernel, (x, x.clone(), 1024), {"BLOCK": 1024, **LAUNCH_OPTIONS}))


def test_an_interpreted_launch_leaves_triton_language_as_it_was():
    """Interpreted device calls (``tl.max`` and the like) patch ``triton.language.core`` and never
    put it back; the launcher does, so a compilation after an interpreted run in the same process
    still works."""
    import triton.language as tl

    owners = (tl, tl.core, tl.math, tl.standard, tl.core.tensor)
    before = [dict(vars(o)) for o in owners]
    x = torch.randn(1, 1, 32, 16)
    pcast.attention(x, x, x, backend="triton", block_m=16, block_n=16)
    after = [dict(vars(o)) for o in owners]
    # every attribute that was there is as it was; the tensor class gained nothing either
    changed = [(o.__name__, k) for o, b, a in zip(owners, before, after) for k in b if b[k] is not a.get(k)]
    changed += [("tensor", k) for k in set(after[-1]) - set(before[-1])]
    assert not changed, changed[:10]
    assert C.check_cast(_cast_facts(_builtin_cast_kernel, "sm_90"), hardware=True)[0]


@pytest.mark.parametrize("target", list(TARGETS))
def test_hardware_cast_is_cvt_rn_satfinite_e4m3x2_f32(target):
    f = _cast_facts(_builtin_cast_kernel, target)
    ok, detail = C.check_cast(f, hardware=True)
    assert ok, detail
    assert C.check_target(f)[0]


@pytest.mark.parametrize("kernel", [_cast_via_f16, _cast_in_software], ids=["via-f16", "software"])
def test_cast_check_fails_for_a_float16_round_trip_or_a_software_cast(kernel):
    f = _cast_facts(kernel, "sm_89")
    ok, detail = C.check_cast(f, hardware=True)
    assert not ok, detail


# --------------------------------------------------------------------------- the API


def test_compile_attention_rejects_bad_arguments_before_compiling():
    with pytest.raises(ValueError, match="target='sm_80' is not allowed"):
        compile_attention("sm_80")
    with pytest.raises(ValueError, match="backend='cuda' is not allowed"):
        compile_attention("sm_90", backend="cuda")
    with pytest.raises(ValueError, match="block_n"):
        compile_attention("sm_90", block_n=24)
    with pytest.raises(ValueError, match="nonsense"):
        compile_attention("sm_90", nonsense=1)


def test_compiled_kernel_carries_the_launch_options():
    f = facts_of("sm_90", **SMALL, scale=256.0, order="reverse")
    assert f["options"]["enable_fp_fusion"] is False
    assert f["num_warps"] == attention_num_warps(16, 16, 16)
    assert f["target_line"] == ".target sm_90a"


# --------------------------------------------------------------------------- the deploy kernel

DEPLOY_SMALL = dict(n=128, d=16, block_m=64, block_n=32)  # the smallest tiles every FP8 MMA takes


def _deploy_facts(target, scale, module=None):
    if module is None:
        return facts_of(target, backend="triton-fp8", scale=scale, **DEPLOY_SMALL)
    q = torch.zeros(1, 2, 128, 16)
    grid, args, kwargs, _ = module.deploy_launch(
        q, q, q.clone(), reverse=False, scale=scale, fmt=__import__("pcast").get_format("e4m3fn"), causal=False,
        block_m=64, block_n=32, sm_scale=0.25, rowsum_rounded=False, scale_mode="exp2_offset",
        v_fmt=__import__("pcast").get_format("e4m3fn"), capability=TARGETS[target])
    return kernel_facts(compile_launch(target, module._attn_fwd_fp8, args, kwargs))


@pytest.mark.parametrize("target", list(TARGETS))
def test_deploy_kernel_casts_in_hardware_and_multiplies_on_fp8_tensor_cores(target):
    f = _deploy_facts(target, 256.0)
    for check in (C.check_fp8_mma(f), C.check_cast(f, hardware=True), C.check_exp(f, True), C.check_no_tf32(f),
                  C.check_div(f), C.check_target(f)):
        assert check[0], check
    assert C.check_fusion(f, C.dot_fmas(64, 32, 16, f["num_warps"]) // 2)[0]  # only the score dot's FMAs


def test_deploy_fix_is_free_in_sass_on_sm90():
    """S = 256 adds only the per-row offset (FADDs) to S = 1; the per-element work is the same."""
    ok, d = C.compare_scales(_deploy_facts("sm_90", 1.0), _deploy_facts("sm_90", 256.0))
    assert ok, d
    assert d["loop_diff"].get("FADD", 0) > 0  # the offset is there at S = 256 and compiled away at S = 1


def test_scale_comparison_fails_when_s_is_a_multiply_after_exp(tmp_path):
    """S as a multiply after exp (hpc-ops, FlashInfer) costs a per-element FMUL at S = 256: the check says so."""
    mod = _deploy_module(tmp_path, "x = tl.exp2(s * _LOG2E - row[:, None])",
                         "x = tl.exp2(s * _LOG2E - (m_safe * _LOG2E)[:, None]) * tl.exp2(LOG2S)", "multiply")
    ok, d = C.compare_scales(_deploy_facts("sm_90", 1.0, mod), _deploy_facts("sm_90", 256.0, mod))
    assert not ok and d["loop_diff"].get("FMUL", 0) > 0, d


_SOFTWARE_E4M3 = '''

@triton.jit
def _software_e4m3(x):
    """E4M3 bits of x >= 0 already on the grid, built with integer operations: no conversion instruction."""
    r = fp8_round(x, 3, -6, 448.0)
    b = r.to(tl.int32, bitcast=True)
    normal = (((b >> 23) - 120) << 3) | ((b >> 20) & 7)
    byte = tl.where(r >= 0.015625, normal, (r * 512.0).to(tl.int32))
    return byte.to(tl.int8).to(tl.float8e4nv, bitcast=True)
'''


def _deploy_module(tmp_path, old, new, name, extra=""):
    """A copy of kernels/triton/deploy.py with ``old`` replaced by ``new`` (and ``extra`` appended), imported."""
    import importlib.util

    import pcast.triton.deploy as dmod

    src = Path(dmod.__file__).read_text()
    assert old in src
    path = tmp_path / f"deploy_{name}.py"
    path.write_text(src.replace(old, new) + extra)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("cast", ["software", "via-f16"])
def test_cast_check_fails_for_a_deploy_kernel_without_the_hardware_cast(tmp_path, cast):
    new = "p8 = _software_e4m3(x)" if cast == "software" else "p8 = x.to(tl.float16).to(tl.float8e4nv)"
    mod = _deploy_module(tmp_path, "p8 = x.to(tl.float8e4nv)", new, cast.replace("-", "_"),
                         _SOFTWARE_E4M3 + "\nfrom pcast.triton.rounding import fp8_round\n")
    f = _deploy_facts("sm_90", 256.0, module=mod)
    assert C.check_fp8_mma(f)[0]  # still an FP8 MMA: only the cast changed
    ok, detail = C.check_cast(f, hardware=True)
    assert not ok, detail


def test_deploy_kernel_without_a_gpu_names_compile_only():
    from pcast.triton.deploy import triton_fp8_attention

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    q = torch.zeros(1, 1, 64, 16)
    with pytest.raises(RuntimeError, match="--compile-only"):
        triton_fp8_attention(q, q, q)
    with pytest.raises(RuntimeError, match="--compile-only"):
        __import__("pcast.aot").aot.deploy_attention(q, q, q, scale=256.0)


def test_deploy_kernel_rejects_options_it_does_not_implement():
    with pytest.raises(ValueError, match="fmt='e5m2' is not allowed with backend='triton-fp8'"):
        compile_attention("sm_90", backend="triton-fp8", fmt="e5m2")
    with pytest.raises(ValueError, match="rescale_threshold"):
        compile_attention("sm_90", backend="triton-fp8", rescale_threshold=8.0)


# --------------------------------------------------------------------------- pcast-gpu-check --compile-only


def test_compile_only_set_covers_every_constexpr_value():
    """The representative set sets each boolean / mode constexpr of _attn_fwd to each of its values (no compile)."""
    from pcast.aot import attention_launch_for
    from pcast.cli.compile_check import _options, tasks

    seen = {}
    for _, _, kind, kw in tasks(["sm_90"]):
        if kind == "faithful":
            for name, value in attention_launch_for(**_options(kw))[3].items():
                seen.setdefault(name, set()).add(value)
    for name in ("REVERSE", "CAUSAL", "QUANT", "ROWSUM_ROUNDED", "EXP2_OFFSET", "LAZY", "QK_QUANT", "V_QUANT",
                 "PER_ROW"):
        assert seen[name] == {False, True}, (name, seen[name])
    assert seen["SINK_MODE"] == {0, 1, 2} and seen["MX"] == {0, 1, 2} and {2, 3} <= seen["MAN_BITS"]
    assert seen["enable_fp_fusion"] == {False}


def test_compile_only_rejects_an_unknown_target(capsys):
    from pcast.cli.gpu_check import main

    assert main(["--compile-only", "--targets", "sm_80"]) == 2
    assert "sm_80" in capsys.readouterr().err
