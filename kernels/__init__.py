"""FP8 P-cast attention: formats, a Triton kernel, a fast emulator and an exact reference.

The public front door is :func:`attention`; see its docstring for the per-row
contract that every backend follows. Importing the package is cheap: torch is
loaded only when a torch-backed name (``attention``, ``quantize``, ...) is used, so
the statistics and plotting jobs of the pipeline do not pay for it.
"""

import importlib
import os

# OpenMP threads wait asleep, not spinning, unless the user chose: the emulator alternates torch's OpenMP pool
# (its matmuls) and numba's (the compiled P path), and on a loaded machine each pool's spinning threads starve
# the other's working ones (docs/performance.md, "Under load"). Read by each OpenMP runtime when it loads: torch's
# where pcast is imported first, numba's always.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from pcast.formats import FORMATS, FP8Format, get_format  # noqa: E402

__all__ = ["FORMATS", "FP8Format", "get_format", "quantize", "attention", "attention_values", "attention_scales",
           "attention_calls", "AttentionResult", "reference_attention", "Policy", "POLICIES", "get_policy",
           "audit_kernel"]

_LAZY = {"attention": "api", "attention_values": "api_multi", "attention_scales": "api_multi",
         "attention_calls": "api_multi", "AttentionResult": "api", "quantize": "formats.quantize",
         "reference_attention": "reference", "Policy": "policies", "POLICIES": "policies", "get_policy": "policies",
         "audit_kernel": "audit.kernel"}


def __dir__():
    """The public names (:data:`__all__`, the lazy ones included) and the module's own."""
    return sorted(set(globals()) | set(__all__))


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'pcast' has no attribute {name!r}")
