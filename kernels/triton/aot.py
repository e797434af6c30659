"""Compile the Triton kernels for a GPU on a machine without one, and read their instructions.

:func:`compile_launch` compiles exactly the specialization a launch would compile on a GPU of the
target: the launch's arguments go through Triton's own binder (pointer alignment and integer
divisibility, as ``JITFunction.run`` specializes them), with the launch's options, then through
``triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32))``. ptxas and cuobjdump ship in the
Triton wheel. Triton caches each compile by the kernel source's hash, the options and the target
(``TRITON_CACHE_DIR``, default ``~/.triton/cache``); :func:`kernel_facts` keeps what it reads from a
compiled kernel (instruction counts, ptxas's resource usage, SASS counts) beside it in
``$PCAST_AOT_CACHE`` (default ``~/.cache/pcast-fp8/aot``), under the same hash.

:func:`kernel_facts` reads a compiled kernel; :mod:`pcast.triton.aot_checks` judges the facts.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget

__all__ = ["TARGETS", "compile_launch", "kernel_facts", "ptx_opcodes", "sass_opcodes", "loop_sass", "cache_dir"]

# The targets: Ada (L4, L40S, RTX 4090), Hopper (H100, H200), Blackwell (B200).
TARGETS = {"sm_89": 89, "sm_90": 90, "sm_100": 100}


def cache_dir() -> Path:
    return Path(os.environ.get("PCAST_AOT_CACHE", Path.home() / ".cache" / "pcast-fp8" / "aot"))


def _capability(target: str) -> int:
    if target not in TARGETS:
        raise ValueError(f"target={target!r} is not allowed; allowed: {', '.join(TARGETS)}")
    return TARGETS[target]


def compile_launch(target: str, fn, args: tuple, kwargs: dict):
    """Compile ``fn[grid](*args, **kwargs)``'s specialization for ``target`` ("sm_89", "sm_90", "sm_100").

    ``args`` may hold CPU tensors: only their dtype and their pointers' 16-byte alignment count, as on the GPU.
    Returns Triton's ``CompiledKernel`` (``asm`` with "ttir", "ttgir", "llir", "ptx", "cubin", "sass"; ``metadata``).
    """
    from triton.compiler import ASTSource, make_backend  # lazy: triton is not part of the slim install
    from triton.runtime.jit import create_function_from_signature  # lazy: triton is not part of the slim install

    gpu = GPUTarget("cuda", _capability(target), 32)
    backend = make_backend(gpu)
    kwargs = dict(kwargs)  # the options JITFunction.run adds before it binds
    kwargs["debug"] = kwargs.get("debug", fn.debug) or triton.knobs.runtime.debug
    kwargs["instrumentation_mode"] = triton.knobs.compilation.instrumentation_mode
    kwargs["fpsan_homomorphic_casts"] = triton.knobs.compilation.fpsan_homomorphic_casts
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    return triton.compile(ASTSource(fn, signature, constexprs, attrs), target=gpu, options=options.__dict__)


_OPCODE = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][a-z0-9_]*(?:\.[a-z0-9_:]+)*)", re.M)


def ptx_opcodes(ptx: str) -> collections.Counter:
    """Every PTX instruction with its modifiers (``fma.rn.f32``, ``cvt.rn.satfinite.e4m3x2.f32``), counted."""
    body = ptx.split("\n.section", 1)[0]  # the debug sections hold no instructions
    lines = [ln.split("//", 1)[0] for ln in body.splitlines()]
    ops = collections.Counter()
    for ln in lines:
        m = _OPCODE.match(ln)
        if m and not ln.lstrip().startswith(".") and not ln.rstrip().endswith(":"):
            ops[m.group(1)] += 1
    return ops


# Triton's SASS listing: "<control codes>\t[@P0 ]OPCODE operands;" per instruction, "LBB3:" per label.
_SASS_LINE = re.compile(r"^[0-9a-fA-F-]{2}:\S*\t(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*)$")


def _sass_lines(sass: str) -> list[tuple[str, str]]:
    """``(opcode, rest)`` per SASS instruction (NOPs too: instruction i sits at byte 16·i) and
    ``("LABEL", name)`` per label, in order."""
    out = []
    for ln in sass.splitlines():
        if re.fullmatch(r"LBB\d+:", ln.strip()):
            out.append(("LABEL", ln.strip()[:-1]))
        elif m := _SASS_LINE.match(ln):
            out.append((m.group(1), m.group(2)))
    return out


def sass_opcodes(sass: str) -> collections.Counter:
    """SASS instructions with their modifiers (``FFMA``, ``MUFU.EX2``), counted (``NOP`` left out)."""
    return collections.Counter(op for op, _ in _sass_lines(sass) if op not in ("LABEL", "NOP"))


def loop_sass(sass: str) -> list[str]:
    """The opcodes (no NOPs) of the longest loop, the KV loop: from a branch's target (a label, or a byte
    address) up to that branch, when the target lies before it."""
    lines = _sass_lines(sass)
    where, at = {}, []  # label -> line; byte address // 16 -> line
    for i, (op, rest) in enumerate(lines):
        if op == "LABEL":
            where[rest] = i
        else:
            at.append(i)
    best = []
    for i, (op, rest) in enumerate(lines):
        if not op.startswith("BRA"):
            continue
        label, addr = re.search(r"\b(LBB\d+)", rest), re.search(r"\b0x([0-9a-f]+)\s*;", rest)
        start = where.get(label.group(1), i) if label else (at[int(addr.group(1), 16) // 16] if addr and int(
            addr.group(1), 16) // 16 < len(at) else i)
        if start < i and i - start > len(best):
            best = [o for o, _ in lines[start:i + 1] if o not in ("LABEL", "NOP")]
    return best


def _res_usage(cubin: bytes, name: str) -> dict:
    """ptxas's resource usage of kernel ``name``, read back from the cubin with the bundled ``cuobjdump``."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(cubin)
        fh.flush()
        text = subprocess.run([triton.knobs.nvidia.cuobjdump.path, "-res-usage", fh.name], check=True,
                              capture_output=True, text=True).stdout
    line = text.split(f"Function {name}:", 1)[1].splitlines()[1]
    return {k.lower(): int(v) for k, v in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", line)}


_FACTS_VERSION = 2  # what kernel_facts reads; a new reading gets new cache files


@functools.lru_cache(maxsize=None)
def _facts_cached(key: str, path: str) -> str:
    return Path(path).read_text()


def kernel_facts(kernel) -> dict:
    """What the checks read from a ``CompiledKernel``: the target line, PTX and SASS instruction counts,
    the KV loop's SASS sequence, shared memory and ptxas's registers, stack and local memory. Stored
    under the kernel's hash in :func:`cache_dir`, so a second reading costs no disassembly."""
    md = kernel.metadata
    path = cache_dir() / f"{md.hash}-{md.name}-v{_FACTS_VERSION}.json"
    if path.exists():
        return json.loads(_facts_cached(md.hash, str(path)))
    ptx = kernel.asm["ptx"]
    sass = kernel.asm["sass"]
    facts = {"name": md.name, "hash": md.hash, "arch": md.target.arch,
             "target_line": next(ln for ln in ptx.splitlines() if ln.startswith(".target")),
             "num_warps": md.num_warps, "shared": md.shared, "options": {
                 k: getattr(md, k) for k in ("enable_fp_fusion", "num_stages", "max_num_imprecise_acc_default")},
             "ptx": dict(ptx_opcodes(ptx)), "sass": dict(sass_opcodes(sass)), "loop_sass": loop_sass(sass),
             **_res_usage(kernel.asm["cubin"], md.name)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(facts, sort_keys=True))
    tmp.replace(path)
    return facts
