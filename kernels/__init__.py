"""FP8 P-cast attention: formats, a Triton kernel, a fast emulator and an exact reference.

The public front door is :func:`attention`; see its docstring for the per-row
contract that every backend follows.
"""

from .formats import FORMATS, FP8Format, get_format
from .quantize import quantize

__all__ = ["FORMATS", "FP8Format", "get_format", "quantize", "attention", "AttentionResult"]


def __getattr__(name):  # lazy: importing torch-free helpers stays cheap
    if name in ("attention", "AttentionResult"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'kernels' has no attribute {name!r}")
