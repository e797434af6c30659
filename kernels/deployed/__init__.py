"""Deployed kernels' own code as black boxes: :func:`load` ``(name)`` -> ``fn(q, k, v, *, sink_logit=None)``.

Each adapter (:data:`ADAPTERS`) runs one real kernel of a pinned release, fetched by ``python -m pcast.deployed
fetch`` into a cache (:mod:`pcast.deployed.cache`), never installed. On CPU tensors the kernel runs under
Triton's interpreter with :func:`pcast.triton.fp8cast.fp8_cast_fixed` (the interpreter's own FP8 downcast is
wrong). ``fn`` takes q [B, H, Nq, d] and k, v [B, H_kv, N, d] in float32, bf16 or fp16 (H a multiple of H_kv)
and ``sink_logit`` None or [H] float32, and returns float32 [B, H, Nq, d] with the default score scale
1/sqrt(d).

Adding a kernel: a runner module here (a function ``(q, k, v, sink_logit, module) -> out``) and one
:class:`Adapter` in :data:`pcast.deployed.registry.ADAPTERS` (its wheel in ``WHEELS``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys

from pcast.deployed.cache import MissingWheel, cache_dir, fetch, missing, unpacked
from pcast.deployed.registry import ADAPTERS, CACHE_ENV, FETCH_COMMAND, WHEELS, Adapter, Wheel

__all__ = ["load", "ADAPTERS", "WHEELS", "Adapter", "Wheel", "FETCH_COMMAND", "CACHE_ENV", "MissingWheel",
           "cache_dir", "fetch", "missing", "kernel_module"]


def _adapter(name: str) -> Adapter:
    if name not in ADAPTERS:
        raise ValueError(f"name={name!r} is not allowed; allowed: {', '.join(ADAPTERS)}")
    return ADAPTERS[name]


@contextlib.contextmanager
def _env(**values):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


_LOADED: dict = {}


def kernel_module(name: str):
    """The kernel's module of adapter ``name``, imported from the cache with its ``@triton.jit`` functions
    made for the interpreter (vLLM needs ``CUDA_VISIBLE_DEVICES=""``, else it swaps in a placeholder Triton).

    Raises:
        MissingWheel: naming the fetch command when the wheel is not in the cache.
    """
    a = _adapter(name)
    root = unpacked(a.wheel)
    if a.name in _LOADED:
        return _LOADED[a.name]
    import triton  # lazy: triton is not part of the slim install

    previous = triton.knobs.runtime.interpret
    triton.knobs.runtime.interpret = True  # @triton.jit then makes InterpretedFunctions
    try:
        with _env(CUDA_VISIBLE_DEVICES=""):
            if a.loader:
                mod_name, fn_name = a.loader.split(":")
                mod = getattr(importlib.import_module(mod_name), fn_name)(root, a.module)
            else:
                if str(root) not in sys.path:
                    sys.path.append(str(root))
                mod = importlib.import_module(a.module)
        _LOADED[a.name] = mod
        return mod
    finally:
        triton.knobs.runtime.interpret = previous


def load(name: str):
    """``fn(q, k, v, *, sink_logit=None)`` running adapter ``name``'s kernel (see the module docstring).

    Raises:
        ValueError: for an unknown name (naming the allowed ones).
        MissingWheel: naming the fetch command when the wheel is not in the cache.
    """
    a = _adapter(name)
    mod = kernel_module(name)
    runner_mod, runner_fn = a.runner.split(":")
    run = getattr(importlib.import_module(runner_mod), runner_fn)

    def fn(q, k, v, *, sink_logit=None):
        # lazy: pcast.triton needs Triton, which is not part of the slim install
        from pcast.triton.fp8cast import fp8_cast_fixed
        # lazy: pcast.triton needs Triton, which is not part of the slim install
        from pcast.triton.interpret import interpreting

        with interpreting(), fp8_cast_fixed():
            return run(q, k, v, sink_logit, mod)

    fn.__name__ = fn.__qualname__ = name.replace("-", "_")
    fn.adapter = a
    return fn
