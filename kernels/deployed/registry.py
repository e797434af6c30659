"""The deployed kernels :mod:`pcast.deployed` can run: one :class:`Adapter` per kernel at a pinned release.

Torch-free and Triton-free: the Snakefile, the docs checks and ``python -m pcast.deployed`` read it without
importing a kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Wheel", "Adapter", "WHEELS", "ADAPTERS", "FETCH_COMMAND", "CACHE_ENV"]

FETCH_COMMAND = "python -m pcast.deployed fetch"
CACHE_ENV = "PCAST_DEPLOYED_CACHE"  # where the wheels and their unpacked Python files go


@dataclass(frozen=True)
class Wheel:
    """One pinned wheel: its distribution, version, file name and sha256 (checked after every download).

    The kernels are Python files, so any platform's wheel of the release serves: the pins name one."""

    dist: str
    version: str
    filename: str
    sha256: str
    licence: str
    size_mb: float
    python: str = "3.11"  # the Python version pip is asked for (the pinned file's tag allows it)

    @property
    def key(self) -> str:
        return f"{self.dist}-{self.version}"


@dataclass(frozen=True)
class Adapter:
    """One deployed kernel behind ``fn(q, k, v, *, sink_logit=None)``.

    ``module`` and ``function``: the kernel's module in the wheel and the launcher the adapter calls;
    ``kernel``: the ``@triton.jit`` functions whose P cast it runs; ``preset``: the
    :data:`pcast.policies.POLICIES` name it implements; ``choices``: the adapter's own choices (layout,
    page size, split count, operand scales), none of which the kernel fixes."""

    name: str
    wheel: str  # a key of WHEELS
    file: str
    module: str
    function: str
    kernel: str
    preset: str
    runner: str  # "<module of pcast.deployed>:<function>"
    choices: dict = field(default_factory=dict)
    loader: str = ""  # "<module of pcast.deployed>:<function>(root, module)"; empty: import from sys.path


WHEELS = {w.key: w for w in (
    Wheel("vllm", "0.34.0", "vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl",
          "79ca4b3cd74aec08c4bf476bdf0cb15735b605ae5368526a2faae1e30f044ca2", "Apache-2.0", 239.0),
    Wheel("sglang", "0.5.23", "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
          "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937", "Apache-2.0", 39.1),
)}

_VLLM_FILE = "vllm/v1/attention/ops/triton_unified_attention.py"
_VLLM_CHOICES = {
    "layout": "Q cast to e4m3fn as [B*Nq, H, d]; K, V cast to e4m3fn into a paged cache [blocks, 16, H_kv, d] "
              "with an identity block table; one sequence per batch entry; float32 output",
    "page_size": 16, "kv_quant_mode": "FP8_PER_TENSOR", "q_descale": 1.0, "k_descale": 1.0, "v_descale": 1.0,
}
ADAPTERS = {a.name: a for a in (
    Adapter("vllm-unified", "vllm-0.34.0", _VLLM_FILE, "vllm.v1.attention.ops.triton_unified_attention",
            "unified_attention", "kernel_unified_attention (2D: IS_3D=False)", "vllm-unified",
            "pcast.deployed.vllm:unified", {**_VLLM_CHOICES, "path": "2D (seq_threshold_3D=None)"}),
    Adapter("vllm-triton-decode", "vllm-0.34.0", _VLLM_FILE, "vllm.v1.attention.ops.triton_unified_attention",
            "unified_attention", "kernel_unified_attention (3D: IS_3D=True) + reduce_segments",
            "vllm-triton-decode", "pcast.deployed.vllm:split",
            {**_VLLM_CHOICES, "path": "3D: each query row a decode request (query length 1)",
             "num_par_softmax_segments": 16}),
    Adapter("sglang-decode", "sglang-0.5.23", "sglang/kernels/ops/attention/decode_attention.py",
            "sglang.kernels.ops.attention.decode_attention", "decode_attention_fwd",
            "_fwd_grouped_kernel_stage1 + _fwd_kernel_stage2", "sglang-decode", "pcast.deployed.sglang:decode",
            {"layout": "one decode request per query row over a token-major K/V buffer [B*N, H_kv, d] cast to "
                       "e4m3fn; query heads doubled when H = H_kv so that the grouped kernel runs",
             "num_kv_splits": 8, "k_scale": 1.0, "v_scale": 1.0, "q": "the input dtype (bf16, fp16 or float32)"},
            loader="pcast.deployed.sglang:load_module"),
)}
