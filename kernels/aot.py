"""The attention kernel compiled for a GPU without one: :func:`compile_attention`.

One call's specialization, as :func:`pcast.attention` would launch it on a CUDA GPU of the target,
compiled on a CPU (``pcast.triton.aot``). docs/compiled.md describes the compiled kernels and checks.
"""

from __future__ import annotations

import inspect

import torch

from pcast import api

from pcast.api_decode import is_split_call

__all__ = ["compile_attention", "attention_launch_for", "deploy_attention", "COMPILE_BACKENDS"]

COMPILE_BACKENDS = ("triton", "triton-fp8")


def _inputs(batch, heads, n, n_kv, d):
    """Zero float32 CPU tensors of the call's shapes: only shapes, strides and alignment specialize."""
    for name, x in (("batch", batch), ("heads", heads), ("n", n), ("n_kv", n_kv), ("d", d)):
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise ValueError(f"{name}={x!r} is not allowed; allowed: a positive int")
    q = torch.zeros(batch, heads, n, d)
    kv = torch.zeros(batch, heads, n_kv, d)
    return q, kv, kv.clone()


def attention_launch_for(*, backend="triton", target="sm_90", batch=1, heads=2, n=1024, n_kv=None, d=64,
                         **attention_options):
    """``(kernel, grid, args, kwargs)`` of the launch :func:`pcast.attention` makes for these options at
    these shapes on a GPU of ``target`` (the options checked by ``pcast.attention``'s own checks)."""
    if backend not in COMPILE_BACKENDS:
        raise ValueError(f"backend={backend!r} is not allowed; allowed: {', '.join(COMPILE_BACKENDS)}")
    q, k, v = _inputs(batch, heads, n, n if n_kv is None else n_kv, d)
    if backend == "triton-fp8":  # the deploy kernel's own policy: S by exp2 offset, V in E4M3
        attention_options = {"scale_mode": "exp2_offset", "v_fmt": "e4m3fn", **attention_options}
    unknown = sorted(set(attention_options) - set(inspect.signature(api.attention).parameters))
    if unknown or "backend" in attention_options:
        raise ValueError(f"{', '.join(unknown)} is not allowed; allowed: the keywords of pcast.attention")
    args = inspect.signature(api.attention).bind(q, k, v, **attention_options)
    args.apply_defaults()
    args = {**args.arguments, "backend": "triton"}
    kw, _, block_m = api.prepare_call(q, k, (v,), args)
    if backend == "triton-fp8":
        # lazy: pcast.triton needs Triton, which is not part of the slim install
        from pcast.triton.deploy import _attn_fwd_fp8, deploy_launch

        from pcast.triton.aot import TARGETS  # lazy: pcast.triton needs Triton, which is not part of the slim install

        grid, a, kwargs, _ = deploy_launch(q, k, v, block_m=block_m, capability=TARGETS[target], **kw)
        return _attn_fwd_fp8, grid, a, kwargs
    # lazy: pcast.triton needs Triton, which is not part of the slim install
    from pcast.triton.kernel import _attn_fwd, attention_launch

    if is_split_call(kw) or kw["causal_offset"]:
        raise ValueError("num_splits > 1, p_normalize='partition' and causal_align='bottom_right' are not allowed "
                         "here; allowed: the single-pass kernel's options (the split kernels run interpreted)")
    kw = {n: x for n, x in kw.items() if n not in ("num_splits", "split_layout", "p_normalize", "causal_offset")}
    grid, a, kwargs, _, _ = attention_launch(q, k, v, block_m=block_m, **kw)
    return _attn_fwd, grid, a, kwargs


def compile_attention(target: str, *, backend: str = "triton", batch: int = 1, heads: int = 2, n: int = 1024,
                      n_kv: int | None = None, d: int = 64, launch_options: dict | None = None,
                      **attention_options):
    """Compile the attention kernel for ``target`` ("sm_89", "sm_90" or "sm_100") without a GPU.

    ``backend``: "triton" (the faithful kernel :func:`pcast.attention` launches) or "triton-fp8" (the
    deploy kernel: hardware FP8 cast of P, FP8 tensor-core P·V). ``attention_options``: the keywords of
    :func:`pcast.attention` (``order``, ``scale``, ``fmt``, ``causal``, ``block_n``, ``policy``, ...);
    ``batch``, ``heads``, ``n`` (queries), ``n_kv`` (keys; default ``n``) and ``d``: the shapes, which
    specialize the integer arguments as on a GPU. ``launch_options``: compile options that override the
    launcher's (for showing that a check fails, e.g. ``{"enable_fp_fusion": True}``).

    Returns Triton's ``CompiledKernel``: ``asm["ptx"]``, ``asm["sass"]``, ``asm["cubin"]``, ``metadata``.
    """
    # lazy: pcast.triton needs Triton, which is not part of the slim install
    from pcast.triton.aot import TARGETS, compile_launch

    if target not in TARGETS:
        raise ValueError(f"target={target!r} is not allowed; allowed: {', '.join(TARGETS)}")
    fn, _, args, kwargs = attention_launch_for(backend=backend, target=target, batch=batch, heads=heads, n=n, n_kv=n_kv, d=d,
                                               **attention_options)
    return compile_launch(target, fn, args, {**kwargs, **(launch_options or {})})


def deploy_attention(q, k, v, **attention_options):
    """Run the deploy kernel (``backend="triton-fp8"``) on a CUDA GPU with :func:`pcast.attention`'s keywords
    (checked as it checks them; ``scale_mode="exp2_offset"`` and ``v_fmt="e4m3fn"`` unless given). Returns
    ``out`` on the inputs' device. Without a GPU of capability >= 8.9: a RuntimeError naming ``--compile-only``."""
    # lazy: pcast.triton needs Triton, which is not part of the slim install
    from pcast.triton.deploy import NO_GPU_MESSAGE, triton_fp8_attention

    if not api.fp8_gpu_available():
        raise RuntimeError(NO_GPU_MESSAGE)
    opts = {"scale_mode": "exp2_offset", "v_fmt": "e4m3fn", **attention_options}
    args = inspect.signature(api.attention).bind(q, k, v, **opts)
    args.apply_defaults()
    kw, _, block_m = api.prepare_call(q, k, (v,), {**args.arguments, "backend": "triton"})
    return triton_fp8_attention(q, k, v, block_m=block_m, **kw).to(q.device)
