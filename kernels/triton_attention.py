"""Thin launchers for the Triton kernels, compiled on a CUDA GPU and interpreted on CPU.

The kernel sources live in :mod:`kernels._triton_src` as ordinary ``@triton.jit``
functions. CUDA tensors launch them compiled; CPU tensors launch them through
Triton's interpreter (see :func:`_interpreting`), so no one has to set
``TRITON_INTERPRET`` by hand.
"""

from __future__ import annotations

import contextlib
import functools
import threading

import torch

from . import _triton_src as src
from .formats import FP8Format, get_format

__all__ = ["triton_attention", "triton_quantize", "triton_builtin_cast"]


@functools.lru_cache(maxsize=None)
def _interpreted(fn):
    from triton.runtime.interpreter import InterpretedFunction

    return InterpretedFunction(fn)


_INTERPRET_LOCK = threading.Lock()


@contextlib.contextmanager
def _interpreting():
    """Run Triton's interpreter for the launches inside, whatever TRITON_INTERPRET says.

    Inside an interpreted kernel every ``@triton.jit`` callee must run interpreted too,
    including Triton's own standard library (``tl.sum``, ``tl.max``, ...), which was
    created as compiled ``JITFunction`` objects when triton was imported. So, for the
    duration, calling a ``JITFunction`` runs its interpreted twin.
    """
    import triton
    from triton.runtime.jit import JITFunction

    with _INTERPRET_LOCK:
        original_call = JITFunction.__call__
        previous = triton.knobs.runtime.interpret
        JITFunction.__call__ = lambda self, *args, **kwargs: _interpreted(self.fn)(*args, **kwargs)
        triton.knobs.runtime.interpret = True
        try:
            yield
        finally:
            JITFunction.__call__ = original_call
            triton.knobs.runtime.interpret = previous


def _launch(kernel, grid, device: torch.device, *args, **kwargs):
    """Launch ``kernel`` compiled on CUDA tensors, interpreted on CPU tensors."""
    if device.type == "cuda":
        return kernel[grid](*args, **kwargs)
    with _interpreting():
        return _interpreted(kernel.fn)[grid](*args, **kwargs)


def triton_quantize(x: torch.Tensor, fmt: str | FP8Format = "e4m3fn", *, block: int = 1 << 16) -> torch.Tensor:
    """Round float32 ``x`` to the FP8 grid with the Triton helper ``fp8_round``."""
    f = get_format(fmt)
    if x.dtype != torch.float32:
        raise ValueError(f"x must be float32, got {x.dtype}")
    xc = x.contiguous().view(-1)
    y = torch.empty_like(xc)
    n = xc.numel()
    if n:
        grid = (triton_cdiv(n, block),)
        _launch(src._quantize_kernel, grid, x.device, xc, y, n, MAN_BITS=f.man_bits, EMIN=f.emin,
                MAX_FINITE=f.max_finite, BLOCK=block)
    return y.view(x.shape)


def triton_builtin_cast(x: torch.Tensor, *, block: int = 1 << 12) -> torch.Tensor:
    """Triton's built-in ``.to(tl.float8e4nv)`` round trip. Wrong when interpreted; see tests."""
    xc = x.contiguous().view(-1)
    y = torch.empty_like(xc)
    n = xc.numel()
    _launch(src._builtin_cast_kernel, (triton_cdiv(n, block),), x.device, xc, y, n, BLOCK=block)
    return y.view(x.shape)


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def triton_attention(q, k, v, *, reverse: bool, scale: float, fmt: FP8Format | None, causal: bool,
                     ksink: int, block_m: int, block_n: int, sm_scale: float, rowsum_rounded: bool):
    """Launch the attention kernel. Arguments are validated by :func:`kernels.attention`.

    q [B,H,Nq,d], k and v [B,H,Nk,d]: float32, last dim contiguous, one device.
    Returns ``(out [B,H,Nq,d], diag dict of int64 [B,H,Nq])``.
    """
    B, H, Nq, d = q.shape
    Nk = k.shape[-2]
    q, k, v = (t.contiguous() for t in (q, k, v))
    out = torch.empty_like(q)
    diag = torch.zeros(5, B * H, Nq, dtype=torch.int32, device=q.device)
    grid = (triton_cdiv(Nq, block_m), B * H)
    f = fmt if fmt is not None else get_format("e4m3fn")  # format constants unused when QUANT=False
    _launch(
        src._attn_fwd, grid, q.device,
        q, k, v, out, diag,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        H, Nq, Nk, float(sm_scale), float(scale), int(ksink),
        HEAD_D=d, BLOCK_M=block_m, BLOCK_N=block_n, REVERSE=reverse, CAUSAL=causal,
        QUANT=fmt is not None, MAN_BITS=f.man_bits, EMIN=f.emin, MAX_FINITE=f.max_finite,
        ROWSUM_ROUNDED=rowsum_rounded,
    )
    names = ("underflow", "underflow_sink", "saturated", "terms", "terms_sink")
    return out, {n: diag[i].to(torch.int64).view(B, H, Nq) for i, n in enumerate(names)}
