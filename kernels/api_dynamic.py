"""Dynamic P scales (docs/interfaces.md, "Dynamic P scales"): the checks of ``scale_mode="per_row"``,
``"tile_max"`` and ``"tile_max_padded"`` and the target each format scales a region's max to."""

from __future__ import annotations

from pcast.contract import DYNAMIC_SCALE_MODES, EXP_ARGS, SCALE_MODE_ALIASES
from pcast.formats import FORMATS, FP8Format
from pcast.formats.microscaling import get_mx_format, is_mx

__all__ = ["canonical_scale_mode", "check_dynamic", "check_exp_arg"]


def canonical_scale_mode(scale_mode):
    """The mode an alias names (``"row_block_max"`` -> ``"per_row"``), else ``scale_mode`` itself."""
    return SCALE_MODE_ALIASES.get(scale_mode, scale_mode) if isinstance(scale_mode, str) else scale_mode


def _fp8(fmt) -> bool:
    return (isinstance(fmt, FP8Format) and fmt.name in FORMATS) or (isinstance(fmt, str) and fmt in FORMATS)


def check_dynamic(o: dict, dec: dict, *, ran: str, pv_arith: str) -> None:
    """A dynamic scale mode's constraints, before any work; ``o`` the resolved policy keywords, ``dec`` the
    decode ones, ``ran`` the backend that will run. Raises ValueError naming the argument."""
    mode, fmt = o["scale_mode"], o["fmt"]
    if mode not in DYNAMIC_SCALE_MODES:
        return
    nvfp4 = mode == "per_row" and is_mx(fmt) and get_mx_format(fmt).name == "nvfp4"
    if not (_fp8(fmt) or nvfp4):
        allowed = "an FP8 format or 'nvfp4'" if mode == "per_row" else "an FP8 format"
        raise ValueError(f"scale_mode={mode!r} is not allowed with fmt={fmt!r}; allowed: {allowed} "
                         f"({', '.join(FORMATS)})")
    if o["scale"] != 1:
        raise ValueError(f"scale={o['scale']!r} is not allowed with scale_mode={mode!r} (the scale is dynamic); "
                         "allowed: 1.0")
    fixed = (("rescale_threshold", o["rescale_threshold"], 0), ("num_splits", dec["num_splits"], 1),
             ("p_normalize", dec["p_normalize"], "online"), ("pv_arith", pv_arith, "fp32"))
    for name, value, allowed in fixed:
        if value != allowed:
            raise ValueError(f"{name}={value!r} is not allowed with scale_mode={mode!r}; allowed: {allowed!r}")
    if o["sink_mode"] == "init" and o.get("sink_logit") is not None:
        raise ValueError(f"sink_mode='init' with a sink_logit is not allowed with scale_mode={mode!r}; "
                         "allowed: sink_mode='final'")
    if ran.startswith("triton") and not nvfp4:
        raise ValueError(f"scale_mode={mode!r} with fmt={fmt!r} is not allowed with backend={ran!r}: the Triton "
                         "kernel runs dynamic scales only as nvfp4's per_row; allowed: backend='emulator'")


def check_exp_arg(exp_arg, scale_mode: str, ran: str) -> dict:
    """The backend keywords of ``exp_arg`` (:data:`pcast.contract.EXP_ARGS`): none for the default, else
    ``{"exp_arg": ...}``. Raises ValueError naming ``exp_arg`` outside exp2_offset or off the emulator."""
    if exp_arg not in EXP_ARGS:
        raise ValueError(f"exp_arg={exp_arg!r} is not allowed; allowed: {', '.join(map(repr, EXP_ARGS))}")
    if exp_arg == "rounded":
        return {}
    if scale_mode != "exp2_offset":
        raise ValueError(f"exp_arg={exp_arg!r} is not allowed with scale_mode={scale_mode!r} (it forms exp2's "
                         "argument); allowed: scale_mode='exp2_offset'")
    if ran.startswith("triton"):
        raise ValueError(f"exp_arg={exp_arg!r} is not allowed with backend={ran!r}: the Triton kernel forms the "
                         "rounded argument only; allowed: backend='emulator'")
    return {"exp_arg": exp_arg}
