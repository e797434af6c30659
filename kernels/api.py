"""The front door: :func:`attention`, with argument checking and backend choice."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .contract import BACKENDS, BLOCK_SIZES, HEAD_DIMS, ORDERS, ROWSUMS, is_allowed
from .formats import FORMATS, FP8Format, get_format

__all__ = ["attention", "AttentionResult", "ORDERS", "BACKENDS", "ROWSUMS", "resolve_backend", "fp8_gpu_available"]


@dataclass
class AttentionResult:
    """Output and per-row diagnostics of one attention call.

    Attributes:
        out: float32 [B, H, Nq, d] (float64 for the reference backend).
        underflow: int64 [B, H, Nq]: unmasked non-sink keys (position >= ksink) with p > 0 but p_q == 0.
        underflow_sink: int64 [B, H, Nq]: the same for sink keys.
        saturated: int64 [B, H, Nq]: unmasked entries with p·S above the format's max finite value.
        terms: int64 [B, H, Nq]: unmasked non-sink keys with p > 0.
        terms_sink: int64 [B, H, Nq]: unmasked sink keys with p > 0.
        backend: what actually ran: "triton-compiled", "triton-interpreted", "emulator" or "reference".
    """

    out: torch.Tensor
    underflow: torch.Tensor
    underflow_sink: torch.Tensor
    saturated: torch.Tensor
    terms: torch.Tensor
    terms_sink: torch.Tensor
    backend: str


def fp8_gpu_available() -> bool:
    """True when a CUDA GPU with FP8 support (compute capability >= 8.9) is present."""
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)


def resolve_backend(backend: str, device: torch.device) -> str:
    """Map a requested backend to what will run: triton-compiled, triton-interpreted, emulator, reference."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not allowed; allowed: {', '.join(BACKENDS)}")
    if backend == "auto":
        return "triton-compiled" if fp8_gpu_available() else "emulator"
    if backend == "triton":
        if device.type == "cuda" or (device.type == "cpu" and fp8_gpu_available()):
            return "triton-compiled"
        return "triton-interpreted"
    return backend


def _check(q, k, v, *, order, scale, fmt, causal, ksink, block_m, block_n, sm_scale, rowsum, backend):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.float32:
            raise ValueError(f"{name} must be float32, got {t.dtype}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have shape [B, H, N, d] (4 dims), got {tuple(t.shape)}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    B, H, Nq, d = q.shape
    if k.shape[:2] != (B, H) or k.shape[-1] != d:
        raise ValueError(f"k shape {tuple(k.shape)} does not match q shape {tuple(q.shape)} (need [B, H, Nk, d])")
    if v.shape != k.shape:
        raise ValueError(f"v shape {tuple(v.shape)} must equal k shape {tuple(k.shape)}")
    if Nq < 1 or k.shape[2] < 1:
        raise ValueError(f"sequence lengths must be >= 1, got Nq={Nq}, Nk={k.shape[2]}")
    if not is_allowed(d, HEAD_DIMS):
        raise ValueError(f"head dimension d={d} is not allowed; allowed: a power of two from 16 to 256")
    if order not in ORDERS:
        raise ValueError(f"order={order!r} is not allowed; allowed: {', '.join(ORDERS)}")
    if rowsum not in ROWSUMS:
        raise ValueError(f"rowsum={rowsum!r} is not allowed; allowed: {', '.join(ROWSUMS)}")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale={scale!r} is not allowed; allowed: a finite number > 0")
    if fmt is not None and not isinstance(fmt, FP8Format) and fmt not in FORMATS:
        raise ValueError(f"fmt={fmt!r} is not allowed; allowed: None, {', '.join(FORMATS)}")
    if not isinstance(causal, bool):
        raise ValueError(f"causal={causal!r} is not allowed; allowed: True or False")
    if isinstance(ksink, bool) or not isinstance(ksink, int) or ksink < 0:
        raise ValueError(f"ksink={ksink!r} is not allowed; allowed: an int >= 0")
    for name, b in (("block_m", block_m), ("block_n", block_n)):
        if not is_allowed(b, BLOCK_SIZES):
            raise ValueError(f"{name}={b!r} is not allowed; allowed: a power of two from 16 to 256")
    if sm_scale is not None and (isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float))
                                 or not math.isfinite(sm_scale) or sm_scale <= 0):
        raise ValueError(f"sm_scale={sm_scale!r} is not allowed; allowed: None or a finite number > 0")
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not allowed; allowed: {', '.join(BACKENDS)}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        # max and min propagate NaN and expose +-inf: two fast reductions instead of an
        # elementwise isfinite mask over the whole tensor.
        if t.numel() and not (math.isfinite(float(t.amax())) and math.isfinite(float(t.amin()))):
            raise ValueError(f"{name} contains NaN or inf; inputs must be finite")


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, order: str = "forward", scale: float = 1.0,
              fmt: str | FP8Format | None = "e4m3fn", causal: bool = False, ksink: int = 0, block_m: int = 64,
              block_n: int = 64, sm_scale: float | None = None, rowsum: str = "unrounded",
              backend: str = "auto") -> AttentionResult:
    """FlashAttention-style forward attention with P scaled by S and cast to FP8 before P·V.

    The contract, per query row, walking the KV blocks of ``block_n`` keys first to last
    (``order="forward"``) or last to first (``order="reverse"``); m starts at -inf, l and acc at 0:

    1. scores: ``s = q·kᵀ·sm_scale`` in float32 with exact fp32 products (no TF32); masked keys get -inf.
    2. running max: ``m_new = max(m, rowmax(s))``; ``p = exp(s - m_new)``; ``alpha = exp(m - m_new)``.
    3. cast: ``p_q = quantize(p·S, fmt)`` (round to nearest even on the FP8 grid, saturating at ±max).
    4. row sum: ``l = l·alpha + rowsum(p)`` (the UNROUNDED p, as FlashAttention-3 and FlashInfer do;
       ``rowsum="rounded"`` sums ``p_q / S`` instead).
    5. accumulate: ``acc = acc·alpha + p_q·V`` in float32 (V stays float32: only the P cast is studied).
    6. normalise: ``out = acc / (l·S)``.

    The step names are :data:`kernels.contract.STEPS`; every implementation marks each step
    ``# step N: name``. The diagnostics (see :class:`AttentionResult`) are not a step.

    Args:
        q: float32 [B, H, Nq, d]; k, v: float32 [B, H, Nk, d]. d is a power of two in 16..256.
        order: "forward" or "reverse".
        scale: S > 0 (1, 256, 448, ...).
        fmt: an FP8 format name (see :data:`kernels.formats.FORMATS`) or None for no rounding.
        causal: top-left aligned causal mask, as torch SDPA's ``is_causal`` (key j visible to query i iff j <= i).
        ksink: keys at positions < ksink are sinks; used only to split the diagnostics.
        block_m, block_n: query rows per program and keys per KV block (powers of two, 16..256).
        sm_scale: score scale; default 1/sqrt(d).
        rowsum: "unrounded" or "rounded" (see step 4).
        backend: "auto" (compiled Triton on a CUDA GPU with capability >= 8.9, else the emulator),
            "triton" (compiled on a GPU, interpreted on CPU), "emulator" or "reference" (float64, no rounding).

    Returns:
        :class:`AttentionResult` on the inputs' device.

    Raises:
        ValueError: naming the argument and what is allowed.
    """
    _check(q, k, v, order=order, scale=scale, fmt=fmt, causal=causal, ksink=ksink, block_m=block_m,
           block_n=block_n, sm_scale=sm_scale, rowsum=rowsum, backend=backend)
    d = q.shape[-1]
    sm = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    f = None if fmt is None else get_format(fmt)
    ran = resolve_backend(backend, q.device)
    kw = dict(reverse=order == "reverse", scale=float(scale), fmt=f, causal=causal, ksink=ksink,
              block_n=block_n, sm_scale=sm, rowsum_rounded=rowsum == "rounded")
    if ran == "reference":
        return _reference_result(q, k, v, causal, ksink, sm)
    if ran == "emulator":
        from .emulator import emulate_attention

        out, diag = emulate_attention(q, k, v, **kw)
    else:
        out, diag = _run_triton(q, k, v, compiled=ran == "triton-compiled", block_m=block_m, **kw)
    return AttentionResult(out=out, backend=ran, **diag)


def _run_triton(q, k, v, *, compiled: bool, **kw):
    """Run the Triton kernel (on the GPU when ``compiled``); results come back on the inputs' device."""
    from .triton_kernel import triton_attention

    dev = q.device
    if compiled and dev.type != "cuda":
        q, k, v = (t.cuda() for t in (q, k, v))
    out, diag = triton_attention(q, k, v, **kw)
    return out.to(dev), {n: t.to(dev) for n, t in diag.items()}


def _reference_result(q, k, v, causal, ksink, sm_scale):
    """The float64 reference, and its diagnostics: nothing is rounded, so no underflow or saturation;
    terms count visible keys."""
    from .reference import causal_mask, reference_attention

    out = reference_attention(q, k, v, causal=causal, sm_scale=sm_scale)
    zeros = torch.zeros(q.shape[:3], dtype=torch.int64, device=q.device)
    Nq, Nk = q.shape[2], k.shape[2]
    vis = causal_mask(Nq, Nk, device=q.device) if causal else torch.ones(Nq, Nk, dtype=torch.bool, device=q.device)
    ks = min(ksink, Nk)
    terms = vis[:, ks:].sum(-1).expand(q.shape[:3]).to(torch.int64)
    terms_sink = vis[:, :ks].sum(-1).expand(q.shape[:3]).to(torch.int64)
    return AttentionResult(out=out, underflow=zeros, underflow_sink=zeros.clone(), saturated=zeros.clone(),
                           terms=terms.clone(), terms_sink=terms_sink.clone(), backend="reference")
