"""GPU-only checks: skipped cleanly without a CUDA GPU of capability >= 8.9.

The same checks, with timings and a JSON summary, run as ``pcast-gpu-check``.
"""

import pytest

from pcast.api import fp8_gpu_available

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not fp8_gpu_available(), reason="needs a CUDA GPU with capability >= 8.9")]


def test_software_rounding_compiled_matches_torch_cast():
    from pcast.cli.gpu_check import check_conversion

    r = check_conversion()
    assert r["sw_compiled_vs_cast_mismatches"] == 0
    assert r["torch_quantize_vs_cast_mismatches"] == 0


def test_compiled_kernel_matches_emulator():
    from pcast.cli.gpu_check import check_kernel

    rows = check_kernel()
    assert rows and all(r["kernel_backend"] == "triton-compiled" for r in rows)
    assert all(r["explained"] for r in rows), [r["why"] for r in rows if not r["explained"]]


def test_dot_is_ieee_fp32_not_tf32():
    from pcast.cli.gpu_check import check_ieee_dot

    assert check_ieee_dot()["unrounded_vs_reference_rel"] <= 1e-5


def test_compiled_kernel_policies_match_emulator():
    """The P-policy options compiled (exp2 offset, lazy rescaling, sinks, FP8 operands): every
    difference from the emulator explained, with the PTX ex2.approx bound for the compiled side."""
    from pcast.cli.gpu_check import check_policies

    rows, cast = check_policies()
    assert rows and all(r["kernel_backend"] == "triton-compiled" for r in rows)
    assert all(r["explained"] for r in rows), [(r["case"], r["why"]) for r in rows if not r["explained"]]
    assert cast["operand_cast_vs_reference_rel"] <= 1e-5  # tl.div_rn: the host's cast, bit for bit


def test_deploy_kernel_runs_and_times_s1_against_s256():
    """The deploy kernel (hardware cast, FP8 tensor core) on the GPU: close to the emulator with FP8 V and the
    GPU's tensor-core arithmetic (``pv_arith``; ex2.approx and the scores' matmul still differ, so a bound, not
    bits), and S = 256 no slower than S = 1 beyond noise."""
    from pcast.cli.gpu_check import check_deploy

    r = check_deploy(n=1024, reps=10)
    assert all(row["vs_emulator_fp32_max_rel"] < 0.05 for row in r["outputs"]), r["outputs"]
    assert all(row.get("vs_emulator_pv_arith_max_rel", 0.0) < 0.05 for row in r["outputs"]), r["outputs"]
    assert r["s256_over_s1"] < 1.10, r
