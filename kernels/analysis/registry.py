"""The one registry of the paper's claims and of the outputs that answer them.

Each claim has an id, the words of the paper, the config keys its criterion reads
(``claims.<id>.*`` in config.yaml) and the figure and table targets that answer it. Each output
has a kind and a report category. ``figures/claims.md`` (its evidence column), the Snakemake
targets (``workflow/rules/*.smk``) and the report's categories all read this module, so a claim
or an output is added here and nowhere else. Torch-free and pandas-free: the Snakefile imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pcast.contract import (CONFORMANCE, DECODE_EXPERIMENT, DYNAMIC_EXPERIMENT, FP4_EXPERIMENT, POLICY_EXPERIMENT,
                              REALMODEL, SWEEP_EXPERIMENTS, TENSORCORE_EXPERIMENT)

__all__ = ["Claim", "Finding", "Output", "PAPER", "CLAIMS", "FINDINGS", "OUTPUTS", "FIGURES", "TABLES", "VERDICT",
           "EXPERIMENT_CATEGORY", "STATISTICS_READS", "claim", "category", "statistics_reads"]

PAPER = "paper"  # the section comparing the abstract's numbers with the artifact's


@dataclass(frozen=True)
class Claim:
    id: str  # "C1" ... "C6", "audit", "fp4", "decode", "tensorcore", "paper" (the abstract's numbers), "realmodel", "cases", "deployed" or "conformance"
    statement: str  # the claim: for C1-C6 the abstract's sentence
    criterion_keys: tuple[str, ...]  # keys of claims.<id> in config.yaml that the verdict reads
    outputs: tuple[str, ...]  # figure and table targets that answer it (claims.md's evidence)


@dataclass(frozen=True)
class Finding:
    id: str  # the experiment beyond the paper it reads (claims.json's ``findings`` key)
    statement: str  # what it asks (claims.md's "Findings beyond the paper"; never a verdict)
    outputs: tuple[str, ...]  # the figures that show it


@dataclass(frozen=True)
class Output:
    name: str  # the Snakemake target and the file stem under figures/
    kind: str  # "figure" (pdf, png, csv), "table" (csv, tex, md) or "verdict" (md, json)
    category: str  # the report category it is shown under


CLAIMS = (
    Claim("C1", "Forward KV iteration causes P-collapse: to leading order a fraction Φ(Δ + δk − 6.93 − ln S) "
                "of non-sink P values underflow to zero. δk is the expected within-sink-block score maximum; "
                "δk ≈ 1 for ksink = 4.",
          ("combos", "allowance", "alternatives"), ("fig_collapse",)),
    Claim("C2", "Reverse iteration removes it, with a zero-underflow guarantee when reverse is combined with "
                "S = 256.",
          ("zero_combo", "reverse_combo", "forward_combo", "max_expected_count", "alternatives"), ("fig_collapse",)),
    Claim("C3", "S = 256 = 2^8 simultaneously (i) scales bit-exactly in IEEE 754, (ii) lies on the lower envelope "
                "of the sawtooth dp(S) over the E4M3 number line (dp = 2^-4, the minimum worst-case quantization "
                "step), and (iii) has the maximum normal-range coverage among bit-exact (2^k) scales. A "
                "non-bit-exact scale such as 448 attains slightly higher coverage.",
          ("scale", "compare_scale", "max_scale", "alternatives"), ("fig_theory_scale", "table_scales")),
    Claim("C4", "The closed-form threshold Δc = 6.93 + ln S − δk predicts kernel-level precision loss.",
          ("knee_onset_fraction", "alternatives"), ("fig_threshold", "table_thresholds")),
    Claim("C5", "Kernel-faithful experiments (Q, K, V in FP32 to isolate the P-cast effect) show 3–10× MSE "
                "improvement at moderate sink strengths.",
          ("baseline", "fixes", "band", "far_above", "moderate", "alternatives"),
          ("fig_mse", "fig_improvement", "table_paired_tests")),
    Claim("C6", "Paired tests confirm both fixes saturate to the same precision floor when combined.",
          ("pairs", "alpha", "holm", "trivial_pair", "trivial_margin", "min_nontrivial", "alternatives"),
          ("table_paired_tests", "fig_mse")),
    Claim("audit", "Audit of deployed kernels' P policies: where each collapses (Δc measured against the theory "
                   "of its options), where it saturates, and where its P-cast error exceeds the V-cast floor of FP8 "
                   "operands.",
          ("variant", "floor_variant", "saturation_threshold", "floor_factor"),
          ("fig_policies", "table_policies")),
    Claim(DECODE_EXPERIMENT, "Beyond the paper: decode rows (Nq = 1 over a long KV cache) under split-KV and "
                             "partition-normalised P. A sink raises the running max only in the split that holds it "
                             "and only for the keys visited after it there, so pcast.theory.decode predicts each "
                             "configuration's underflow fraction and Δc (sink keys and a learned sink that seeds "
                             "split 0), and the relative RMS error of a partition-normalised P from its closed form.",
          ("dc_tolerance", "rms_tolerance", "delta"), ("fig_decode", "table_decode")),
    Claim(FP4_EXPERIMENT, "Beyond the paper: P in microscaled FP4 (NVFP4, MXFP4) under sinks. NVFP4's E4M3 group scale "
                          "flushes to zero for a whole group of 16 keys once the sink pushes the group's largest p·S₁ "
                          "below 6·2⁻¹⁰; the closed-form Δc of that flush predicts the measured one for every static "
                          "S₁, the derived optimal S₁ moves it out of reach, and reverse KV order removes it as it "
                          "removes the FP8 collapse.",
          ("delta",), ("fig_fp4", "table_fp4")),
    Claim(PAPER, "The numbers the abstract gives (6.93, δk ≈ 1 for ksink = 4, 3–10×, dp = 2^-4, 448's slightly "
                 "higher coverage) next to the artifact's, computed from the theory and the measurements.",
          ("threshold_constant", "delta_k", "band", "dp", "compare_scale"), ()),
    Claim("realmodel", "Beyond the paper: a pretrained model's heads (all-MiniLM-L6-v2) through the instrument: in what "
                       "fraction of heads C5's 3–10× holds, where the theory predicts a head's underflow from its "
                       "measured Δ, σ and sinks, and how far the model's output moves.",
          ("band", "combos", "max_abs_error", "worst_heads"),
          ("fig_realmodel_heads", "fig_realmodel_theory", "fig_realmodel_outputs", "table_realmodel")),
    Claim("cases", "Beyond the paper: the public 2026 reports of FP8-P failures (aiter, FlyDSL, FlashInfer, "
                   "FlashAttention-4), each rebuilt from its stated policy and fixture: the instrument reproduces "
                   "each report's number within the precision it was printed at, or says why it cannot.",
          (), ("table_cases",)),
    Claim("deployed", "Beyond the paper: deployed kernels' own code (vLLM's unified attention, SGLang's grouped "
                      "decode, from their pinned release wheels) run on a CPU under Triton's interpreter with a "
                      "correct FP8 cast: each kernel's fingerprint names the preset read from its source, and its "
                      "error on a real model's heads is the one its preset predicts.",
          (), ("table_deployed",)),
    Claim(TENSORCORE_EXPERIMENT, "Beyond the paper: a deployed FP8 kernel multiplies P·V on the tensor core, whose "
                                 "accumulator aligns and truncates (Hopper's FP8 wgmma keeps 13 fraction bits, Blackwell's "
                                 "tcgen05 23). In mmasim's model of that arithmetic, checked bit for bit against mmasim, "
                                 "the accumulation adds far less error than the P cast, in both KV orders at S = 1 and "
                                 "S = 256.",
          ("max_share",), ("fig_tensorcore",)),
    Claim(CONFORMANCE, "Supporting check: the Triton kernel and the emulator agree, every difference "
                       "explained by FP8 rounding boundaries, and the multi-call engine the sweeps run gives "
                       "the single calls' bits (the sweeps' numbers are the kernel's).",
          (), ("fig_conformance", "table_conformance")),
)

#: Experiments beyond the paper whose results are findings, not verdicts: they feed no claim.
FINDINGS = (
    Finding(DYNAMIC_EXPERIMENT, "Dynamic P scales (tile_max, row_block_max) beside static S = 1 and S = 256 in both "
                                "orders: what the paper's optimality claim for a static S says once dynamic scales "
                                "are allowed.", ("fig_dynamic",)),
)

_UNDERFLOW = "C1, C2 · underflow law, reverse order"
_SCALE = "C3 · S = 256"
_THRESHOLD = "C4 · threshold Δc"
_MSE = "C5 · MSE improvement"
_CONFORMANCE = "Kernel conformance"
_POLICIES = "Deployed policies"
_REALMODEL = "Real model"
_FP4 = "FP4 P · microscaling"
_CASES = "Reported cases"
_DEPLOYED = "Deployed kernels' own code"
_TENSORCORE = "Tensor-core P·V"
_DECODE = "Decode · split-KV"
_DYNAMIC = "Beyond the paper · dynamic P scales"

OUTPUTS = (
    Output("fig_theory_scale", "figure", _SCALE),
    Output("fig_collapse", "figure", _UNDERFLOW),
    Output("fig_mse", "figure", _MSE),
    Output("fig_improvement", "figure", _MSE),
    Output("fig_threshold", "figure", _THRESHOLD),
    Output("fig_conformance", "figure", _CONFORMANCE),
    Output("fig_policies", "figure", _POLICIES),
    Output("fig_realmodel_heads", "figure", _REALMODEL),
    Output("fig_realmodel_theory", "figure", _REALMODEL),
    Output("fig_realmodel_outputs", "figure", _REALMODEL),
    Output("fig_fp4", "figure", _FP4),
    Output("fig_decode", "figure", _DECODE),
    Output("fig_tensorcore", "figure", _TENSORCORE),
    Output("fig_dynamic", "figure", _DYNAMIC),
    Output("table_paired_tests", "table", "C5, C6 · paired tests"),
    Output("table_scales", "table", _SCALE),
    Output("table_thresholds", "table", _THRESHOLD),
    Output("table_conformance", "table", _CONFORMANCE),
    Output("table_policies", "table", _POLICIES),
    Output("table_realmodel", "table", _REALMODEL),
    Output("table_fp4", "table", _FP4),
    Output("table_decode", "table", _DECODE),
    Output("table_cases", "table", _CASES),
    Output("table_deployed", "table", _DEPLOYED),
    Output("claims", "verdict", "Claims verdict"),
)
FIGURES = tuple(o.name for o in OUTPUTS if o.kind == "figure")
TABLES = tuple(o.name for o in OUTPUTS if o.kind == "table")
VERDICT = "claims"

# The report category of each experiment's tidy table: next to the outputs built from it.
EXPERIMENT_CATEGORY = dict(zip(SWEEP_EXPERIMENTS + (CONFORMANCE, POLICY_EXPERIMENT, REALMODEL, FP4_EXPERIMENT,
                                                   TENSORCORE_EXPERIMENT, DECODE_EXPERIMENT, DYNAMIC_EXPERIMENT),
                               (_UNDERFLOW, _SCALE, _THRESHOLD, _CONFORMANCE, _POLICIES, _REALMODEL, _FP4, _TENSORCORE,
                                _DECODE, _DYNAMIC)))


_BOOTSTRAP = ("bootstrap_resamples", "confidence_level", "bootstrap_method", "seed")

#: The keys of the ``statistics:`` section each job reads: the statistics builders of
#: :mod:`pcast.analysis.stats` (by their tidy table) and the tables that print them. A job's Snakemake params hold
#: these and no others, so a changed key reruns only the jobs that read it.
STATISTICS_READS = {
    "collapse": ("seed_interval",),
    "paired": ("pairs", "tost_margin", "alpha", "reference", "knee_factor", *_BOOTSTRAP),
    "scales": ("baseline", "seed_interval", *_BOOTSTRAP),
    "threshold": ("crossing_level", *_BOOTSTRAP),
    "policies": ("crossing_level", *_BOOTSTRAP),
    "fp4": ("crossing_level", *_BOOTSTRAP),
    "decode": ("crossing_level", *_BOOTSTRAP),
    "dynamic": ("reference", *_BOOTSTRAP),
    "table_paired_tests": ("table_deltas", "confidence_level", "tost_margin", "alpha"),
    "table_policies": ("crossing_level", "confidence_level"),
    "table_fp4": ("crossing_level", "confidence_level"),
    "table_decode": ("crossing_level", "confidence_level"),
}


def statistics_reads(job: str, statistics: Mapping) -> dict:
    """The part of the ``statistics:`` section that ``job`` (a key of :data:`STATISTICS_READS`) reads."""
    return {k: statistics[k] for k in STATISTICS_READS[job]}


def claim(claim_id: str) -> Claim:
    """The registered claim with this id; KeyError names the known ids."""
    for c in CLAIMS:
        if c.id == claim_id:
            return c
    raise KeyError(f"unknown claim {claim_id!r}; known: {', '.join(c.id for c in CLAIMS)}")


def category(output: str) -> str:
    """The report category of a registered output."""
    for o in OUTPUTS:
        if o.name == output:
            return o.category
    raise KeyError(f"unknown output {output!r}; known: {', '.join(o.name for o in OUTPUTS)}")
