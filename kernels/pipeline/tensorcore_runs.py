"""The tensorcore experiment (docs/interfaces.md, "The tensorcore experiment"): how much an FP8 tensor core's
P·V accumulation (``pv_arith``) adds to the cast error, by S and KV order, over Δ.

Per seed and Δ, synthetic sink inputs (:func:`pcast.models.sinks.make_inputs`) run through one
:func:`pcast.attention_calls` on the emulator with P and V in FP8 (``v_fmt``), once per order, scale and
step-5 arithmetic (``"fp32"`` and each listed tensor core), and once more per order and scale with V in float32
(the paper's P-cast error alone). Before any run, the emulator's arithmetic is checked against mmasim called
directly on random FP8 tiles (:func:`mmasim_check`); without mmasim the experiment is skipped and says so.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import torch

from pcast.api_multi import attention_calls
from pcast.contract import TENSORCORE_EXPERIMENT, combo_label
from pcast.emulator import tensorcore as tc
from pcast.models.sinks import make_inputs
from pcast.pipeline.config import delta_values
from pcast.reference import reference_attention

__all__ = ["TENSORCORE_COLUMNS", "run_tensorcore", "mmasim_check", "tensorcore_rows"]

TENSORCORE_COLUMNS = ["experiment", "seed", "n", "d", "block_n", "ksink", "sigma", "sink_v_scale", "scale_mode",
                      "order", "scale", "combo", "pv_arith", "delta", "mse", "mse_fp32", "mse_pcast", "acc_mse",
                      "underflow_frac"]
_TILE = 64


def mmasim_check(exp: Mapping, seed: int = 0) -> dict:
    """The emulator's :func:`pcast.emulator.tensorcore.fdpa` against mmasim's instruction on
    ``exp["mmasim_tiles"]`` random E4M3 tiles per listed ``pv_arith`` (A 64 x 32 with values over 2^-12..2^8, B
    32 x 64, C float32): per arithmetic the tiles, elements, mismatching elements and the elements where the
    tensor core's result differs from float32's ``A·B + C`` (sums that hit the truncation). Raises ImportError
    naming the extra when mmasim is missing."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for arith in exp["pv_arith"]:
        n = 8 if arith == "mma-sm89" else _TILE
        op = tc.mmasim_op(arith, n)
        elems = mismatched = truncated = 0
        for _ in range(int(exp["mmasim_tiles"])):
            a = torch.randn(_TILE, 32, generator=gen) * torch.exp2(torch.randint(-12, 9, (_TILE, 32), generator=gen))
            b = torch.randn(32, n, generator=gen) * torch.exp2(torch.randint(-6, 3, (32, n), generator=gen))
            A, B = a.clamp(-448, 448).to(torch.float8_e4m3fn), b.clamp(-448, 448).to(torch.float8_e4m3fn)
            C = torch.randn(_TILE, n, generator=gen) * 16
            want = op(A, B, C)
            got = tc.fdpa(A.float()[:, None, :], B.float().T[None], C, arith)
            elems += want.numel()
            mismatched += int((got.view(torch.int32) != want.view(torch.int32)).sum())
            truncated += int((want != A.float() @ B.float() + C).sum())
        out[arith] = {"tiles": int(exp["mmasim_tiles"]), "elements": elems, "mismatched": mismatched,
                      "truncated": truncated}
    return out


def _calls(exp: Mapping) -> list[dict]:
    """Per order and scale: FP8 V with float32 P·V, with each tensor core's, and float32 V (the P cast alone)."""
    calls = []
    for order in exp["order"]:
        for scale in exp["scale"]:
            base = dict(order=order, scale=float(scale))
            calls += [{**base, "pv_arith": "fp32"}] + [{**base, "pv_arith": a} for a in exp["pv_arith"]]
            calls.append({**base, "v_fmt": None})
    return calls


def tensorcore_rows(exp: Mapping, seed: int, delta: float) -> list[dict]:
    """The tidy rows of one seed and Δ: one per order, scale and tensor core (module docstring)."""
    n, d = int(exp["n"]), int(exp["d"])
    q, k, v = make_inputs(seed, n=n, d=d, ksink=int(exp["ksink"]), delta=float(delta), sigma=float(exp["sigma"]),
                          sink_v_scale=float(exp["sink_v_scale"]))
    ref = reference_attention(q, k, v)
    calls = _calls(exp)
    res = attention_calls(q, k, [v], calls, fmt="e4m3fn", v_fmt="e4m3fn", scale_mode=exp["scale_mode"],
                          ksink=int(exp["ksink"]), block_m=int(exp["block_n"]), block_n=int(exp["block_n"]),
                          backend="emulator")
    by = {(c["order"], c["scale"], c.get("pv_arith", "v32")): r[0] for c, r in zip(calls, res)}

    def mse(out, other):
        return float(((out.double() - other.double()) ** 2).mean())

    rows = []
    for order in exp["order"]:
        for scale in map(float, exp["scale"]):
            fp32, pcast = by[order, scale, "fp32"], by[order, scale, "v32"]
            frac = float(fp32.underflow.sum()) / max(1, int(fp32.terms.sum()))
            for arith in exp["pv_arith"]:
                out = by[order, scale, arith].out
                rows.append({"experiment": TENSORCORE_EXPERIMENT, "seed": seed, "n": n, "d": d,
                             "block_n": int(exp["block_n"]), "ksink": int(exp["ksink"]), "sigma": float(exp["sigma"]),
                             "sink_v_scale": float(exp["sink_v_scale"]), "scale_mode": exp["scale_mode"],
                             "order": order, "scale": scale, "combo": combo_label(order, scale), "pv_arith": arith,
                             "delta": float(delta), "mse": mse(out, ref), "mse_fp32": mse(fp32.out, ref),
                             "mse_pcast": mse(pcast.out, ref), "acc_mse": mse(out, fp32.out), "underflow_frac": frac})
    return rows


def run_tensorcore(exp: Mapping, log=None) -> tuple[pd.DataFrame, dict]:
    """The experiment: ``(tidy, check)``; ``check`` is :func:`mmasim_check`'s, or ``{"skipped": ...}`` with an
    empty tidy table when mmasim is not installed."""
    try:
        check = {"mmasim": mmasim_check(exp)}
    except ImportError as e:
        if log is not None:
            log.warning("tensorcore: skipped: %s", e)
        return pd.DataFrame(columns=TENSORCORE_COLUMNS), {"skipped": str(e)}
    rows = []
    for seed in range(int(exp["seeds"])):
        for delta in delta_values(exp["delta"]):
            rows += tensorcore_rows(exp, seed, delta)
    tidy = pd.DataFrame(rows, columns=TENSORCORE_COLUMNS)
    tidy = tidy.sort_values(["pv_arith", "order", "scale", "delta", "seed"], kind="stable").reset_index(drop=True)
    return tidy, check
