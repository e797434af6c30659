"""The one input contract of :func:`pcast.attention`, the probes, :func:`pcast.probes.assert_policy` and the
audit: which tensors and which policies they accept, checked and normalised once (docs/interfaces.md).

- Tensors: q, k and v are float32, bfloat16 or float16 (:data:`pcast.contract.INPUT_DTYPES`), all three the
  same dtype, on one device. bf16 and fp16 widen exactly to float32; every backend computes from the widened
  tensors. A learned sink logit may have any of these dtypes too.
- Policies: None, a preset name (:data:`pcast.policies.POLICIES`), a :class:`~pcast.policies.Policy`, or a
  dict of Policy fields (an explicit option set, named ``"options"`` unless a name is given).
- Block sizes: any positive multiple of 16 (:func:`pcast.contract.is_block_size`, checked by the policies and
  :func:`pcast.attention`); :func:`triton_blocks` says what runs where the Triton kernels cannot take one.
- Results state the inputs' dtype (:func:`stamp_dtype`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from pcast.contract import BLOCK_SIZES, INPUT_DTYPES
from pcast.policies import POLICY_KEYS, Policy, get_policy

__all__ = ["Inputs", "check_inputs", "as_policy", "check_dtype", "parse_dtype", "TORCH_DTYPES", "widen", "widen_call",
           "stamp_dtype", "triton_blocks"]

TORCH_DTYPES = {name: getattr(torch, name) for name in INPUT_DTYPES}  # name -> torch dtype
_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32"}


@dataclass(frozen=True)
class Inputs:
    """Checked inputs: q, k, v widened to float32, the resolved policy (None when none was given) and the
    dtype the caller's tensors had."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    policy: object
    dtype: torch.dtype


def parse_dtype(value) -> torch.dtype:
    """A torch dtype of :data:`~pcast.contract.INPUT_DTYPES` from itself or its name (``"bf16"``, ``"bfloat16"``,
    ``"fp16"``, ``"float32"``...).

    Raises:
        ValueError: naming ``dtype`` and what is allowed.
    """
    if isinstance(value, torch.dtype) and value in TORCH_DTYPES.values():
        return value
    if isinstance(value, str):
        name = _ALIASES.get(value, value.removeprefix("torch."))
        if name in TORCH_DTYPES:
            return TORCH_DTYPES[name]
    raise ValueError(f"dtype={value!r} is not allowed; allowed: {', '.join(INPUT_DTYPES)} (or bf16, fp16, fp32)")


def check_dtype(name: str, t) -> None:
    """``t`` is a tensor of an allowed input dtype (ValueError naming ``name`` otherwise)."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in TORCH_DTYPES.values():
        raise ValueError(f"{name} must be float32, bfloat16 or float16, got {t.dtype}")


def as_policy(policy, name: str | None = None):
    """A :class:`~pcast.policies.Policy` from a preset name, a Policy, or a mapping of Policy fields (its name
    ``name``, else ``"options"``).

    Raises:
        ValueError: naming the policy and what is allowed (a bad field: naming the field).
    """
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, str):
        return get_policy(policy)
    if isinstance(policy, Mapping):
        fields = dict(policy)
        fields.setdefault("name", name or "options")
        try:
            return Policy(**fields)
        except TypeError as e:  # an unknown field
            raise ValueError(f"policy {dict(policy)!r}: {e}; allowed keys: {', '.join(POLICY_KEYS)}") from e
    raise ValueError(f"policy={policy!r} is not allowed; allowed: a preset name, a pcast.policies.Policy or a dict "
                     "of Policy fields")


def check_inputs(q, k, v, *, policy=None) -> Inputs:
    """Check q, k, v's types and dtypes and resolve ``policy`` (a name or a dict becomes a Policy; a Policy, or
    any object with ``attention_kwargs()``, stays itself); q, k, v come back widened to float32.

    Shapes, devices and values are :func:`pcast.attention`'s to check (it names the rule broken).

    Raises:
        ValueError: naming the argument and what is allowed.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_dtype(name, t)
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k and v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}; allowed: all "
                         f"three one of {', '.join(INPUT_DTYPES)}")
    if policy is None or callable(getattr(policy, "attention_kwargs", None)):  # a Policy, or an object like one
        pol = policy
    elif isinstance(policy, (str, Mapping)):
        pol = as_policy(policy)
    else:
        raise ValueError(f"policy={policy!r} is not allowed; allowed: None, a preset name, a pcast.policies.Policy or "
                         "a dict of Policy fields")
    return Inputs(*(widen(t) for t in (q, k, v)), pol, q.dtype)


def widen(t):
    """``t`` as float32 (exact for bf16 and fp16; float32 comes back as itself)."""
    return t if t is None or t.dtype == torch.float32 else t.to(torch.float32)


def widen_call(q, k, values: tuple, args: dict):
    """The input contract (:func:`pcast.api_inputs.check_inputs`) on one call: q, k, the value tensors and the
    sink logit widened to float32, the policy resolved (a dict of Policy fields included); returns
    ``(q, k, values, args, input dtype)``. Raises ValueError naming a bad argument."""
    if not isinstance(values[0], torch.Tensor):
        check_dtype("v", values[0])
    inp = check_inputs(q, k, values[0], policy=args.get("policy"))
    sink = args.get("sink_logit")
    if isinstance(sink, torch.Tensor) and sink.dtype in (torch.bfloat16, torch.float16):
        args = {**args, "sink_logit": widen(sink)}
    values = (inp.v, *(widen(t) if isinstance(t, torch.Tensor) and t.dtype == inp.dtype else t for t in values[1:]))
    return inp.q, inp.k, values, {**args, "policy": inp.policy}, inp.dtype


def stamp_dtype(results, dtype):
    """Set ``input_dtype`` on every result (nested lists of them too); returns ``results``."""
    for r in results:
        if isinstance(r, list):
            stamp_dtype(r, dtype)
        else:
            r.input_dtype = dtype
    return results


def triton_blocks(block_m: int, block_n: int, backend: str, ran: str) -> tuple[str, int]:
    """What runs for a block size: the Triton kernels take block_n up to 256 (any multiple of 16, held in a
    power-of-two tile whose extra lanes are masked); for a larger one ``backend="auto"`` runs the emulator and
    ``"triton"`` raises. The Triton launch of a block_m that is no power of two up to 256 takes the largest power
    of two below it up to 256 (block_m moves no number). Returns ``(backend that runs, the Triton block_m)``."""
    if ran.startswith("triton") and block_n > BLOCK_SIZES[-1]:
        if backend == "triton":
            raise ValueError(f"block_n={block_n!r} is not allowed with backend='triton'; allowed there: a multiple "
                             f"of 16 up to {BLOCK_SIZES[-1]}; backend='emulator' or 'auto' takes any multiple of 16")
        ran = "emulator"
    return ran, min(BLOCK_SIZES[-1], 1 << (block_m.bit_length() - 1))
