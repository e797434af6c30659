"""The names every part of the project shares, defined once (torch-free, pandas-free).

The kernel, the emulator, the loop oracle (``tests/support/loop_contract.py``), the pipeline and the
analysis all import these; ``docs/interfaces.md`` documents them, and a name changes there first.
Importing this module is free, so the pipeline can check a config before anything heavy loads.
"""

from __future__ import annotations
import functools

import math
import struct
import warnings

__all__ = [
    "SCALE_MODES", "DYNAMIC_SCALE_MODES", "SCALE_MODE_ALIASES", "SINK_MODES", "MX_FORMAT_NAMES", "OPERAND_SCALES", "V_SCALES", "MX_SEQ_BLOCK", "LOG2E", "float32", "log2_scale", "STEPS", "step_marker",
    "DIAGNOSTICS", "ORDERS", "BACKENDS", "BACKENDS_RAN", "ROWSUMS", "PAPER_SCALES", "COMBOS",
    "COMBO_LABELS", "combo_label", "HEAD_DIMS", "ATTENTION_HEAD_DIMS", "BLOCK_SIZES", "BLOCK_MULTIPLE", "is_block_size",
    "INPUT_DTYPES", "is_allowed",
    "SWEEP_EXPERIMENTS", "scale_keyword",
    "CONFORMANCE", "EXPERIMENTS", "CONFIG_COLUMNS", "GROUP_COLUMNS", "COMBO_COLUMNS", "TIDY_COLUMNS",
    "CONFORMANCE_KEY", "CONFORMANCE_COLUMNS", "TIMING_COLUMNS", "POLICY_EXPERIMENT", "SINK_KINDS",
    "VARIANTS", "POLICY_CONFIG_COLUMNS", "POLICY_TIDY_COLUMNS", "REALMODEL", "FP4_EXPERIMENT",
    "FP4_CONFIG_COLUMNS", "FP4_TIDY_COLUMNS", "DECODE_EXPERIMENT", "DECODE_CONFIG_COLUMNS", "DECODE_TIDY_COLUMNS",
    "DYNAMIC_EXPERIMENT", "DYNAMIC_CONFIG_COLUMNS", "DYNAMIC_TIDY_COLUMNS", "SPLIT_LAYOUTS", "P_NORMALIZE", "CAUSAL_ALIGNS", "causal_offset",
    "PV_ARITHS", "TENSORCORE_EXPERIMENT", "CLAIM_IDS", "TEMPLATE_SLOT", "EXP_ARGS",
]

# ----------------------------------------------------------------------------- the contract

# The per-row contract of pcast.attention, one step each. The Triton kernel, the emulator and
# the loop oracle mark each step with the same comment, `# step N: name` (tests check this).
STEPS = (
    "scores",  # 1. s = q·kᵀ·sm_scale in exact fp32; masked keys -inf
    "running max",  # 2. m_new = max(m, rowmax(s)); p = exp(s − m_new); alpha = exp(m − m_new)
    "cast",  # 3. p_q = quantize(p·S, fmt)
    "row sum",  # 4. l = l·alpha + rowsum(p)  (or of p_q/S)
    "accumulate",  # 5. acc = acc·alpha + p_q·V
    "normalise",  # 6. out = acc / (l·S)
)


def step_marker(n: int) -> str:
    """The comment that marks contract step ``n`` (1-based) in every implementation."""
    return f"# step {n}: {STEPS[n - 1]}"


# ----------------------------------------------------------------------------- policy options
# The options of pcast.attention beyond the paper's order and S (docs/interfaces.md, "P policies").

# x = exp(s - m)·S, or x = exp2(s·LOG2E - (m·LOG2E - log2 S)), or a dynamic scale (docs/interfaces.md,
# "Dynamic P scales"): x = p·S_r with S_r = target / max p per row and KV block, or per (block_m x block_n)
# tile with the rows past Nq taking no part or pinning the max at 1
SCALE_MODES = ("multiply", "exp2_offset", "per_row", "tile_max", "tile_max_padded")
DYNAMIC_SCALE_MODES = ("per_row", "tile_max", "tile_max_padded")
SCALE_MODE_ALIASES = {"row_block_max": "per_row"}  # another name of a mode, normalised before any work
SINK_MODES = ("init", "final")  # a learned sink logit seeds (m, l), or joins l after the last block
# P formats with microscaling (pcast.formats.microscaling.MX_FORMATS, by name): P's fmt may be one of
# these besides an FP8 format; Q, K and V casts are FP8 only
MX_FORMAT_NAMES = ("nvfp4", "mxfp4")
OPERAND_SCALES = ("tensor",)  # qk_scale / v_scale words: amax per (batch, head) / max_finite; or a float
# v_scale's words besides: one amax over the whole tensor, or an E8M0 scale (rounded up) per 32 sequence
# positions per channel (docs/interfaces.md, "V's scales over the whole tensor or along the sequence")
V_SCALES = (*OPERAND_SCALES, "tensor_global", "mx_seq32")
MX_SEQ_BLOCK = 32  # the sequence positions sharing one E8M0 scale of v_scale="mx_seq32"
# Decode-time options (docs/interfaces.md, "Decode-time attention"): how KV blocks are dealt to splits,
# how a split normalises P before its cast, and how a causal mask aligns when Nq != Nk.
SPLIT_LAYOUTS = ("contiguous", "interleaved")  # split s holds blocks [s·c, (s+1)·c), or block j -> j mod splits
P_NORMALIZE = ("online", "partition")  # running max and sum, or the split's exact max and sum first
CAUSAL_ALIGNS = ("top_left", "bottom_right")  # key j visible to row i iff j <= i, or j <= i + Nk - Nq
# Step 5's arithmetic (docs/interfaces.md, "The tensor core's P·V arithmetic"): float32, or an FP8 tensor
# core's fused sums per chunk of keys (Ada mma.sync, Hopper wgmma, Blackwell tcgen05.mma), emulator only
PV_ARITHS = ("fp32", "mma-sm89", "wgmma-sm90", "tcgen05-sm100")
TENSORCORE_EXPERIMENT = "tensorcore"  # step 5 on a tensor core against float32 (pcast.pipeline.tensorcore_runs)
# How exp2_offset forms step 2's exp2 argument (docs/interfaces.md, "Semantics"): the product rounded to float32
# then the max's offset subtracted (the default), or one fused multiply-add; emulator and loop oracle only
EXP_ARGS = ("rounded", "fma")


def causal_offset(align: str | None, nq: int, nk: int) -> int:
    """How far right the causal diagonal sits: key j is visible to row i iff ``j <= i + offset``;
    ``Nk - Nq`` for ``"bottom_right"``, else 0."""
    return nk - nq if align == "bottom_right" else 0


def float32(x: float) -> float:
    """``x`` rounded once to the nearest float32 (round to nearest even), as a Python float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


LOG2E = float32(1.4426950408889634)  # log2(e) as the float32 every implementation multiplies by


def log2_scale(scale: float) -> float:
    """The float32 offset ``log2 S`` of ``scale_mode="exp2_offset"``: float64 log2, rounded once."""
    return float32(math.log2(scale))


# Per-row int64 diagnostics of AttentionResult, in this order everywhere (also the Triton
# kernel's Diag planes). The last two are the microscaled formats' (0 for FP8): non-sink keys lost
# because their group's scale flushed to 0, and the groups whose scale flushed.
DIAGNOSTICS = ("underflow", "underflow_sink", "saturated", "terms", "terms_sink", "underflow_scale", "groups_flushed")

ORDERS = ("forward", "reverse")  # KV block order
ROWSUMS = ("unrounded", "rounded")  # what l sums: p, or p_q / S
BACKENDS = ("auto", "triton", "emulator", "reference")  # what a caller may ask for
BACKENDS_RAN = ("triton-compiled", "triton-interpreted", "emulator", "reference")  # what ran

# The paper's four combinations: order x S.
PAPER_SCALES = (1.0, 256.0)
COMBOS = tuple((order, scale) for order in ORDERS for scale in PAPER_SCALES)


def combo_label(order: str, scale: float) -> str:
    """The ``combo`` label of the tidy tables: ``"{order} S={scale:g}"`` (``forward S=256``)."""
    return f"{order} S={float(scale):g}"


COMBO_LABELS = tuple(combo_label(o, s) for o, s in COMBOS)

# ----------------------------------------------------------------------------- shapes

HEAD_DIMS = (16, 32, 64, 128, 256)  # head dimension d of the generator and the pipeline: a power of two 16..256
# head dimension d that pcast.attention accepts: a multiple of 16 up to 256 (the Triton kernel pads
# it to the next power of two; real models use 80, 96, ...)
ATTENTION_HEAD_DIMS = tuple(range(16, 257, 16))
# The pipeline's shapes' blocks and the Triton kernels' tiles: powers of two (tl.arange, tl.dot >= 16); a block
# of another multiple of 16 keys is held in the next of them, its extra lanes masked.
BLOCK_SIZES = (16, 32, 64, 128, 256)
# block_m, block_n of the contract (pcast.attention, the emulator, the theory, the policies, the probes): any
# positive multiple of 16, real kernels' tiles included (FlashAttention-3's FP8 tiles are 192 x 160).
BLOCK_MULTIPLE = 16
# The dtypes q, k and v may have (torch dtype names); bf16 and fp16 widen exactly to float32.
INPUT_DTYPES = ("float32", "bfloat16", "float16")


def is_block_size(value) -> bool:
    """True when ``value`` is an int (not a bool) that is a positive multiple of :data:`BLOCK_MULTIPLE`."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0 and value % BLOCK_MULTIPLE == 0


def is_allowed(value, allowed) -> bool:
    """True when ``value`` is an int (not a bool, not a float) in ``allowed``."""
    return isinstance(value, int) and not isinstance(value, bool) and value in allowed


# ----------------------------------------------------------------------------- pipeline tables

SWEEP_EXPERIMENTS = ("collapse", "scales", "threshold")
CONFORMANCE = "conformance"
EXPERIMENTS = SWEEP_EXPERIMENTS + (CONFORMANCE,)

# The configuration of one tidy row; rows are sorted by these, then by seed.
CONFIG_COLUMNS = (
    "n", "d", "block_m", "block_n", "causal", "ksink", "delta", "sigma", "sink_v_scale", "order",
    "scale", "fmt", "rowsum",
)
# What the statistics group by: the experiment and its configuration.
GROUP_COLUMNS = ("experiment",) + CONFIG_COLUMNS
# Columns that name the combination; pairing by seed happens across them.
COMBO_COLUMNS = ("order", "scale", "combo", "backend")

TIDY_COLUMNS = (
    "experiment", "seed", "n", "d", "block_m", "block_n", "causal", "ksink", "delta", "sigma",
    "sink_v_scale", "order", "scale", "fmt", "rowsum", "combo", "backend", "mse", "rel_mse",
    "max_abs_err", "underflow", "terms", "underflow_frac", "underflow_sink", "terms_sink",
    "underflow_sink_frac", "saturated",
)
# The conformance table: check "kernel" (the Triton kernel against the emulator, every difference explained)
# or "engine" (pcast.attention_calls against one pcast.attention per item, bit for bit); case names the call.
CONFORMANCE_KEY = ("check", "case", "order", "scale", "causal", "n", "d", "delta", "sink_v_scale", "seed")
CONFORMANCE_COLUMNS = CONFORMANCE_KEY + (
    "fmt", "scale_mode", "rescale_threshold", "sink_kind", "ksink", "sink_mode", "rowsum", "qk_fmt", "v_fmt", "block_m",
    "block_n", "kernel_backend", "max_abs_diff", "max_rel_diff", "diag_equal", "mismatched_rows", "explained",
    "fragile_elements",
)
TIMING_COLUMNS = ("experiment", "shard", "seeds", "runs", "backend", "wall_s", "reference_s", "kernel_s")

# ----------------------------------------------------------------------------- the policies experiment
# Deployed kernels' P policies under sinks (docs/interfaces.md, "The policies experiment").

POLICY_EXPERIMENT = "policies"
REALMODEL = "realmodel"  # a pretrained model's heads and embeddings (pcast.models.realmodel, pcast.models.heads)
SINK_KINDS = ("keys", "logit")  # ksink sink keys scoring Δ + N(0, σ²), or a learned sink logit Δ (no key, no value)
VARIANTS = ("p_only", "deployed")  # Q, K, V in float32 (the paper), or the operand casts of a deployment

# The configuration of one policies row; rows are sorted by these, then by seed.
POLICY_CONFIG_COLUMNS = (
    "n", "d", "sink_kind", "ksink", "delta", "sigma", "sink_v_scale", "variant", "policy", "order", "scale",
    "scale_mode", "rescale_threshold", "sink_mode", "fmt", "rowsum", "qk_fmt", "v_fmt", "block_m", "block_n",
    "causal",
)
POLICY_TIDY_COLUMNS = ("experiment", "seed") + POLICY_CONFIG_COLUMNS + (
    "backend", "mse", "rel_mse", "max_abs_err", "floor_mse", "floor_rel_mse", "underflow", "terms",
    "underflow_frac", "underflow_sink", "terms_sink", "underflow_sink_frac", "saturated", "saturated_frac",
)

# ----------------------------------------------------------------------------- the fp4 experiment
# P in microscaled FP4 under sink keys (docs/interfaces.md, "The fp4 experiment (pipeline)").

FP4_EXPERIMENT = "fp4"

# The configuration of one fp4 row; rows are sorted by these, then by seed. ``cast`` is the P cast's
# label (``nvfp4 S1=2048``, ``nvfp4 per-row``, ``mxfp4 S1=1``, ``e4m3fn S=256``), set by fmt, scale_mode, scale.
FP4_CONFIG_COLUMNS = (
    "n", "d", "block_m", "block_n", "causal", "ksink", "sigma", "sink_v_scale", "fmt", "scale_mode", "scale",
    "order", "delta",
)
FP4_TIDY_COLUMNS = ("experiment", "seed") + FP4_CONFIG_COLUMNS + (
    "cast", "backend", "mse", "rel_mse", "max_abs_err", "underflow", "underflow_scale", "underflow_elem", "terms",
    "underflow_frac", "underflow_scale_frac", "underflow_elem_frac", "underflow_sink", "terms_sink",
    "groups_flushed", "groups", "groups_flushed_frac", "saturated", "saturated_frac",
)

# ----------------------------------------------------------------------------- the dynamic experiment
# Beyond the paper: dynamic P scales beside static S, both orders, under sink keys (docs/interfaces.md,
# "The dynamic experiment (pipeline; beyond the paper)"). Its rows are the fp4 experiment's (group columns 0);
# ``cast`` is ``S=1``, ``S=256``, ``tile_max``, ``row_block_max`` or ``tile_max_padded``.

DYNAMIC_EXPERIMENT = "dynamic"
DYNAMIC_CONFIG_COLUMNS = FP4_CONFIG_COLUMNS
DYNAMIC_TIDY_COLUMNS = FP4_TIDY_COLUMNS


# ----------------------------------------------------------------------------- the decode experiment
# Decode rows (Nq = 1) under split-KV and partition-normalised P (docs/decode.md, "The decode experiment").

DECODE_EXPERIMENT = "decode"

# The configuration of one decode row; rows are sorted by these, then by seed and head. ``kind``: ``keys``
# (ksink sink keys at Δ), ``logit`` (a learned sink logit Δ, sink_mode init) or ``partition`` (the P-cast
# error rows: one partition of n keys per row, each key mapped to one output coordinate; no sink). ``policy``:
# ``-`` for the grid's configurations, a decode preset's name for its rows.
DECODE_CONFIG_COLUMNS = (
    "kind", "policy", "n", "d", "block_n", "ksink", "sigma", "fmt", "num_splits", "split_layout", "order", "p_normalize",
    "scale", "sink_mode", "delta",
)
DECODE_TIDY_COLUMNS = ("experiment", "seed", "head") + DECODE_CONFIG_COLUMNS + (
    "backend", "mse", "rel_mse", "underflow", "terms", "underflow_frac", "underflow_sink", "terms_sink",
    "saturated", "p_rows", "p_err2", "p_x2", "p_rel_rms",
)

# ----------------------------------------------------------------------------- one name for S
def scale_keyword(fn):
    """The scale S is ``scale=`` in every public function (as in :func:`pcast.attention` and
    :class:`pcast.policies.Policy`); a function decorated with this still takes ``S=``, with a
    DeprecationWarning."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if "S" in kwargs:
            if "scale" in kwargs:
                raise TypeError(f"{fn.__name__}() got both scale= and its deprecated alias S=; pass scale= only")
            warnings.warn(f"{fn.__name__}(S=...) is deprecated; pass scale=", DeprecationWarning, stacklevel=2)
            kwargs["scale"] = kwargs.pop("S")
        return fn(*args, **kwargs)

    return wrapper


# ----------------------------------------------------------------------------- claims' texts

#: Every claim of the verdict registry (pcast.analysis.registry), in its order; the config schema's
#: expected_verdicts keys are these.
CLAIM_IDS = ("C1", "C2", "C3", "C4", "C5", "C6", "paper", "audit", "fp4", "tensorcore", "decode", "realmodel",
             "cases", "deployed", "conformance")

#: A slot of an expected-verdict template: ``{ID.key}`` or ``{ID.key:format}``, filled from claims.json.
TEMPLATE_SLOT = r"\{(?P<claim>[A-Za-z0-9_]+)\.(?P<key>[^{}:]+?)(?::(?P<spec>[^{}]+))?\}"
