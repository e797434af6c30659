"""Several attention calls on the same q and k: value tensors, scales, or any list of calls.

:func:`~pcast.attention_values`, :func:`~pcast.attention_scales` and :func:`~pcast.attention_calls`
(docs/interfaces.md): each result is bit-identical to its own :func:`pcast.attention` call, and the
emulator shares what the results do not depend on. Their arguments are :func:`pcast.attention`'s,
checked by :mod:`pcast.api` before any work.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping

import torch

from pcast.api_decode import is_split_call
from pcast.api_inputs import stamp_dtype
from pcast.emulator.calls import emulate_calls
from pcast.api import (AttentionResult, attention, emulator_results, execute, is_positive, prepare_call, run_call,
                        widen_call)

__all__ = ["attention_values", "attention_scales", "attention_calls"]


def attention_values(q: torch.Tensor, k: torch.Tensor, values, **kwargs) -> list[AttentionResult]:
    """:func:`~pcast.attention` of q and k against each value tensor of ``values``, sharing the P path.

    P and every diagnostic depend on q and k only. The emulator therefore runs steps 1-4 once and
    steps 5-6 once per value tensor (each cast by ``v_fmt`` on its own); the other backends call
    :func:`~pcast.attention` once per value tensor. Either way result i is bit-identical to
    ``attention(q, k, values[i], **kwargs)``.

    Args:
        q, k: as :func:`~pcast.attention`. values: a non-empty list or tuple of float32 tensors, each of k's
            shape [B, H, Nk, d] and on q's device. kwargs: any keywords of :func:`~pcast.attention`.

    Returns one :class:`~pcast.AttentionResult` per value tensor (each with its own diagnostic tensors).
    Raises ValueError naming a bad argument, before any work.
    """
    args = _bound_args("attention_values", q, k, values, kwargs)
    return run_call(q, k, tuple(values), args)


def attention_scales(q: torch.Tensor, k: torch.Tensor, values, *, scales, **kwargs) -> list[list[AttentionResult]]:
    """:func:`~pcast.attention_values` at each scale S of ``scales``, sharing what does not depend on S.

    With ``scale_mode="multiply"`` steps 1-2 (scores, running max, p = exp(s - m)) and the counts of
    p > 0 do not depend on S, so the emulator runs them once per chunk of rows and steps 3-6 once
    per scale (each on its own copy of the unrounded p); the saturation check is taken per scale.
    ``scale_mode="exp2_offset"`` folds log2 S into step 2, and the other backends share nothing,
    so those call :func:`~pcast.attention_values` once per scale. Either way ``result[i][j]`` is
    bit-identical to ``attention_values(q, k, values, scale=scales[i], **kwargs)[j]``.

    Args:
        q, k, values: as :func:`~pcast.attention_values`. scales: a non-empty list or tuple of scales, each
            a finite number > 0 (as ``scale`` of :func:`~pcast.attention`; it overrides a policy's scale).
        kwargs: any keywords of :func:`~pcast.attention` but ``scale``.

    Returns one list per scale of one :class:`~pcast.AttentionResult` per value tensor (each with its own
    diagnostic tensors). Raises ValueError naming a bad argument, before any work."""
    if not isinstance(scales, (list, tuple)) or not scales:
        raise ValueError(f"scales={scales!r} is not allowed; allowed: a non-empty list or tuple of finite "
                         "numbers > 0")
    for i, s in enumerate(scales):
        if not is_positive(s):
            raise ValueError(f"scales[{i}]={s!r} is not allowed; allowed: a finite number > 0")
    if "scale" in kwargs:
        raise ValueError("attention_scales: scale= is not allowed; allowed: the scales in scales=")
    args = _bound_args("attention_scales", q, k, values, {**kwargs, "scale": scales[0]})
    return run_call(q, k, tuple(values), args, scales=tuple(scales))


def attention_calls(q: torch.Tensor, k: torch.Tensor, values, calls, **common) -> list[list[AttentionResult]]:
    """Several :func:`~pcast.attention_values` calls on the same q, k and values, sharing what their results do not
    depend on (the multi-run entry point, docs/interfaces.md).

    Call i runs with the keywords ``{**common, **calls[i]}``; ``result[i][j]`` is bit-identical to
    ``attention_values(q, k, values, **{**common, **calls[i]})[j]`` on every backend. The emulator takes
    the scores once for every call whose q·kᵀ has the same bits (same q/k cast, sm_scale, causal flag
    and padded key length), steps 1-2 once for calls that differ only in ``scale`` (multiply mode), and,
    within a Δ stack, only the sink keys' scores per item (where a probe shows that exact on this
    machine). Other backends run the calls one by one.

    Args:
        q, k, values: as :func:`~pcast.attention_values`. calls: a non-empty list or tuple of dicts of keywords
            of :func:`~pcast.attention`. common: keywords every call takes unless it sets them itself.

    Returns one list per call of one :class:`~pcast.AttentionResult` per value tensor (each with its own
    tensors). Raises ValueError naming a bad call (``calls[i]``) or argument, before any work."""
    if not isinstance(calls, (list, tuple)) or not calls:
        raise ValueError(f"calls={calls!r} is not allowed; allowed: a non-empty list or tuple of dicts of keywords "
                         "of pcast.attention")
    prepared, dtype, q0, k0, values0 = [], None, q, k, values
    for i, call in enumerate(calls):
        if not isinstance(call, Mapping):
            raise ValueError(f"calls[{i}]={call!r} is not allowed; allowed: a dict of keywords of pcast.attention")
        args = _bound_args(f"attention_calls: calls[{i}]", q0, k0, values0, {**common, **call})
        try:
            q, k, values, args, dtype = widen_call(q0, k0, tuple(values0), args)
            prepared.append(prepare_call(q, k, tuple(values), args))
        except ValueError as e:
            raise ValueError(f"calls[{i}]: {e}") from None
    results: list = [None] * len(calls)
    # several splits or partition P: one emulator run per call (pcast.emulator.splits shares nothing)
    # (tile_max calls too: their chunks of rows must hold whole tiles, which the shared chunks do not keep)
    emu = [i for i, (kw, ran, _) in enumerate(prepared) if ran == "emulator" and not is_split_call(kw)
           and "block_m" not in kw]
    if emu:
        for i, (outs, diag) in zip(emu, emulate_calls(q, k, tuple(values), [prepared[i][0] for i in emu])):
            results[i] = emulator_results(outs, diag, "emulator")
    for i, (kw, ran, block_m) in enumerate(prepared):
        if results[i] is None:
            results[i] = execute(q, k, tuple(values), kw, ran, block_m)
    return stamp_dtype(results, dtype)


def _bound_args(who: str, q, k, values, kwargs: dict) -> dict:
    """:func:`~pcast.attention`'s arguments, defaults applied, for a call on several value tensors (``values[0]``
    stands for ``v``); raises ValueError naming a bad ``values`` or keyword."""
    if not isinstance(values, (list, tuple)) or not values:
        raise ValueError(f"values must be a non-empty list or tuple of tensors, got {type(values).__name__}"
                         + (" (empty)" if isinstance(values, (list, tuple)) else ""))
    try:
        bound = inspect.signature(attention).bind(q, k, values[0], **kwargs)
    except TypeError as e:
        raise ValueError(f"{who}: {e}; allowed keywords: those of pcast.attention") from None
    bound.apply_defaults()
    if bound.arguments["reference"] is not False:
        raise ValueError(f"{who}: reference={bound.arguments['reference']!r} is not allowed; allowed: False (for the "
                         "MSE against the float64 reference, call pcast.attention(..., reference=True))")
    return bound.arguments
