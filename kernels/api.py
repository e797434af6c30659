"""The front door: :func:`~pcast.attention`, with argument checking, policy resolution and backend choice."""

from __future__ import annotations

import math

import torch

from pcast.contract import (ATTENTION_HEAD_DIMS, BACKENDS, BLOCK_SIZES, OPERAND_SCALES, V_SCALES, ORDERS, ROWSUMS, SCALE_MODES, SINK_MODES,
                       causal_offset, is_allowed, is_block_size)
from pcast.api_dynamic import canonical_scale_mode, check_dynamic, check_exp_arg
from pcast.api_decode import DECODE_DEFAULTS, check_decode, is_split_call
from pcast.api_inputs import as_policy, check_dtype, stamp_dtype as _stamp, triton_blocks, widen, widen_call
from pcast.emulator.core import emulate_attention, emulate_attention_scales
from pcast.emulator.splits import emulate_splits
from pcast.emulator.tensorcore import check_pv_arith, check_pv_promote
from pcast.result import AttentionResult
from pcast.formats import FORMATS, HALF_FORMATS, FP8Format, get_format, get_p_format
from pcast.formats.microscaling import MX_FORMATS, get_mx_format, is_mx
from pcast.reference import causal_mask, reference_attention, reference_lse, reference_mse

__all__ = ["attention", "AttentionResult", "ORDERS", "BACKENDS", "ROWSUMS",
           "resolve_backend", "fp8_gpu_available"]


class _Default:
    """The default of a keyword a policy may set: tells "not given" from "given" and shows as its value."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return repr(self.value)


# The keywords of Policy.attention_kwargs(), with the defaults a caller gets without a policy.
_D = {name: _Default(value) for name, value in (
    ("order", "forward"), ("scale", 1.0), ("scale_mode", "multiply"), ("rescale_threshold", 0.0),
    ("sink_mode", "final"), ("fmt", "e4m3fn"), ("rowsum", "unrounded"), ("qk_fmt", None), ("qk_scale", "tensor"),
    ("v_fmt", None), ("v_scale", "tensor"), ("block_m", 64), ("block_n", 64), *DECODE_DEFAULTS)}


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


def is_positive(x) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def _is_format(f) -> bool:
    """None, an FP8Format or the name of one."""
    return f is None or isinstance(f, FP8Format) or (isinstance(f, str) and f in FORMATS)


def _check_mx(fmt, scale, scale_mode, block_n) -> None:
    """A microscaled P format's constraints (docs/interfaces.md, "P in FP4 with microscaling")."""
    if is_mx(fmt):
        if scale_mode in ("tile_max", "tile_max_padded"):
            raise ValueError(f"scale_mode={scale_mode!r} is not allowed with fmt={get_mx_format(fmt).name!r}; "
                             "allowed: 'multiply', 'per_row'")
        if scale_mode == "exp2_offset":
            raise ValueError(f"scale_mode='exp2_offset' is not allowed with fmt={get_mx_format(fmt).name!r}; "
                             "allowed: 'multiply', 'per_row'")
        g = get_mx_format(fmt).group
        if isinstance(block_n, int) and block_n % g:
            raise ValueError(f"block_n={block_n!r} is not allowed with fmt={get_mx_format(fmt).name!r}; allowed: a "
                             f"multiple of its group, {g} (groups lie inside KV blocks)")


def _check(q, k, v, *, order, scale, fmt, causal, ksink, block_m, block_n, sm_scale, rowsum, backend,
           sink_logit=None, **options):
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_dtype(name, t)
        if t.dim() != 4:
            raise ValueError(f"{name} must have shape [B, H, N, d] (4 dims), got {tuple(t.shape)}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    B, H, Nq, d = q.shape
    if k.shape[0] != B or k.shape[-1] != d or k.shape[1] < 1 or H % k.shape[1]:
        raise ValueError(f"k shape {tuple(k.shape)} does not match q shape {tuple(q.shape)} (need [B, H_kv, Nk, d] "
                         f"with H_kv dividing H = {H})")
    if v.shape != k.shape:
        raise ValueError(f"v shape {tuple(v.shape)} must equal k shape {tuple(k.shape)}")
    if Nq < 1 or k.shape[2] < 1:
        raise ValueError(f"sequence lengths must be >= 1, got Nq={Nq}, Nk={k.shape[2]}")
    if not is_allowed(d, ATTENTION_HEAD_DIMS):
        raise ValueError(f"head dimension d={d} is not allowed; allowed: a multiple of 16 from 16 to 256")
    if order not in ORDERS:
        raise ValueError(f"order={order!r} is not allowed; allowed: {', '.join(ORDERS)}")
    if rowsum not in ROWSUMS:
        raise ValueError(f"rowsum={rowsum!r} is not allowed; allowed: {', '.join(ROWSUMS)}")
    if not is_positive(scale):
        raise ValueError(f"scale={scale!r} is not allowed; allowed: a finite number > 0")
    if not (_is_format(fmt) or is_mx(fmt) or (isinstance(fmt, str) and fmt in HALF_FORMATS)):
        raise ValueError(f"fmt={fmt!r} is not allowed; allowed: None, {', '.join((*FORMATS, *HALF_FORMATS, *MX_FORMATS))}")
    if not isinstance(causal, bool):
        raise ValueError(f"causal={causal!r} is not allowed; allowed: True or False")
    if isinstance(ksink, bool) or not isinstance(ksink, int) or ksink < 0:
        raise ValueError(f"ksink={ksink!r} is not allowed; allowed: an int >= 0")
    for name, b in (("block_m", block_m), ("block_n", block_n)):
        if not is_block_size(b):
            raise ValueError(f"{name}={b!r} is not allowed; allowed: a positive multiple of 16 (e.g. 64, 96, 128, 160, "
                             "192)")
    if sm_scale is not None and not is_positive(sm_scale):
        raise ValueError(f"sm_scale={sm_scale!r} is not allowed; allowed: None or a finite number > 0")
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not allowed; allowed: {', '.join(BACKENDS)}")
    _check_policy_options(q, sink_logit=sink_logit, **options)
    _check_mx(fmt, scale, options["scale_mode"], block_n)
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_finite(name, t)


def _check_finite(name: str, t: torch.Tensor) -> None:
    # max and min propagate NaN and expose +-inf: two fast reductions instead of an
    # elementwise isfinite mask over the whole tensor.
    if t.numel() and not (math.isfinite(float(t.amax())) and math.isfinite(float(t.amin()))):
        raise ValueError(f"{name} contains NaN or inf; inputs must be finite")


def _check_policy_options(q, *, scale_mode, rescale_threshold, sink_logit, sink_mode, qk_fmt, qk_scale, v_fmt,
                          v_scale):
    """The P-policy keywords (docs/interfaces.md, "P policies of deployed kernels")."""
    if scale_mode not in SCALE_MODES:
        raise ValueError(f"scale_mode={scale_mode!r} is not allowed; allowed: {', '.join(SCALE_MODES)}")
    if (isinstance(rescale_threshold, bool) or not isinstance(rescale_threshold, (int, float))
            or not math.isfinite(rescale_threshold) or rescale_threshold < 0):
        raise ValueError(f"rescale_threshold={rescale_threshold!r} is not allowed; allowed: a finite float >= 0")
    if sink_mode not in SINK_MODES:
        raise ValueError(f"sink_mode={sink_mode!r} is not allowed; allowed: {', '.join(SINK_MODES)}")
    for name, f, s, words in (("qk", qk_fmt, qk_scale, OPERAND_SCALES), ("v", v_fmt, v_scale, V_SCALES)):
        if not _is_format(f):
            raise ValueError(f"{name}_fmt={f!r} is not allowed; allowed: None, {', '.join(FORMATS)}")
        if not (isinstance(s, str) and s in words) and not is_positive(s):
            raise ValueError(f"{name}_scale={s!r} is not allowed; allowed: {', '.join(map(repr, words))} "
                             "or a finite number > 0")
    if sink_logit is None:
        return
    B, H = q.shape[:2]
    if (not isinstance(sink_logit, torch.Tensor) or sink_logit.dtype not in (torch.float32, torch.bfloat16, torch.float16)
            or tuple(sink_logit.shape) not in ((H,), (B, H))):
        what = f"{sink_logit.dtype} {tuple(sink_logit.shape)}" if isinstance(sink_logit, torch.Tensor) else \
            type(sink_logit).__name__
        raise ValueError(f"sink_logit ({what}) is not allowed; allowed: None or a float32, bfloat16 or float16 tensor "
                         f"of shape [H]=({H},) or [B, H]=({B}, {H})")
    if sink_logit.device != q.device:
        raise ValueError(f"sink_logit must be on q's device {q.device}, got {sink_logit.device}")
    if not bool(torch.isfinite(sink_logit).all()):
        raise ValueError("sink_logit contains NaN or inf; allowed: finite values")


def _resolve(given: dict, policy) -> dict:
    """The policy keywords: each one given explicitly, else the policy's value, else the default."""
    fields = {}
    if policy is not None:
        if not callable(getattr(policy, "attention_kwargs", None)):
            policy = as_policy(policy)
        fields = dict(policy.attention_kwargs())
        unknown = sorted(set(fields) - set(_D))
        if unknown:
            raise ValueError(f"policy {policy!r} sets {', '.join(unknown)}; allowed: {', '.join(_D)}")
    return {n: (fields[n] if n in fields else v.value) if isinstance(v, _Default) else v for n, v in given.items()}


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, order: str = _D["order"],
              scale: float = _D["scale"], fmt: str | FP8Format | None = _D["fmt"], causal: bool = False,
              ksink: int = 0, block_m: int = _D["block_m"], block_n: int = _D["block_n"],
              sm_scale: float | None = None, rowsum: str = _D["rowsum"], backend: str = "auto",
              scale_mode: str = _D["scale_mode"], rescale_threshold: float = _D["rescale_threshold"],
              sink_logit: torch.Tensor | None = None, sink_mode: str = _D["sink_mode"],
              qk_fmt: str | FP8Format | None = _D["qk_fmt"], qk_scale: str | float = _D["qk_scale"],
              v_fmt: str | FP8Format | None = _D["v_fmt"], v_scale: str | float = _D["v_scale"],
              num_splits: int = _D["num_splits"], split_layout: str = _D["split_layout"],
              p_normalize: str = _D["p_normalize"], causal_align: str | None = None,
              policy=None, reference: bool = False, pv_arith="fp32", pv_promote=0, exp_arg="rounded") -> AttentionResult:
    """FlashAttention-style forward attention with softmax P cast to FP8 before P·V, under a P policy.

    Per query row the KV blocks of ``block_n`` keys are visited first to last (``order="forward"``) or
    last to first (``"reverse"``); m starts at -inf, l and acc at 0. L = log2(e), τ = ``rescale_threshold``:

    1. scores: ``s = q'·k'ᵀ·sm_scale`` in exact fp32 (no TF32), masked keys -inf; with ``qk_fmt``,
       ``t' = quantize(t / s_t)·s_t``, s_t = amax|t| per (batch, head) / max_finite ("tensor") or ``qk_scale``.
    2. running max: ``m_new = bm = rowmax(s)`` if m = -inf or ``(bm - m)·L > τ``, else m (τ = 0: max(m, bm));
       "multiply": ``p = exp(s - m_new)``, ``alpha = exp(m - m_new)``; "exp2_offset":
       ``x = exp2(s·L - (m_new·L - log2 S))``, ``alpha = exp2(m·L - m_new·L)``. With ``sink_logit`` σ and
       ``sink_mode="init"`` (vLLM) m starts at σ and l at the sink's value.
    3. cast: ``p_q = quantize(x, fmt)`` with x = p·S ("multiply"): RNE on the FP8 grid, saturating at ±max.
    4. row sum: ``l = l·alpha + rowsum(u)``, u the UNROUNDED p or x (as FlashAttention-3, FlashInfer);
       ``rowsum="rounded"``: u = p_q / S ("multiply") or p_q ("exp2_offset").
    5. accumulate: ``acc = acc·alpha + p_q·V'`` in fp32 (V' = v cast to ``v_fmt`` as in step 1, or "tensor_global", "mx_seq32").
    6. normalise: ``sink_mode="final"`` adds ``exp(σ - m)`` (its exp2_offset form) to l; then
       ``out = acc / (l·S)`` ("multiply") or ``acc / l`` ("exp2_offset").

    Details: docs/interfaces.md ("P policies"; S per row or tile: "Dynamic P scales"); steps: :data:`pcast.contract.STEPS`.

    Args:
        q: [B, H, Nq, d]; k, v: [B, H_kv, Nk, d], H_kv dividing H (query head h reads key/value head h // (H / H_kv));
            d a multiple of 16 up to 256; float32, bf16 or fp16 alike (:func:`pcast.api_inputs.check_inputs`).
        order, scale, fmt, rowsum, block_m, block_n, scale_mode, rescale_threshold, sink_mode, qk_fmt: the
            policy's keywords, with v_fmt, qk_scale, v_scale; explicit ones override it. Defaults: order "forward",
            scale S = 1.0, fmt "e4m3fn" (None: no rounding), rowsum "unrounded", block_m = block_n = 64 (multiples of 16), scale_mode "multiply", rescale_threshold 0.0, sink_mode "final", qk_fmt = v_fmt = None.
        causal: causal mask, top-left aligned (key j visible to query i iff j <= i, as SDPA's ``is_causal``)
            unless ``causal_align="bottom_right"`` (j <= i + Nk - Nq); Nq < Nk needs causal_align.
        num_splits, split_layout, p_normalize: split-KV decode and partition-normalised P, merged by the
            float32 log-sum-exp (docs/decode.md); defaults 1, "contiguous", "online".
        ksink: keys < ksink are sink keys (diagnostics); sm_scale: default 1/sqrt(d); sink_logit: None, [H] or [B, H].
        backend: "auto" (compiled Triton on a CUDA GPU with capability >= 8.9, else "emulator"), "triton"
            (interpreted on CPU), "emulator", or "reference" (float64 of the unquantized inputs).
        policy: None, a name of :data:`pcast.policies.POLICIES`, a ``Policy`` or a dict of Policy fields.
        reference: True: also the float64 reference of the same call, and the result's ``mse`` and ``mse_heads``.
        pv_arith, pv_promote: step 5 in "fp32", or on an FP8 tensor core (:data:`pcast.contract.PV_ARITHS`;
            emulator only), its accumulator added into float32 every ``pv_promote`` KV blocks (0: never). exp_arg:
            exp2's argument, "rounded" or "fma" (``fma(s, L, -(m·L - log2 S))``; emulator only), ``EXP_ARGS``.

    Returns :class:`AttentionResult` on the inputs' device. Raises ValueError naming a bad argument.
    """
    args = dict(locals())
    if not isinstance(reference, bool):
        raise ValueError(f"reference={reference!r} is not allowed; allowed: True or False")
    result = run_call(q, k, (v,), args)[0]
    if reference:
        sink = args["sink_logit"]
        _add_mse(result, widen(q), widen(k), widen(v), {**args, "sink_logit": None if sink is None else widen(sink)})
    return result


def _add_mse(result: AttentionResult, q, k, v, args: dict) -> None:
    """Fill ``result.mse`` and ``mse_heads`` against the float64 reference of the same call (mask, its
    alignment, sm_scale and sink logit)."""
    sink = args["sink_logit"]
    sink = None if sink is None else sink.expand(q.shape[:2]).to(torch.float32).contiguous()
    offset = causal_offset(args["causal_align"], q.shape[-2], k.shape[-2]) if args["causal"] else 0
    result.mse, result.mse_heads = reference_mse(result.out, q, k, v, causal=args["causal"], sm_scale=args["sm_scale"],
                                                 sink_logit=sink, causal_offset=offset)


def _check_values(values) -> None:
    """values[1:] against values[0] (which :func:`_check` has checked as ``v``)."""
    v0 = values[0]
    for i, t in enumerate(values[1:], start=1):
        if not isinstance(t, torch.Tensor) or t.dtype != v0.dtype or t.shape != v0.shape or t.device != v0.device:
            what = f"{t.dtype} {tuple(t.shape)} on {t.device}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"values[{i}] ({what}) is not allowed; allowed: a {v0.dtype} tensor of values[0]'s shape "
                             f"{tuple(v0.shape)} on {v0.device}")
        _check_finite(f"values[{i}]", t)


def prepare_call(q, k, values: tuple, args: dict) -> tuple[dict, str, int]:
    """Check ``args`` (attention's arguments) and resolve the policy: the backend keywords, the backend
    that will run and the Triton kernel's block_m. Raises ValueError naming a bad argument."""
    o = _resolve({n: args[n] for n in _D}, args["policy"])
    o["scale_mode"] = canonical_scale_mode(o["scale_mode"])
    causal, ksink, sm_scale, backend, sink_logit = (args[n] for n in ("causal", "ksink", "sm_scale", "backend",
                                                                      "sink_logit"))
    dec = {n: o.pop(n) for n, _ in DECODE_DEFAULTS}
    _check(q, k, values[0], causal=causal, ksink=ksink, sm_scale=sm_scale, backend=backend, sink_logit=sink_logit,
           **o)
    offset = check_decode(q, k, {**o, **dec}, causal=causal, causal_align=args["causal_align"], backend=backend)
    _check_values(values)
    ran, block_m = triton_blocks(o["block_m"], o["block_n"], backend, resolve_backend(backend, q.device))
    check_dynamic({**o, "sink_logit": sink_logit}, dec, ran=ran, pv_arith=args.get("pv_arith", "fp32"))
    if ran.startswith("triton") and offset and (is_mx(o["fmt"]) or o["scale_mode"] == "per_row"):
        raise ValueError(f"backend={backend!r} with causal_align='bottom_right' takes an FP8, bf16, fp16 or no P "
                         "cast; allowed: backend='emulator' for microscaled P")
    sm = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
    sink = None if sink_logit is None else sink_logit.expand(q.shape[:2]).to(torch.float32).contiguous()
    kw = {**_backend_kwargs(o, causal=causal, ksink=ksink, sm_scale=sm, sink_logit=sink), **dec,
          "causal_offset": offset}
    pv = args.get("pv_arith", "fp32")
    check_pv_arith(pv, fmt=o["fmt"], v_fmt=o["v_fmt"], block_n=o["block_n"], backend=ran, split=is_split_call(kw))
    if o["v_fmt"] is not None and o["v_scale"] == "mx_seq32" and (ran.startswith("triton") or pv != "fp32"):
        raise ValueError(f"v_scale='mx_seq32' is not allowed with backend={ran!r} and pv_arith={pv!r}; allowed: "
                         "backend='emulator' with pv_arith='fp32' (one s_v per (batch, head) elsewhere)")
    promote = args.get("pv_promote", 0)
    check_pv_promote(promote, pv)
    kw = kw if pv == "fp32" else {**kw, "pv_arith": pv, **({"pv_promote": promote} if promote else {})}
    return {**kw, **check_exp_arg(args.get("exp_arg", "rounded"), o["scale_mode"], ran)}, ran, block_m


def run_call(q, k, values: tuple, args: dict, scales: tuple | None = None):
    """Check, resolve the policy and run one backend on every value tensor (``args``: attention's arguments).

    ``scales`` (:func:`attention_scales`; ``args["scale"]`` is the first): run at each of them and return
    one list of results per scale, sharing steps 1-2 on the emulator with ``scale_mode="multiply"``, else
    one run per scale."""
    q, k, values, args, dtype = widen_call(q, k, values, args)
    return _stamp(_run_checked(q, k, values, args, scales), dtype)


def _run_checked(q, k, values: tuple, args: dict, scales: tuple | None = None):
    """:func:`run_call` on float32 inputs and a resolved policy."""
    kw, ran, block_m = prepare_call(q, k, values, args)
    if scales is not None:
        if ran != "emulator" or kw["scale_mode"] != "multiply" or is_split_call(kw):  # exp2: step 2 depends on S
            return [_run_checked(q, k, values, {**args, "scale": s}) for s in scales]
        del kw["scale"], kw["num_splits"], kw["split_layout"], kw["p_normalize"]
        return [emulator_results(outs, diag, ran) for outs, diag in
                emulate_attention_scales(q, k, values, scales=tuple(float(s) for s in scales), **kw)]
    return execute(q, k, values, kw, ran, block_m)


def execute(q, k, values: tuple, kw: dict, ran: str, block_m: int) -> list[AttentionResult]:
    """Run backend ``ran`` on every value tensor with the checked backend keywords ``kw``."""
    if ran == "reference":
        return [_reference_result(q, k, v, kw["causal"], kw["ksink"], kw["sm_scale"], kw["sink_logit"],
                                  kw["causal_offset"]) for v in values]
    if ran == "emulator":
        emulate = emulate_splits if is_split_call(kw) else emulate_attention  # splits: several, or partition P
        outs, diag = emulate(q, k, values, **kw)
        return emulator_results(outs, diag, ran)
    results = []
    for v in values:
        tkw = {n: t for n, t in kw.items() if n not in ("num_splits", "split_layout", "p_normalize", "causal_offset")}
        split = is_split_call(kw) or kw["causal_offset"]
        out, diag = _run_triton(q, k, v, compiled=ran == "triton-compiled", block_m=block_m, **(kw if split else tkw))
        results.append(AttentionResult(out=out, backend=ran, **diag))
    return results


def emulator_results(outs, diag, ran) -> list[AttentionResult]:
    """One result per value tensor of one emulator run, each with its own diagnostic tensors."""
    return [AttentionResult(out=out, backend=ran, **({n: t.clone() for n, t in diag.items()} if i else diag))
            for i, out in enumerate(outs)]


def _backend_kwargs(o: dict, *, causal, ksink, sm_scale, sink_logit) -> dict:
    """The keywords every backend (emulator, Triton launcher) takes, from the checked options ``o``."""
    def fmt_or_none(f):
        return None if f is None else get_format(f)

    def p_format(f):  # P's format may also be microscaled (qk_fmt and v_fmt are FP8)
        return get_mx_format(f) if is_mx(f) else None if f is None else get_p_format(f)

    def operand_scale(s):
        return s if isinstance(s, str) and s in V_SCALES else float(s)

    return dict(reverse=o["order"] == "reverse", scale=float(o["scale"]), fmt=p_format(o["fmt"]), causal=causal,
                ksink=ksink, block_n=o["block_n"], sm_scale=sm_scale, rowsum_rounded=o["rowsum"] == "rounded",
                scale_mode=o["scale_mode"], rescale_threshold=float(o["rescale_threshold"]), sink_logit=sink_logit,
                sink_mode=o["sink_mode"], qk_fmt=fmt_or_none(o["qk_fmt"]), qk_scale=operand_scale(o["qk_scale"]),
                v_fmt=fmt_or_none(o["v_fmt"]), v_scale=operand_scale(o["v_scale"]),
                **({"block_m": o["block_m"]} if o["scale_mode"] in ("tile_max", "tile_max_padded") else {}))


def _run_triton(q, k, v, *, compiled: bool, **kw):
    """Run the Triton kernel (on the GPU when ``compiled``); results come back on the inputs' device."""
    # lazy: pcast.triton needs Triton, which is not part of the slim install
    from pcast.triton.kernel import triton_attention
    # lazy: pcast.triton needs Triton, which is not part of the slim install
    from pcast.triton.splits import triton_split_attention

    dev, run = q.device, triton_split_attention if "num_splits" in kw else triton_attention
    if compiled and dev.type != "cuda":
        q, k, v = (t.cuda() for t in (q, k, v))
        if kw["sink_logit"] is not None:
            kw["sink_logit"] = kw["sink_logit"].cuda()
    out, diag = run(q, k, v, **kw)
    return out.to(dev), {n: t.to(dev) for n, t in diag.items()}


def _reference_result(q, k, v, causal, ksink, sm_scale, sink_logit=None, offset=0):
    """The float64 reference, and its diagnostics: nothing is rounded, so no underflow or saturation;
    terms count visible keys."""
    out = reference_attention(q, k, v, causal=causal, sm_scale=sm_scale, sink_logit=sink_logit, causal_offset=offset)
    lse = reference_lse(q, k, causal=causal, sm_scale=sm_scale, sink_logit=sink_logit, causal_offset=offset)
    zeros = torch.zeros(q.shape[:3], dtype=torch.int64, device=q.device)
    Nq, Nk = q.shape[2], k.shape[2]
    vis = causal_mask(Nq, Nk, device=q.device, offset=offset) if causal else torch.ones(Nq, Nk, dtype=torch.bool,
                                                                                        device=q.device)
    ks = min(ksink, Nk)
    terms = vis[:, ks:].sum(-1).expand(q.shape[:3]).to(torch.int64)
    terms_sink = vis[:, :ks].sum(-1).expand(q.shape[:3]).to(torch.int64)
    return AttentionResult(out=out, underflow=zeros, underflow_sink=zeros.clone(), saturated=zeros.clone(),
                           terms=terms.clone(), terms_sink=terms_sink.clone(), backend="reference", lse=lse)
