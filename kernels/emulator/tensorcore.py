"""The FP8 tensor core's P·V arithmetic (``pv_arith``; docs/interfaces.md, "The tensor core's P·V arithmetic").

A deployed FP8 kernel multiplies P (FP8) by V (FP8) on the tensor core, whose accumulation is not float32's:
per chunk of L products it aligns every product and the incoming accumulator ``c`` to the largest exponent,
truncates each onto the grid ``2^(e_max - F)``, sums them exactly and truncates the sum to the result's
fraction bits (13 on Ada's ``mma`` and Hopper's ``wgmma`` with FP8 operands, 23 on Blackwell's ``tcgen05``).
This is the model of mmasim 2.1.1 (Microsoft's PTX MMA simulator, ``MMA_T_FDPA``), written here in
vectorised torch: :func:`fdpa` is one chunk, :func:`accumulate` step 5 of a row chunk over its KV blocks.
:func:`mmasim_op` gives mmasim's own operation for the independent checks (tests, the pipeline's
``tensorcore`` experiment), or a clear ``ImportError`` when mmasim is not installed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pcast.contract import PV_ARITHS
from pcast.emulator.parts import operand_parts
from pcast.formats import FP8Format
from pcast.reference import expand_kv

__all__ = ["TensorCore", "TENSOR_CORES", "PV_FORMATS", "fdpa", "accumulate", "pv_operands", "PVOperands",
           "mmasim_op", "MMASIM_MISSING", "check_pv_arith", "check_pv_promote", "pv_arith_for"]

#: What to install when mmasim is missing.
MMASIM_MISSING = "mmasim not installed; pip install pcast-fp8[tensorcore]"
#: FP8 formats the MMA takes as operands, with the exponent of their smallest normal (subnormals keep it).
PV_FORMATS = {"e4m3fn": -6, "e5m2": -14}
_PTX_TYPE = {"e4m3fn": "e4m3", "e5m2": "e5m2"}
_F32_EMIN = -126
#: The exponent a zero term takes (below every nonzero term's, so it matters only when all terms are zero).
_E_ZERO = -133
_ZERO_OPERAND = -1000  # a zero operand's exponent: its products stay below _E_ZERO


@dataclass(frozen=True)
class TensorCore:
    """One target's FP8 MMA: ``chunk`` products per fused sum (L), ``align_bits`` (F) and ``result_bits``,
    and mmasim's class, architecture and shape of the instruction (``{n}``, ``{a}``, ``{b}`` filled in)."""

    name: str
    chunk: int
    align_bits: int
    result_bits: int
    mmasim: tuple


TENSOR_CORES = {
    "mma-sm89": TensorCore("mma-sm89", 16, 13, 13, ("MMA", "Ada Lovelace", "m16n8k32.f32.{a}.{b}.f32")),
    "wgmma-sm90": TensorCore("wgmma-sm90", 32, 13, 13, ("WGMMA", "Hopper", "m64n{n}k32.f32.{a}.{b}")),
    "tcgen05-sm100": TensorCore("tcgen05-sm100", 32, 25, 23,
                                ("TCGen05MMA", "Blackwell", "m128n{n}k32.kind::f8f6f4.f32.{a}.{b}")),
}
assert set(TENSOR_CORES) == set(PV_ARITHS) - {"fp32"}


def pv_arith_for(capability: tuple) -> str | None:
    """The ``pv_arith`` of a GPU of compute ``capability`` (major, minor): Ada (8, 9), Hopper (9, 0), Blackwell
    (10, x); None for any other (no model)."""
    major, minor = capability
    return {(8, 9): "mma-sm89", (9, 0): "wgmma-sm90"}.get((major, minor), "tcgen05-sm100" if major == 10 else None)


def check_pv_arith(pv_arith, *, fmt, v_fmt, block_n, backend: str, split: bool) -> None:
    """One-line ``ValueError`` naming ``pv_arith`` (or what it needs) unless the call can run it."""
    if pv_arith not in PV_ARITHS:
        raise ValueError(f"pv_arith={pv_arith!r} is not allowed; allowed: {', '.join(PV_ARITHS)}")
    if pv_arith == "fp32":
        return
    if backend != "emulator":
        raise ValueError(f"pv_arith={pv_arith!r} is not allowed with backend {backend!r} (the Triton interpreter "
                         "and the reference have no FP8 tensor core); allowed: backend='emulator'")
    for name, f in (("fmt", fmt), ("v_fmt", v_fmt)):
        got = getattr(f, "name", f)
        if got not in PV_FORMATS:
            raise ValueError(f"{name}={got!r} is not allowed with pv_arith={pv_arith!r} (the MMA's operands are "
                             f"FP8); allowed: {', '.join(map(repr, PV_FORMATS))}")
    if block_n % 32:
        raise ValueError(f"block_n={block_n!r} is not allowed with pv_arith={pv_arith!r}; allowed: a multiple of 32")
    if split:
        raise ValueError(f"pv_arith={pv_arith!r} is not allowed with num_splits > 1 or p_normalize='partition'; "
                         "allowed: one split with online normalisation")


def check_pv_promote(pv_promote, pv_arith) -> None:
    """One-line ``ValueError`` naming ``pv_promote`` unless it is an int >= 0, and 0 with ``pv_arith="fp32"``."""
    if isinstance(pv_promote, bool) or not isinstance(pv_promote, int) or pv_promote < 0:
        raise ValueError(f"pv_promote={pv_promote!r} is not allowed; allowed: an int >= 0 (0: never promoted)")
    if pv_promote and pv_arith == "fp32":
        raise ValueError(f"pv_promote={pv_promote!r} is not allowed with pv_arith='fp32' (float32 P·V has no narrow "
                         "accumulator); allowed: 0, or a tensor core's pv_arith")


def _exponents(x: torch.Tensor, emin: int) -> torch.Tensor:
    """int32 exponent e of each nonzero x = s·2^e with 1 <= |s| < 2, at least ``emin`` (subnormals); zeros
    get :data:`_ZERO_OPERAND`."""
    e = torch.frexp(x)[1].sub_(1).clamp_min_(emin)
    return e.masked_fill_(x == 0, _ZERO_OPERAND)


def _fused(prod: torch.Tensor, e: torch.Tensor, c: torch.Tensor, tc: TensorCore) -> torch.Tensor:
    """One fused sum: ``prod`` float64 [..., L] exact products with exponents ``e`` int32 [..., L], ``c``
    float32 [...] the incoming accumulator. Returns float32 [...]."""
    e_c = _exponents(c, _F32_EMIN)
    e_max = torch.maximum(e.amax(-1), e_c).clamp_min_(_E_ZERO)
    scale = torch.exp2((tc.align_bits - e_max).to(torch.float64))  # a power of two: exact
    total = prod.mul_(scale[..., None]).trunc_().sum(-1) + torch.trunc(c.to(torch.float64) * scale)
    return _truncate(total / scale, tc.result_bits)  # the exact sum of the truncated terms


def _truncate(x: torch.Tensor, bits: int) -> torch.Tensor:
    """float64 x truncated toward zero to ``bits`` fraction bits at its exponent (at least -126), as float32
    (+0 for -0)."""
    e = torch.frexp(x)[1].sub_(1).clamp_min_(_F32_EMIN)
    step = torch.exp2((e - bits).to(torch.float64))
    return (torch.trunc(x / step) * step).to(torch.float32) + 0.0


def fdpa(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, pv_arith: str, a_fmt: str = "e4m3fn",
         b_fmt: str = "e4m3fn") -> torch.Tensor:
    """``c + Σ a·b`` over the last axis as the tensor core of ``pv_arith`` adds it: float32 tensors of FP8
    values ``a``, ``b`` [..., K] (broadcasting; K a multiple of the chunk) and ``c`` [...], one fused sum per
    chunk of L products in ascending order, each taking the previous one's result as its c."""
    tc = TENSOR_CORES[pv_arith]
    ea, eb = _exponents(a, PV_FORMATS[a_fmt]), _exponents(b, PV_FORMATS[b_fmt])
    a64, b64 = a.to(torch.float64), b.to(torch.float64)
    for k0 in range(0, a.shape[-1], tc.chunk):
        ks = slice(k0, k0 + tc.chunk)
        c = _fused(a64[..., ks] * b64[..., ks], ea[..., ks] + eb[..., ks], c, tc)
    return c


@dataclass(frozen=True)
class PVOperands:
    """V's MMA operands of one call: per value tensor the FP8 values ``vq`` [G, Np, d] (float32, zero-padded
    keys) and the scale ``s_v`` [G, 1, 1]; P's and V's format names; ``promote`` the promotion interval
    (``pv_promote``: 0 never)."""

    pv_arith: str
    vq: tuple
    s_v: tuple
    p_fmt: str
    v_fmt: str
    promote: int = 0


def pv_operands(values: tuple, heads: int, n: int, pad: int, v_fmt: FP8Format, how, pv_arith: str,
                p_fmt: FP8Format, promote: int = 0) -> PVOperands:
    """V as the MMA takes it: each value tensor expanded to ``heads``, ``quantize(v / s_v, v_fmt)`` with the
    operand cast's scale (:func:`pcast.emulator.parts.operand_parts`), flattened and padded by ``pad`` keys."""
    vqs, svs = [], []
    for v in values:
        vq, s_v = operand_parts(expand_kv(v, heads), v_fmt, how)
        vq = vq.reshape(-1, n, vq.shape[-1])
        vqs.append(torch.nn.functional.pad(vq, (0, 0, 0, pad)) if pad else vq)
        svs.append(s_v.reshape(-1, 1, 1))
    return PVOperands(pv_arith, tuple(vqs), tuple(svs), p_fmt.name, v_fmt.name, promote)


def accumulate(pq: torch.Tensor, vq: torch.Tensor, alpha: torch.Tensor, pv: PVOperands, block_n: int,
               reverse: bool) -> torch.Tensor:
    """Step 5 of a chunk of rows on the tensor core: ``pq`` [rows, Np] P's FP8 values, ``vq`` [Np, d] V's,
    ``alpha`` [rows, nblk] each block's rescale (block index order). Per block in visiting order,
    ``c = c·alpha`` (float32), then the block's chunks of keys through :func:`fdpa`'s fused sums into ``c``;
    with ``pv.promote`` = n > 0 also ``acc = acc·alpha``, and after every n-th block and the last,
    ``acc = acc + c`` (float32) and ``c = 0``. n = 0: ``c`` is the result."""
    tc = TENSOR_CORES[pv.pv_arith]
    rows, np_ = pq.shape
    nblk = np_ // block_n
    ea = _exponents(pq, PV_FORMATS[pv.p_fmt])[:, None, :]  # [rows, 1, Np]
    ebT = _exponents(vq, PV_FORMATS[pv.v_fmt]).T[None]  # [1, d, Np]
    a64, bT64 = pq.to(torch.float64)[:, None, :], vq.T.to(torch.float64)[None]
    c = torch.zeros(rows, vq.shape[-1], dtype=torch.float32, device=pq.device)
    acc = torch.zeros_like(c)
    for i, j in enumerate(range(nblk - 1, -1, -1) if reverse else range(nblk)):
        c = c * alpha[:, j, None]
        acc = acc * alpha[:, j, None]
        for k0 in range(j * block_n, (j + 1) * block_n, tc.chunk):
            ks = slice(k0, k0 + tc.chunk)
            c = _fused(a64[..., ks] * bT64[..., ks], ea[..., ks] + ebT[..., ks], c, tc)
        if pv.promote and ((i + 1) % pv.promote == 0 or i == nblk - 1):  # promotion: c into float32, restarted
            acc, c = acc + c, torch.zeros_like(c)
    return c if not pv.promote else acc


def mmasim_op(pv_arith: str, n: int, a_fmt: str = "e4m3fn", b_fmt: str = "e4m3fn"):
    """mmasim's operation ``op(A [m, K], B [K, n], C [m, n]) -> D`` (torch FP8 A, B; float32 C) for the
    instruction of ``pv_arith`` with n columns (``mma-sm89``: n = 8). Raises ImportError naming the extra to
    install when mmasim is missing."""
    try:
        import mmasim.nv_ptx as nv  # lazy: mmasim is not part of the slim install
    except ImportError as e:
        raise ImportError(MMASIM_MISSING) from e
    cls, arch, shape = TENSOR_CORES[pv_arith].mmasim
    return getattr(nv, cls)(arch, shape.format(n=n, a=_PTX_TYPE[a_fmt], b=_PTX_TYPE[b_fmt]))
