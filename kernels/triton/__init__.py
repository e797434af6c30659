"""The Triton kernels and their launchers: compiled on a CUDA GPU, interpreted on a CPU.

* :mod:`.kernel`: the attention program (``_attn_fwd`` with its KV loop ``_attn_fwd_inner``), the
  bit-exact software FP8 rounding and the launchers;
* :mod:`.interpret`: Triton's interpreter for CPU tensors, leaving ``triton.language`` as it found it;
* :mod:`.fp8cast`: :func:`pcast.triton.fp8cast.fp8_cast_fixed`, a correct FP8 downcast (nearest-even, satfinite) for any kernel the interpreter runs;
* :mod:`.rounding`: ``fp8_round``, the bit-exact software FP8 rounding every program shares;
* :mod:`.policy`: the P-policy options inside the KV loop (exp2 offset, lazy rescale, sinks);
* :mod:`.fp4`: microscaled FP4 P inside each block;
* :mod:`.deploy`: the deploy-mode FP8 kernel (hardware cast, FP8 tensor-core P·V; compiled only);
* :mod:`.aot`: compiling a launch for sm_89 / sm_90 / sm_100 without a GPU, and reading its instructions;
* :mod:`.aot_checks`: the instruction checks on a compiled kernel (docs/compiled.md).

May import: :mod:`pcast.contract`, :mod:`pcast.formats` and :mod:`pcast.reference`.
(Inside this package ``import triton`` is the Triton compiler: imports are absolute.)
"""
