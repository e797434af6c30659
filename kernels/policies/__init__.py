"""Named P policies of deployed FP8 attention kernels (docs/interfaces.md, "Named policies").

A :class:`Policy` is a set of :func:`pcast.attention` keywords with a name, the public source it
was read from (``owner/repo@commit path``: the commit of the version read) and the month it was read.
:data:`POLICIES` holds the presets: what FlashAttention-3,
FlashAttention-4, SageAttention2, FlashInfer, hpc-ops, vLLM and the Triton tutorial do with P, and
the paper's four combinations. A user's own policies come from the ``policies:`` section of
config.yaml (:func:`policies_from_config`). Presets read from source describe the P path only: ``qk_fmt`` and
``v_fmt`` stay None (the policies experiment's ``deployed`` variant adds the operand casts); a preset verified
against a deployed kernel's code (:mod:`pcast.deployed`) carries the operand casts its adapter runs.

Torch-free: the Snakefile imports this module to check a config before any job runs.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from pcast.contract import (MX_FORMAT_NAMES, ORDERS, OPERAND_SCALES, P_NORMALIZE, V_SCALES, ROWSUMS, SCALE_MODES,
                              SCALE_MODE_ALIASES,
                              SINK_MODES, SPLIT_LAYOUTS, is_allowed, is_block_size)
from pcast.formats import FORMATS, HALF_FORMATS

__all__ = ["Policy", "POLICIES", "POLICY_KEYS", "DECODE_PRESETS", "allowed_values", "get_policy", "policy_from_config",
           "policies_from_config"]

READ = "2026-11"  # the month the public sources below were read
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")  # a policy name: one token, safe in CSV cells and paths
_META = ("name", "source", "read")  # Policy fields that are not keywords of pcast.attention
_DECODE = {"num_splits": 1, "split_layout": "contiguous", "p_normalize": "online"}  # the single pass's values


def _finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fmt_or_none(value) -> bool:
    return value is None or (isinstance(value, str) and value in FORMATS)


def _p_fmt(value) -> bool:
    """P's format: None, an FP8 format, a microscaled one, bf16 or fp16 (as pcast.attention's fmt)."""
    return _fmt_or_none(value) or (isinstance(value, str) and value in (*MX_FORMAT_NAMES, *HALF_FORMATS))


def _operand_scale(value) -> bool:
    return (isinstance(value, str) and value in OPERAND_SCALES) or (_finite_number(value) and value > 0)


def _v_scale(value) -> bool:
    return (isinstance(value, str) and value in V_SCALES) or (_finite_number(value) and value > 0)


_FMTS = ", ".join(FORMATS)
# field -> (test, what is allowed); one rule per field of Policy, the name included.
_RULES = {
    "name": (lambda x: isinstance(x, str) and bool(_NAME.match(x)),
             "a non-empty name of letters, digits and _ . + - (starting with a letter or digit)"),
    "order": (lambda x: isinstance(x, str) and x in ORDERS, ", ".join(ORDERS)),
    "scale": (lambda x: _finite_number(x) and x > 0, "a finite number > 0"),
    "scale_mode": (lambda x: isinstance(x, str) and (x in SCALE_MODES or x in SCALE_MODE_ALIASES),
                   ", ".join(SCALE_MODES) + " (alias: " + ", ".join(f"{a} = {m}" for a, m in SCALE_MODE_ALIASES.items()) + ")"),
    "rescale_threshold": (lambda x: _finite_number(x) and x >= 0, "a finite number >= 0 (log2 units)"),
    "sink_mode": (lambda x: isinstance(x, str) and x in SINK_MODES, ", ".join(SINK_MODES)),
    "fmt": (_p_fmt, f"None (YAML null), {_FMTS}, {', '.join(MX_FORMAT_NAMES)}, {', '.join(HALF_FORMATS)}"),
    "rowsum": (lambda x: isinstance(x, str) and x in ROWSUMS, ", ".join(ROWSUMS)),
    "qk_fmt": (_fmt_or_none, f"None (YAML null), {_FMTS}"),
    "qk_scale": (_operand_scale, f"{', '.join(OPERAND_SCALES)} or a finite number > 0"),
    "v_fmt": (_fmt_or_none, f"None (YAML null), {_FMTS}"),
    "v_scale": (_v_scale, f"{', '.join(V_SCALES)} or a finite number > 0"),
    "block_m": (is_block_size, "a positive multiple of 16 (e.g. 64, 96, 128, 160, 192)"),
    "block_n": (is_block_size, "a positive multiple of 16 (e.g. 64, 96, 128, 160, 192)"),
    "num_splits": (lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 1, "an int >= 1"),
    "split_layout": (lambda x: isinstance(x, str) and x in SPLIT_LAYOUTS, ", ".join(SPLIT_LAYOUTS)),
    "p_normalize": (lambda x: isinstance(x, str) and x in P_NORMALIZE, ", ".join(P_NORMALIZE)),
    "source": (lambda x: isinstance(x, str), "a string (repository@commit and file)"),
    "read": (lambda x: isinstance(x, str), "a string (the month the source was read, YYYY-MM)"),
}


def allowed_values(field: str) -> str:
    """What a Policy ``field`` allows, in words (the text of its error messages)."""
    return _RULES[field][1]


def _problem(field: str, value) -> str | None:
    """What ``field`` allows when ``value`` is not allowed, else None."""
    test, allowed = _RULES[field]
    return None if test(value) else allowed


@dataclass(frozen=True)
class Policy:
    """One P policy: the keywords of :func:`pcast.attention` it sets, its name and its source.

    Every field is checked on construction (ValueError naming the field and what is allowed);
    ``scale`` and ``rescale_threshold`` are stored as floats, and a float ``qk_scale`` or
    ``v_scale`` too.
    """

    name: str
    order: str = "forward"
    scale: float = 1.0
    scale_mode: str = "multiply"
    rescale_threshold: float = 0.0
    sink_mode: str = "final"
    fmt: str | None = "e4m3fn"
    rowsum: str = "unrounded"
    qk_fmt: str | None = None
    qk_scale: str | float = "tensor"
    v_fmt: str | None = None
    v_scale: str | float = "tensor"
    block_m: int = 64
    block_n: int = 64
    num_splits: int = 1
    split_layout: str = "contiguous"
    p_normalize: str = "online"
    source: str = ""
    read: str = ""

    def __post_init__(self):
        object.__setattr__(self, "scale_mode", SCALE_MODE_ALIASES.get(self.scale_mode, self.scale_mode)
                           if isinstance(self.scale_mode, str) else self.scale_mode)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            allowed = _problem(f.name, value)
            if allowed is not None:
                who = f"Policy {self.name!r}" if f.name != "name" else "Policy"
                raise ValueError(f"{who}: {f.name}={value!r} is not allowed; allowed: {allowed}")
        for name in ("scale", "rescale_threshold", "qk_scale", "v_scale"):
            value = getattr(self, name)
            if not isinstance(value, str):
                object.__setattr__(self, name, float(value))

    def attention_kwargs(self) -> dict:
        """The keywords of :func:`pcast.attention` this policy sets (every field but name, source, read; the
        decode fields only where they differ from the single pass, so a single-pass policy's keywords, and the
        pipeline specs built from them, do not change)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in _META and (f.name not in _DECODE or getattr(self, f.name) != _DECODE[f.name])}

    def replace(self, **overrides) -> Policy:
        """A copy with ``overrides`` applied (:func:`dataclasses.replace`; checked again)."""
        return dataclasses.replace(self, **overrides)


# The keys of a user's policy in config.yaml: every field but the name (the section's key).
POLICY_KEYS = tuple(f.name for f in dataclasses.fields(Policy) if f.name != "name")

# ----------------------------------------------------------------------------- presets
# Block sizes, FA4's threshold and its FP8 offset were looked up in the public sources named beside
# each preset (read only, nothing copied). Each source is pinned as owner/repo@commit path: the
# commit of the version read, so a later change upstream cannot silently change what it cites.
# Block sizes are each kernel's own tiles (any multiple of 16, pcast.contract.is_block_size). block_m
# has no effect on the numbers (query rows are independent); block_n decides where the running max can move.

_VLLM_FILE = "vllm/v1/attention/ops/triton_unified_attention.py"
_VLLM_034 = "79ca4b3cd74aec08c4bf476bdf0cb15735b605ae5368526a2faae1e30f044ca2"  # pcast.deployed.registry.WHEELS
_SGLANG_0523 = "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937"
_HPC_OPS = "Tencent/hpc-ops@5b005f2659a33738e1220f58f00f71de652983c6 src/attention/prefill/kernels.cuh"
_PRESETS = (
    # FlashAttention-3 FP8: softmax.h scale_apply_exp2 subtracts Max_offset = 8 from the scaled max
    # inside exp2 (x in [0, 256]) -> exp2_offset, S = 2^8; n_block walks from the last block down
    # (mainloop_fwd_sm90_tma_gmma_ws.hpp). Eager max (no lazy rescaling in FA3). Tiles: hopper/
    # tile_size.h tile_size_fwd_sm90 gives 192 x 160 for FP8 with hdim <= 64 (the paper's d = 64).
    Policy("fa3", order="reverse", scale=256.0, scale_mode="exp2_offset", block_m=192, block_n=160,
           source="Dao-AILab/flash-attention@7a802796e12ab36fc9830089c418497c1552bd53 hopper/softmax.h",
           read=READ),
    # FlashAttention-4 (Blackwell, CuTe DSL): exp2 offset, reverse block order, lazy rescaling in
    # SoftmaxSm100.update_row_max (flash_attn/cute/softmax.py): the max stays stale while it grows
    # by less than rescale_threshold in log2 units. Threshold 8.0 (flash_fwd_sm100.py, "Tunable
    # parameters": rescale_threshold = 8.0 with skip-correction); the FP8 P offset is derived as
    # max(0, floor(log2(448) - threshold)) = 0, i.e. S = 1 (PRs 2717, 2731 bound offset + threshold
    # by log2(448) so that P <= S*2^tau never saturates). Assumption: S = 1 with tau = 8. The issue
    # also asks for S = 256 (the pre-fix FP8 offset 8): POLICIES["fa4"].replace(scale=256.0), which
    # saturates (256*2^8 > 448). Tiles: m_block_size = n_block_size = 128 (FlashAttentionForwardSm100).
    Policy("fa4", order="reverse", scale=1.0, scale_mode="exp2_offset", rescale_threshold=8.0,
           block_m=128, block_n=128,
           source="Dao-AILab/flash-attention@ff88962827fa0da43ed770edc5029fcb3fd3d62c flash_attn/cute/softmax.py",
           read=READ),
    # SageAttention2 (sm89): exp2(s - m + S_FP8_OFFSET) with S_FP8_OFFSET = 8.807 (attn_utils.cuh),
    # forward order. Assumption: S = 448 (log2_scale 8.807355); the kernel's literal 8.807 is
    # S = 2^8.807 = 447.89, 0.025% smaller: P within 0.025% of an FP8 rounding boundary may round
    # differently, and a row's max x can round to just above 448 here (counted as saturated,
    # clamped to 448) where the kernel stays below it. PV two-level accumulation is not modelled
    # ("Not built"). Tiles: CTA_Q = 128, CTA_K = 64 (sm89_qk_int8_sv_f8_accum_f32_attn_inst_buf.cu).
    Policy("sage2", order="forward", scale=448.0, scale_mode="exp2_offset", block_m=128, block_n=64,
           source="thu-ml/SageAttention@ca3dc4074fbdb84071b53c738c0958dc30d935f4 csrc/qattn/attn_utils.cuh", read=READ),
    # FlashInfer Hopper FP8 prefill: P multiplied by 448 (the FP8 type's max) after exp, reverse
    # order (quantization/mainloop_mma.cuh). Tiles (prefill_sm90.cuh, FP8, hdim 64): CTA_Q = 192,
    # CTA_KV = 128.
    Policy("flashinfer-hopper", order="reverse", scale=448.0, scale_mode="multiply", block_m=192, block_n=128,
           source=("flashinfer-ai/flashinfer@1cc390cd72d21b923c6c57ba24356865111049e7 "
                   "include/flashinfer/attention/hopper/quantization/mainloop_mma.cuh"),
           read=READ),
    # hpc-ops prefill FP8: multiply by 256 after exp, forward order, reciprocal folded into the V
    # scale (src/attention/prefill/kernels.cuh). Tiles: kTileM = kTileN = 128
    # (warp_spec_with_kvcache_fp8_dim128.cu).
    Policy("hpc-ops", order="forward", scale=256.0, scale_mode="multiply", block_m=128, block_n=128,
           source=_HPC_OPS, read=READ),
    # hpc-ops before the change the paper motivated: S = 1, otherwise the same.
    Policy("hpc-ops-s1", order="forward", scale=1.0, scale_mode="multiply", block_m=128, block_n=128,
           source=_HPC_OPS, read=READ),
    # vLLM unified Triton attention as released in 0.34.0 (read from and verified against the wheel by
    # pcast.deployed "vllm-unified": 0 probe rows outside on the default set at d = 128, bf16, H = 4, H_kv = 2):
    # kernel_unified_attention's 2D path, P = exp(S - m) then acc += dot((P * p_scale).to(V.dtype), V) / p_scale
    # with p_scale = 256 for e4m3 V (128 for e5m2, 1 unquantised); V stays FP8 only with an FP8 Q and
    # KVQuantMode.FP8_PER_TENSOR, so the preset carries that deployment: Q, K, V in e4m3fn with unit
    # descales (qk_scale = v_scale = 1). With learned sinks the running max starts at the sink logit and L at 1
    # (sink_mode="init"). Tiles: BLOCK_M = 16 (num_queries_per_kv <= 16), TILE_SIZE_PREFILL = 32.
    Policy("vllm-unified", order="forward", scale=256.0, scale_mode="multiply", sink_mode="init",
           qk_fmt="e4m3fn", qk_scale=1.0, v_fmt="e4m3fn", v_scale=1.0, block_m=16, block_n=32,
           source=f"vllm 0.34.0 (wheel sha256 {_VLLM_034}) {_VLLM_FILE} kernel_unified_attention", read=READ),
    # The same kernel as read at vllm@1c98a49 (the file then lived in vllm/attention/ops/): P.to(V.dtype) with
    # no scale (S = 1). Kept for the audit's and the policies experiment's sink-collapse example (vllm-final).
    Policy("vllm-unified-1c98a49", order="forward", scale=1.0, scale_mode="multiply", sink_mode="init",
           block_m=16, block_n=32, source=("vllm-project/vllm@1c98a4967619bdc682aaf2f15eec6c3302d64368 "
                                         "vllm/attention/ops/triton_unified_attention.py"),
           read=READ),
    # Triton tutorial 06: p = exp2(qk*sm_scale*log2e - m) with no offset, then p.to(float8e5):
    # exp2 form with log2 S = 0 -> exp2_offset, S = 1, E5M2 (assumption: exp2_offset is the nearer
    # contract form; at S = 1 it differs from "multiply" in the fp32 rounding of p only). Tiles:
    # autotuned over BLOCK_M in {64, 128}, BLOCK_N in {32, 64}; the largest, 128 x 64, taken.
    Policy("triton-tutorial", order="forward", scale=1.0, scale_mode="exp2_offset", fmt="e5m2",
           block_m=128, block_n=64, source=("triton-lang/triton@dc6ee3ed2cf9b2b436544d6153351f9bc679cc61 "
                                           "python/tutorials/06-fused-attention.py"),
           read=READ),
) + (
    # Decode presets (docs/decode.md). Where a kernel picks its split count at run time, num_splits is a
    # parameter: .replace(num_splits=...). Partition sizes are set through num_splits for the decode
    # experiment's N = 8,192 keys (contiguous splits of c = ceil(blocks / num_splits) blocks); for another N,
    # num_splits = ceil(N / partition keys).
    # FlashAttention-3 split-KV decode: each split runs FA3's policy (exp2 offset S = 2^8, reverse order inside
    # it), partial outputs merged by their lse (hopper/flash_fwd_combine_kernel.h). hopper/heuristics.h
    # num_splits_heuristic picks the count: 1 when batch·heads·row blocks nearly fill the SMs (or the KV has
    # at most 4 blocks); else the smallest count whose wave efficiency (n_waves / ceil(n_waves), n_waves =
    # row blocks·splits / SMs) is within 85% of the best up to min(max_splits, SMs, KV blocks). One decode row
    # of one head on 132 SMs gives many splits; 16 taken as the default here.
    Policy("fa3-decode", order="reverse", scale=256.0, scale_mode="exp2_offset", block_m=64, block_n=128,
           num_splits=16, split_layout="contiguous",
           source="Dao-AILab/flash-attention@c082294e0f6c01d46318694a6f3e0274225a9683 hopper/flash_fwd_combine_kernel.h, hopper/heuristics.h", read=READ),
    # TensorRT-LLM XQA on sm90 (shipped in FlashInfer): 64-token tiles dealt to the sub-sequences of a
    # sequence in turn (interleaved), ascending order, P times 448 before its e4m3 cast; the sub-sequence
    # count (nbSubSeqPerSeq) is chosen from the SM count at run time: 4 taken.
    Policy("xqa-sm90", order="forward", scale=448.0, scale_mode="multiply", block_m=64, block_n=64,
           num_splits=4, split_layout="interleaved", source="flashinfer-ai/flashinfer@7146f71f5c3bbbd1bc9b99414e57e8180e540ce3 csrc/xqa/mha_sm90.cu",
           read=READ),
    # AMD aiter paged_attention_ragged: per 256-key partition, exact max and sum first, then the normalised
    # P = exp(s - m)/l cast to e4m3 with no scale (S = 1): 32 partitions of 256 keys at N = 8,192.
    Policy("aiter-pa-ragged", order="forward", scale=1.0, p_normalize="partition", block_m=16, block_n=256,
           num_splits=32, split_layout="contiguous", source="ROCm/aiter@b9a79d4e2e1c778e63c111e97fed57a2176c4197 aiter/ops/attention.py (paged_attention_ragged)",
           read=READ),
    # vLLM paged attention v2: 512-key partitions (PARTITION_SIZE), exact max and sum per partition, P kept
    # in bf16 for P·V: 16 partitions of two 256-key blocks at N = 8,192.
    Policy("vllm-paged-v2", order="forward", scale=1.0, p_normalize="partition", fmt="bf16", block_m=16,
           block_n=256, num_splits=16, split_layout="contiguous",
           source="vllm-project/vllm@cc17020a31f79ed0ac6cc662df2b14d8dcc82624 csrc/attention/paged_attention_v2.cu", read=READ),
    # vLLM's Triton decode in 0.34.0: the same kernel_unified_attention with IS_3D (contiguous segments of
    # TILE_SIZE_DECODE = 32 tiles for an FP8 query) and reduce_segments; the same P cast as the 2D path (p_scale
    # 256 for e4m3 V) and the same FP8 operands; the learned sink seeds segment 0's max and sum. 16 segments
    # (num_par_softmax_segments) taken. Verified against the wheel by pcast.deployed "vllm-triton-decode".
    Policy("vllm-triton-decode", order="forward", scale=256.0, scale_mode="multiply", sink_mode="init",
           qk_fmt="e4m3fn", qk_scale=1.0, v_fmt="e4m3fn", v_scale=1.0, block_m=16, block_n=32, num_splits=16,
           split_layout="contiguous",
           source=f"vllm 0.34.0 (wheel sha256 {_VLLM_034}) {_VLLM_FILE} kernel_unified_attention (IS_3D)",
           read=READ),
    # SGLang's Triton grouped decode in 0.5.23 (decode_attention.py, _fwd_grouped_kernel_stage1 and
    # _fwd_kernel_stage2): per split of BLOCK = 32-key tiles in order, acc += dot(p.to(v.dtype), v) on raw FP8 V
    # with no scale (S = 1); the learned sink enters only stage 2's sum (sink_mode="final"); splits are
    # contiguous, 8 taken (num_kv_splits is a run-time choice). K and V are e4m3fn in the cache (unit scales);
    # Q stays in its input dtype, which the contract cannot say (qk_fmt casts Q and K alike): the probes' Q is
    # exact in e4m3fn at d = 128, so they cannot tell the two apart. Only the grouped (GQA) kernel casts P; the
    # MHA kernel sums p[:, None] * v in float32. Verified against the wheel by pcast.deployed "sglang-decode".
    Policy("sglang-decode", order="forward", scale=1.0, scale_mode="multiply", sink_mode="final",
           qk_fmt="e4m3fn", qk_scale=1.0, v_fmt="e4m3fn", v_scale=1.0, block_m=16, block_n=32, num_splits=8,
           split_layout="contiguous",
           source=(f"sglang 0.5.23 (wheel sha256 {_SGLANG_0523}) sglang/kernels/ops/attention/decode_attention.py "
                   "_fwd_grouped_kernel_stage1"), read=READ),
)

# The paper's four combinations (pcast.contract.COMBOS): the contract of pcast.attention with
# only order and S set, at the paper's default tiles (64 x 64).
_PAPER_SOURCE = "this repository: kernels/api.py pcast.attention (the paper's contract)"
_PAPER = tuple(
    Policy(f"{order}-s{int(scale)}", order=order, scale=float(scale), source=_PAPER_SOURCE, read=READ)
    for order in ORDERS for scale in (1, 256)
)

POLICIES: dict[str, Policy] = {p.name: p for p in _PRESETS + _PAPER}
# The presets with splits (docs/decode.md): not in the policies experiment's default list (N = 1024 there).
DECODE_PRESETS = tuple(n for n, p in POLICIES.items() if p.num_splits > 1)


# ----------------------------------------------------------------------------- look-up and config

def get_policy(name_or_policy, extra: Mapping | None = None) -> Policy:
    """A :class:`Policy` from a preset name, a name in ``extra`` (name -> Policy, or name -> a
    config mapping as in :func:`~pcast.policies.policy_from_config`), or the Policy itself.

    Raises:
        ValueError: naming ``policy`` and the allowed names.
    """
    if isinstance(name_or_policy, Policy):
        return name_or_policy
    extra = dict(extra or {})
    if isinstance(name_or_policy, str):
        if name_or_policy in POLICIES:
            return POLICIES[name_or_policy]
        if name_or_policy in extra:
            found = extra[name_or_policy]
            return found if isinstance(found, Policy) else policy_from_config(name_or_policy, found)
    names = ", ".join(list(POLICIES) + [n for n in extra if n not in POLICIES])
    raise ValueError(f"policy={name_or_policy!r} is not allowed; allowed: a Policy or one of: {names}")


def policy_from_config(name: str, mapping) -> Policy:
    """A user's policy ``name`` from its config mapping (keys: :data:`POLICY_KEYS`, each optional;
    a missing key takes the Policy default, i.e. the paper's forward S = 1 contract).

    Raises:
        ValueError: naming ``policies.<name>.<key>`` for an unknown key or a bad value.
    """
    if _problem("name", name) is not None:
        raise ValueError(f"policies: name {name!r} is not allowed; allowed: {_RULES['name'][1]}")
    if mapping is None:
        mapping = {}
    if not isinstance(mapping, Mapping):
        raise ValueError(f"policies.{name} must be a mapping of Policy fields, got {type(mapping).__name__}")
    for key, value in mapping.items():
        if key not in POLICY_KEYS:
            raise ValueError(f"policies.{name}.{key} is not a policy key; allowed keys: {', '.join(POLICY_KEYS)}")
        allowed = _problem(key, value)
        if allowed is not None:
            raise ValueError(f"policies.{name}.{key}={value!r} is not allowed; allowed: {allowed}")
    return Policy(name=name, **dict(mapping))


def policies_from_config(mapping) -> dict[str, Policy]:
    """The ``policies:`` section of config.yaml (name -> keys) as name -> :class:`Policy`.

    Raises:
        ValueError: for a name that is a preset's, or as :func:`~pcast.policies.policy_from_config`.
    """
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping):
        raise ValueError(f"policies must be a mapping of name -> policy keys, got {type(mapping).__name__}")
    out = {}
    for name, keys in mapping.items():
        if name in POLICIES:
            raise ValueError(f"policies.{name}: the name is a preset's; choose another name (presets: "
                             f"{', '.join(POLICIES)})")
        out[name] = policy_from_config(name, keys)
    return out
