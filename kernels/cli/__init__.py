"""The command-line tools, installed as console scripts by ``pip install -e .``.

* ``pcast-audit`` (:mod:`pcast.cli.audit`): your own q, k, v through your P-cast policy and
  the paper's four combinations;
* ``pcast-bench`` (:mod:`pcast.cli.bench`): the emulator's throughput against torch's matmuls;
* ``pcast-gpu-check`` (:mod:`pcast.cli.gpu_check`): the compiled kernel on a CUDA GPU; with
  ``--compile-only`` (:mod:`pcast.cli.compile_check`), no GPU: every kernel compiled for sm_89, sm_90
  and sm_100 and its instructions checked.

Each also runs as ``python -m pcast.cli.<name>``.
"""
