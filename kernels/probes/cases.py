"""The public 2026 reports of FP8-P failures, each rebuilt as a case and checked (table T9).

A case holds its source (repository, PR or issue, link), the kernel's P policy as the report describes it,
the fixture as the report describes it, and one :class:`Measurement` per number the report printed: the
number, the decimals it was printed with, and what this instrument computes for it. A measurement is PASS
when the instrument's value rounds to the report's at the report's precision (within half a unit of the
last printed digit), PARTIAL when it does not and the reason is known (or when it does but part of the
fixture had to be assumed), INCONCLUSIVE when the report gives too little to rebuild the fixture (the
reason is stated), FAIL otherwise. Reports that state a fix have
the fix as measurements of their own. The reports are described here in this project's words. The types live in
:mod:`pcast.probes.case_model`; the cases about P's scale (FlashAttention-4's offset-plus-threshold bound, cuDNN's
ignored ``scale_s``) in :mod:`pcast.probes.cases_scale`; those about the tensor core's P·V accumulation
(FlashAttention-3) in :mod:`pcast.probes.cases_accum`; the exponent's fused multiply-add (torch-mojo-backend) in
:mod:`pcast.probes.cases_exp`; V's scales leaking the future (Transformer
Engine's MXFP8 V) in :mod:`pcast.probes.cases_vleak`; :data:`CASES` gathers them all.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import torch

from pcast.formats import get_format
from pcast.formats.quantize import quantize
from pcast.policies import Policy
from pcast.probes.case_model import Case, Measurement
from pcast.probes.cases_accum import TILE_DRIFT, TWO_LEVEL
from pcast.probes.cases_exp import FMA_EXPONENT
from pcast.probes.cases_scale import CUDNN_SCALE_S, FA4
from pcast.probes.cases_vleak import V_LEAK
from pcast.probes.expect import exact, expected
from pcast.probes.inputs import Probe, mass

__all__ = ["Case", "Measurement", "CASES", "T9_COLUMNS", "t9_rows", "write_t9"]

T9_COLUMNS = ("case", "source", "number", "link", "policy", "fixture", "measured", "report", "printed",
              "instrument", "status", "reason")
RANDOM_TEST = ("the greatest relative difference over the 24,576 outputs of aiter's FP8-KV test, on random Q, K, V "
               "quantised with scales the report does not give (3 elements fail): the data behind the maximum are "
               "not given; the kernel's P path itself is the preset aiter-pa-ragged")


def _out(probe: Probe, policy, column: int = 0, row: int = 0) -> float:
    return float(expected(probe, policy).out[0, 0, row, column])


def _bf16(x: float) -> float:
    return float(torch.tensor(x, dtype=torch.float32).to(torch.bfloat16).float())


# ----------------------------------------------------------------------------- aiter MLA decode
_AITER_PROBE = mass(2048, depths=(7.0,))  # one logit at 0, 2,047 at -7, V = 1
_UNSCALED = Policy("aiter-mla-unscaled", order="forward", scale=1.0)  # exp, then E4M3 with no scale
_X448 = _UNSCALED.replace(name="aiter-mla-x448", scale=448.0)

AITER_MLA = Case(
    "aiter-mla-decode", "ROCm/aiter", "PR 5535", "https://github.com/ROCm/aiter/pull/5535",
    "forward, S = 1 (multiply), E4M3, row sum of unrounded P; fix: S = 448",
    "one query row; one logit at 0 and 2,047 at -7; V = 1 (correct output 1)",
    (Measurement("unscaled FP8 oracle, mean output", 0.348843, 6, lambda: _out(_AITER_PROBE, _UNSCALED)),
     Measurement("the kernel's mean output (bf16)", 0.349609, 6, lambda: _bf16(_out(_AITER_PROBE, _UNSCALED))),
     Measurement("fix: P scaled by 448, mean output", 0.996377, 6, lambda: _out(_AITER_PROBE, _X448)),
     Measurement("FP32 reference, mean output", 0.999993, 6, lambda: float(exact(_AITER_PROBE)[0, 0]),
                 reason="the report's reference ran on its quantised Q and K, whose logits are not exactly 0 "
                        "and -7; the exact output of the stated fixture is 1")),
    title="aiter MLA decode", group="aiter",
    checks="one logit at 0, 2,047 at −7, V = 1: the unscaled FP8 output 0.348843, the kernel's bf16 output "
           "0.349609, the fix (P × 448) 0.996377, the FP32 reference 0.999993",
)

# ----------------------------------------------------------------------------- aiter paged_attention_ragged
def _rms_near_2_pow_minus_8() -> float:
    """RMS relative E4M3 rounding error of P spread evenly over the subnormal step around 2^-8
    ([1.5, 2.5)·2^-9: every such P rounds to 2^-8)."""
    p = (1.5 + torch.arange(4096, dtype=torch.float64) / 4096) * 2.0 ** -9
    q = quantize(p.to(torch.float32), "e4m3fn").double()
    return float(((q - p) / p).pow(2).mean().sqrt())


AITER_RAGGED = Case(
    "aiter-paged-attention-ragged", "ROCm/aiter", "PR 5642", "https://github.com/ROCm/aiter/pull/5642",
    "P normalised inside each 256-key partition, then cast to E4M3 with no scale (near 2^-8: subnormal)",
    "aiter's FP8-KV test: head size 128, 8 KV heads, 128 keys (one partition); near-uniform attention",
    (Measurement("greatest relative difference in aiter's test", 0.355, 3, None, RANDOM_TEST),
     Measurement("RMS error of P near 2^-8 (about)", 0.15, 2, _rms_near_2_pow_minus_8,
                 "format-level estimate for P spread evenly over one subnormal step around 2^-8; the report "
                 "does not give its P distribution (\"near-uniform\")", assumed=True)),
    title="aiter `paged_attention_ragged`", group="aiter",
    checks="P normalised inside each 256-key partition, cast with no scale (the preset `aiter-pa-ragged`): the "
           "greatest relative difference 0.355 of aiter's test, the ~15% RMS error of P near 2^-8",
)

# ----------------------------------------------------------------------------- FlyDSL dense FP8 attention
FLYDSL = Case(
    "flydsl-dense-fp8", "ROCm/FlyDSL", "PR 1020", "https://github.com/ROCm/FlyDSL/pull/1020",
    "S = 1, E4M3, row sum of unrounded P; fix: S = 2^(log2 448 - tau), tau = 6 up to 4,096 keys, 4 above",
    "V = 1 on peaked attention over thousands of keys (the logits and length behind the number are not given)",
    (Measurement("mean output with V = 1", 0.637, 3, None,
                 "the report gives neither the logits nor the sequence length behind 0.637"),),
    title="FlyDSL dense FP8 attention", group="FlyDSL", checks="V = 1 gave 0.637",
)


# ----------------------------------------------------------------------------- FlashInfer SM120 prefill
def _e4m3(x: float) -> float:
    return float(quantize(torch.tensor([x], dtype=torch.float32), "e4m3fn")[0])


def _largest_zero() -> float:
    """log2 of the largest power of two that E4M3 rounds to 0 (RNE: half the smallest subnormal, a tie)."""
    e = 0
    while _e4m3(2.0 ** e) != 0.0:
        e -= 1
    return float(e)


def _smallest_normal() -> float:
    return math.log2(get_format("e4m3fn").min_normal)


def _subnormal_step() -> float:
    return math.log2(_e4m3(2.0 ** -7 + 2.0 ** -9) - _e4m3(2.0 ** -7))  # one grid step below the normals


FLASHINFER = Case(
    "flashinfer-sm120-prefill", "flashinfer-ai/flashinfer", "PR 5020", "https://github.com/flashinfer-ai/flashinfer/pull/5020",
    "P in (0, 1] cast to E4M3 with no scale, row sum of unrounded P; fix: S = 2^8 by exp2 offset",
    "the mechanism's thresholds (the report prints no output numbers)",
    (Measurement("log2 of the largest P rounded to zero", -10, 0, _largest_zero),
     Measurement("log2 of the smallest normal P", -6, 0, _smallest_normal),
     Measurement("log2 of the subnormal step", -9, 0, _subnormal_step)),
    title="FlashInfer SM120 FP8 prefill", group="FlashInfer",
    checks="the thresholds of numerator-only loss: below 2^-10 to zero, normals from 2^-6, subnormal step 2^-9",
)


CASES = (AITER_MLA, AITER_RAGGED, FLYDSL, FLASHINFER, FA4, CUDNN_SCALE_S, TWO_LEVEL, TILE_DRIFT, FMA_EXPONENT, V_LEAK)


def t9_rows(cases=CASES) -> list[dict]:
    """One row per measurement of every case (columns :data:`T9_COLUMNS`)."""
    rows = []
    for c in cases:
        for m in c.measurements:
            value, status = m.evaluate()
            rows.append({"case": c.key, "source": c.source, "number": c.number, "link": c.link, "policy": c.policy,
                         "fixture": c.fixture, "measured": m.measured, "report": f"{m.report:.{m.decimals}f}",
                         "printed": f"{m.decimals} decimals", "instrument":
                         "" if value is None else f"{value:.{m.decimals + 2}f}", "status": status,
                         "reason": m.reason if status in ("INCONCLUSIVE", "PARTIAL") else ""})
    return rows


def write_t9(csv_path, md_path, cases=CASES) -> list[dict]:
    """Write table T9 as CSV and Markdown; return its rows."""
    rows = t9_rows(cases)
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=T9_COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    cols = ("case", "number", "measured", "report", "instrument", "status", "reason")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]).replace("|", "/") for c in cols) + " |" for r in rows]
    Path(md_path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return rows
