"""The decode-time keywords of :func:`pcast.attention` (docs/interfaces.md, "Decode-time attention"):
their checks (one-line ``ValueError`` naming the argument, before any work) and the causal alignment."""

from __future__ import annotations

import math

from pcast.contract import CAUSAL_ALIGNS, P_NORMALIZE, SPLIT_LAYOUTS, causal_offset
from pcast.formats.microscaling import is_mx

__all__ = ["check_decode", "DECODE_DEFAULTS", "is_split_call"]

# The decode keywords a policy may set, with their defaults (causal_align is a property of the call).
DECODE_DEFAULTS = (("num_splits", 1), ("split_layout", "contiguous"), ("p_normalize", "online"))


def is_split_call(kw: dict) -> bool:
    """Whether backend keywords ``kw`` leave the single online pass (several splits or partition P)."""
    return kw.get("num_splits", 1) > 1 or kw.get("p_normalize", "online") != "online"


def check_decode(q, k, o: dict, *, causal: bool, causal_align, backend: str) -> int:
    """Check the decode keywords of the resolved options ``o`` and the call; return the causal offset
    (key j visible to row i iff j <= i + offset)."""
    n = o["num_splits"]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"num_splits={n!r} is not allowed; allowed: an int >= 1")
    if o["split_layout"] not in SPLIT_LAYOUTS:
        raise ValueError(f"split_layout={o['split_layout']!r} is not allowed; allowed: {', '.join(SPLIT_LAYOUTS)}")
    if o["p_normalize"] not in P_NORMALIZE:
        raise ValueError(f"p_normalize={o['p_normalize']!r} is not allowed; allowed: {', '.join(P_NORMALIZE)}")
    if causal_align is not None and causal_align not in CAUSAL_ALIGNS:
        raise ValueError(f"causal_align={causal_align!r} is not allowed; allowed: None, {', '.join(CAUSAL_ALIGNS)}")
    nq, nk = q.shape[2], k.shape[2]
    if causal_align == "bottom_right" and nq > nk:
        raise ValueError(f"causal_align='bottom_right' is not allowed with Nq={nq} > Nk={nk} (rows would see no "
                         "key); allowed: Nq <= Nk, or causal_align='top_left'")
    if causal and causal_align is None and nq < nk:
        raise ValueError(f"causal=True with Nq={nq} < Nk={nk} needs causal_align; allowed: 'bottom_right' "
                         "(key j visible to row i iff j <= i + Nk - Nq, as FlashAttention) or 'top_left'")
    if o["p_normalize"] == "partition":
        _check_partition(o)
    if (n > 1 or o["p_normalize"] != "online") and (is_mx(o["fmt"]) or o["scale_mode"] == "per_row"):
        raise ValueError(f"fmt={o['fmt']!r} with scale_mode={o['scale_mode']!r} is not allowed with num_splits > 1 "
                         "or p_normalize='partition'; allowed: an FP8 format, bf16, fp16 or None, and 'multiply' "
                         "or 'exp2_offset'")
    return causal_offset(causal_align, nq, nk) if causal else 0


def _check_partition(o: dict) -> None:
    """What ``p_normalize="partition"`` refuses: its max is exact and its P normalised before the cast."""
    tau = o["rescale_threshold"]
    if isinstance(tau, (int, float)) and not isinstance(tau, bool) and math.isfinite(tau) and tau > 0:
        raise ValueError(f"rescale_threshold={tau!r} is not allowed with p_normalize='partition' (its max is "
                         "exact); allowed: 0")
    if o["scale_mode"] != "multiply":
        raise ValueError(f"scale_mode={o['scale_mode']!r} is not allowed with p_normalize='partition'; "
                         "allowed: 'multiply'")
    if o["rowsum"] != "unrounded":
        raise ValueError(f"rowsum={o['rowsum']!r} is not allowed with p_normalize='partition' (l_s is taken "
                         "before the cast); allowed: 'unrounded'")
