"""A 2026 report on how the exponent's argument is formed, rebuilt as a case of table T9
(:mod:`pcast.probes.cases`): torch-mojo-backend's fused multiply-add in the exponent.

The kernel computed ``P = exp2(fma(s, scale_log2, −rowmax))`` with ``rowmax`` the maximum of the rounded
products ``float32(s·scale_log2)``: the fma keeps the winning key's product exact, so its argument is the
product's rounding remainder (up to ½ ulp of the product), not 0, and its p is not 1. With P packed to 16 bits
for P·V and the row summed in float32, a one-hot row's output is ``bf16(p)/p`` instead of 1. The fix rounds the
scaled score before subtracting, as the contract's default form does. The instrument runs both forms with
``exp_arg`` (docs/interfaces.md, "Semantics"): ``"fma"`` and ``"rounded"`` under ``scale_mode="exp2_offset"``
(S = 1, so the offset is the max's rounded product alone). The report prints no number; each measurement
checks one of its statements (1: reproduced).
"""

from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np
import torch

import pcast
from pcast.contract import LOG2E
from pcast.probes.case_model import Case, Measurement
from pcast.probes.cases_accum import Beside

__all__ = ["FMA_EXPONENT", "FMA_FIXTURE", "fixture_inputs", "one_hot_rows"]

#: The fixture, stated before the results were seen (the report gives none): 512 one-hot query rows of one head,
#: the winning scores s seed-0 uniform in [-64, 64) (float32), each row's 63 other keys 200 below its winner
#: (their x is exactly 0 in float32, so the row sum is the winner's x alone); sm_scale 1, head_dim 16, V = 1,
#: P in bf16 (16 bits for P·V), the row sum of the unrounded float32 x, S = 1 by exp2 offset, one block of 64.
FMA_FIXTURE = dict(seed=0, rows=512, keys=64, winner=7, d=16, low=-64.0, high=64.0, gap=200.0)


def fixture_inputs():
    """q, k, v [1, 1, n, d] of :data:`FMA_FIXTURE` and the winning scores s [rows] (float32)."""
    f = FMA_FIXTURE
    g = torch.Generator().manual_seed(f["seed"])
    s = (torch.rand(f["rows"], generator=g, dtype=torch.float64) * (f["high"] - f["low"]) + f["low"]).float()
    q = torch.zeros(1, 1, f["rows"], f["d"])
    q[0, 0, :, 0], q[0, 0, :, 1] = s, 1.0  # score of key j: s·1 + 1·k[j, 1]
    k = torch.zeros(1, 1, f["keys"], f["d"])
    k[0, 0, :, 0] = 1.0
    k[0, 0, :, 1] = -f["gap"]
    k[0, 0, f["winner"], 1] = 0.0  # the winner scores s exactly
    return q, k, torch.ones(1, 1, f["keys"], f["d"]), s


@functools.lru_cache(maxsize=1)
def one_hot_rows() -> dict:
    """The fixture's rows under both forms: ``s`` (the winning scores), ``r`` (each product's rounding remainder
    ``s·LOG2E − float32(s·LOG2E)``, exact, in float64), ``half_ulp`` (½ ulp of the float32 product) and the
    outputs ``fma`` and ``rounded`` (column 0, float64)."""
    q, k, v, s = fixture_inputs()
    kw = dict(scale_mode="exp2_offset", fmt="bf16", sm_scale=1.0, block_n=FMA_FIXTURE["keys"], backend="emulator")
    out = {a: pcast.attention(q, k, v, exp_arg=a, **kw).out[0, 0, :, 0].double() for a in ("fma", "rounded")}
    prods = [np.float32(float(x) * float(LOG2E)) for x in s.tolist()]  # exact in float64, rounded once
    r = torch.tensor([float(Fraction(float(x)) * Fraction(float(LOG2E)) - Fraction(float(p)))
                      for x, p in zip(s.tolist(), prods)], dtype=torch.float64)
    half = torch.tensor([float(np.spacing(abs(p))) / 2 for p in prods], dtype=torch.float64)
    return {"s": s, "r": r, "half_ulp": half, **out}


def _p_max_off_one() -> float:
    """1 when every row whose ``2^r`` is not 1 in float32 has p ≠ 1 (its output ≠ 1), with the winner's exponent
    ``log2(1/out)`` within ½ ulp of the product (and a float32 ulp of p's reading), else 0. (A remainder below
    float32's resolution at 1, where |s·LOG2E| is small, leaves p = 1.)"""
    o = one_hot_rows()
    moved = torch.pow(2.0, o["r"]).float() != 1
    e = -torch.log2(o["fma"])
    return float(bool((o["fma"][moved] != 1).all() and (e.abs() <= o["half_ulp"] + 2.0 ** -22).all()))


def _bf16_over_p() -> float:
    """1 when every row's output is ``bf16(p)/p`` with ``p = 2^r`` (float64, from the exact remainder) within
    two float32 ulps (exp2's and the division's roundings), else 0."""
    o = one_hot_rows()
    p = torch.pow(2.0, o["r"])
    pred = pcast.quantize(p.float(), "bf16").double() / p
    return float(bool(((o["fma"] - pred).abs() <= 2.0 ** -22).all()))


def _share_moved() -> float:
    return float((one_hot_rows()["fma"] != 1).double().mean())


def _worst_half_ulps() -> float:
    o = one_hot_rows()
    return float((o["r"].abs() / o["half_ulp"]).max())


FMA_EXPONENT = Case(
    "mojo-fma-exponent", "gabrieldemarmiesse/torch-mojo-backend", "PR 398",
    "https://github.com/gabrieldemarmiesse/torch-mojo-backend/pull/398",
    "P = exp2(fma(s, scale_log2, −rowmax)), rowmax the max of the rounded products (exp_arg fma, exp2 offset, "
    "S = 1); P in 16 bits for P·V, the row summed in float32; fix: the scaled score rounded before subtracting "
    "(exp_arg rounded)",
    "stated, the report gives none: 512 one-hot rows, winning scores seed-0 uniform in [-64, 64), the other 63 "
    "keys 200 below (x = 0), sm_scale 1, V = 1, bf16 P, block_n 64",
    (Measurement("p_max ≠ 1.0, the winner's exponent off 0 by up to ½ ulp32 of its product (1: reproduced)", 1, 0,
                 _p_max_off_one, "a row with a nonzero remainder keeps p = 1, or its exponent exceeds ½ ulp"),
     Measurement("a one-hot row's output is bf16(p)/p (1: reproduced)", 1, 0, _bf16_over_p,
                 "an output differs from bf16(p)/p by more than two float32 ulps"),
     Measurement("fix (the scaled score rounded before subtracting): every output exactly 1 (1: reproduced)", 1, 0,
                 lambda: float(bool((one_hot_rows()["rounded"] == 1).all())),
                 "an output of the rounded form is not 1"),
     Beside("share of the rows whose output is not 1 (the rest: 2^r is 1 in float32)", 1, 0, _share_moved,
            "the report gives no share"),
     Beside("the largest remainder in ½ ulps of the product (the report: up to 1)", 1, 0, _worst_half_ulps,
            "a bound, not a measurement: the fixture's largest remainder set beside it")),
    title="torch-mojo-backend FMA in the exponent", group="torch-mojo-backend",
    checks="512 one-hot rows with bf16 P and a float32 row sum under `exp_arg=\"fma\"`: p_max ≠ 1 within ½ ulp, "
           "the output bf16(p)/p; the fix (`exp_arg=\"rounded\"`) gives exactly 1",
)
