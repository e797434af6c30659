"""The instruction checks of a compiled kernel (docs/compiled.md), each on :func:`pcast.triton.aot.kernel_facts`.

Every check returns ``(ok, detail)``; ``detail`` says what was counted. They read the PTX that Triton
hands to ptxas (instructions with their rounding modifiers) and ptxas's resource usage:

* :func:`check_fusion`: no multiply-add contracted outside ``tl.dot``: the float32 FMAs are exactly the
  ieee dots' ``2·BLOCK_M·BLOCK_N·HEAD_D / threads`` per thread, and every float32 ``mul``/``add``/``sub``
  carries an explicit rounding mode (``.rn``), which ptxas may not contract either;
* :func:`check_no_tf32`: no TF32 instruction;
* :func:`check_exp`: the exp instructions are exactly the one docs/interfaces.md names for the scale mode;
* :func:`check_div`: every float32 division is ``div.rn.f32`` (no ``div.full`` / ``div.approx``);
* :func:`check_cast`: the faithful kernel has no hardware FP8 conversion (software ``fp8_round``); the
  deploy kernel casts with ``cvt.rn.satfinite.e4m3x2.f32`` and never through float16;
* :func:`check_target`: the ``.target`` line of the target (``sm_90a``/``sm_100a``: the arch-specific ISA);
* :func:`check_spills`: no local memory, stack frame or spill instruction (``LDL``/``STL``).
"""

from __future__ import annotations

import collections
import re

__all__ = ["compare_scales", "EXP_INSTRUCTION", "HW_CAST", "TARGET_LINE", "FP8_MMA", "dot_fmas", "check_fusion", "check_no_tf32",
           "check_exp", "check_div", "check_cast", "check_target", "check_spills", "check_fp8_mma"]

# The exp instruction of each scale mode, the same on sm_89, sm_90 and sm_100 (docs/interfaces.md,
# "Compiled instructions"): tl.exp is fl(y·LOG2E) then ex2.approx.f32 (at most 2 ulp, subnormal results
# kept); tl.exp2 is ex2.approx.ftz.f32 (at most 2 ulp, results below 2^-126 flushed to 0).
EXP_INSTRUCTION = {False: "ex2.approx.f32", True: "ex2.approx.ftz.f32"}  # keyed by EXP2_OFFSET
HW_CAST = "cvt.rn.satfinite.e4m3x2.f32"
TARGET_LINE = {89: ".target sm_89", 90: ".target sm_90a", 100: ".target sm_100a"}
# The FP8 (e4m3 x e4m3 -> f32) tensor-core instruction of each target, as a PTX opcode prefix.
FP8_MMA = {89: "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", 90: "wgmma.mma_async.sync.aligned.",
           100: "tcgen05.mma.cta_group::1.kind::f8f6f4"}

_CONTRACTIBLE = re.compile(r"^(mul|add|sub|fma|mad)(\.ftz)?\.f32(x2)?$")  # float32 arithmetic, no rounding mode


def _ptx(facts) -> dict:
    return facts["ptx"]


def dot_fmas(block_m: int, block_n: int, head_d: int, num_warps: int) -> int:
    """Float32 FMAs per thread of the faithful kernel's two ieee dots (q·kᵀ and p_q·V) in one KV-loop pass."""
    return 2 * block_m * block_n * head_d // (32 * num_warps)


def check_fusion(facts, expected_fmas: int):
    ptx = _ptx(facts)
    fma = ptx.get("fma.rn.f32", 0) + 2 * ptx.get("fma.rn.f32x2", 0)
    loose = {op: n for op, n in ptx.items() if _CONTRACTIBLE.match(op)}
    ok = fma == expected_fmas and not loose
    return ok, f"fma.rn.f32 {fma} (dots: {expected_fmas}); without a rounding mode: {loose or 'none'}"


def check_no_tf32(facts):
    tf32 = {op: n for op, n in _ptx(facts).items() if "tf32" in op}
    return not tf32, f"TF32 instructions: {tf32 or 'none'}"


def exp_instructions(facts) -> dict:
    return {op: n for op, n in _ptx(facts).items() if op.startswith(("ex2", "lg2")) or ".exp" in op}


def check_exp(facts, exp2_offset: bool):
    found = exp_instructions(facts)
    want = EXP_INSTRUCTION[bool(exp2_offset)]
    return set(found) == {want}, f"{found or 'none'} (expected {want} only)"


def check_div(facts):
    divs = {op: n for op, n in _ptx(facts).items() if op.startswith(("div.", "rcp.")) and ".f32" in op}
    return all(op == "div.rn.f32" for op in divs), f"float32 divisions: {divs or 'none'}"


def cast_instructions(facts) -> dict:
    return {op: n for op, n in _ptx(facts).items()
            if op.startswith("cvt") and any(t in op for t in ("e4m3", "e5m2", "f16", "bf16"))}


def _down_casts(found: dict) -> dict:
    """The conversions that round: float32 to float16 / bfloat16 / FP8, and float16 to FP8 (``cvt.<dst>.<src>``;
    FP8 to float16 to float32, the way back up, is exact and allowed)."""
    narrow = ("e4m3", "e5m2", "f16", "bf16")
    return {op: n for op, n in found.items()
            if op.split(".")[-2].startswith(narrow) and op.split(".")[-1].startswith(("f32", "f16", "bf16"))
            and op.split(".")[-2] != op.split(".")[-1]}


def check_cast(facts, hardware: bool):
    """hardware: the deploy kernel (every rounding conversion is cvt.rn.satfinite.e4m3x2.f32: no float16
    step); else the faithful kernel (no rounding conversion at all: P is rounded by fp8_round in float32)."""
    down = _down_casts(cast_instructions(facts))
    ok = set(down) == {HW_CAST} if hardware else not down
    return ok, f"rounding conversions {down or 'none'} (expected {HW_CAST if hardware else 'none'})"


def check_target(facts):
    want = TARGET_LINE[facts["arch"]]
    return facts["target_line"] == want, f"{facts['target_line']!r} (expected {want!r})"


def check_spills(facts):
    spill_ops = sum(n for op, n in facts["sass"].items() if op.startswith(("LDL", "STL")))
    ok = facts["local"] == 0 and facts["stack"] == 0 and spill_ops == 0
    return ok, f"registers {facts['reg']}, stack {facts['stack']} B, local {facts['local']} B, LDL/STL {spill_ops}"


def check_fp8_mma(facts):
    want = FP8_MMA[facts["arch"]]
    found = {op: n for op, n in _ptx(facts).items() if op.startswith(want) and ("e4m3" in op or "f8f6f4" in op)}
    return bool(found), f"{found or 'none'} (expected {want}...e4m3)"


# SASS opcodes whose counts are the per-element work of the deploy kernel's KV loop: exp2, the FP8 cast,
# the MMAs, and the float32 multiplies and FMAs (the score dot and x's argument).
_PER_ELEMENT = re.compile(r"^(MUFU|F2FP|HMMA|QGMMA|UTCQMMA|UTCMMA|FMUL|FFMA|FMNMX|FSEL|FSETP)")


def compare_scales(f1, f256, *, limit: int = 8):
    """The deploy kernel at S = 1 against S = 256 (the "fix is free" comparison), from their SASS: the KV
    loop's and the whole kernel's instruction counts and their differences. ok: no per-element opcode count
    differs in the loop, and the loop and the whole kernel each differ by at most ``limit`` instructions
    (the per-row offset m·LOG2E - 8 of each row a thread holds, and register allocation)."""
    loops = [collections.Counter(f["loop_sass"]) for f in (f1, f256)]
    totals = [collections.Counter(f["sass"]) for f in (f1, f256)]

    def diff(a, b):
        return {op: b[op] - a[op] for op in sorted(set(a) | set(b)) if b[op] != a[op]}

    d_loop, d_total = diff(*loops), diff(*totals)
    per_element = {op: n for op, n in d_loop.items() if _PER_ELEMENT.match(op)}
    small = all(sum(abs(n) for n in d.values()) <= limit for d in (d_loop, d_total))
    ok = bool(loops[0]) and not per_element and small
    return ok, {"loop": [sum(c.values()) for c in loops], "total": [sum(c.values()) for c in totals],
                "loop_diff": d_loop, "total_diff": d_total}
