"""The run plan's calibration (:mod:`pcast.pipeline.plan`): the parts of its CPU-time model measured on
this machine, on one thread, as the jobs run them. The emulator's parts, the cache and its machine key are
:mod:`pcast.host.calibration`'s (the audit's estimate reads them too); this module adds the pipeline's own:
the fixed costs of a call, the decode experiment's and a shard's first calls. ``load_calibration`` makes it
once per machine and keeps it; the model and the meaning of each part are in the plan's docstring."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

from pcast.host.calibration import EMULATOR_KEYS, calibration_path, emulator_costs, machine_key
from pcast.host.calibration import load_calibration as _load
from pcast.pipeline.decode_config import calls

__all__ = ["calibrate", "load_calibration", "calibration_path", "machine_key", "PIPELINE_KEYS"]

#: Every part the run plan reads: the emulator's, and the pipeline's own.
PIPELINE_KEYS = EMULATOR_KEYS + ("o_call", "o_p", "o_s", "o_v", "o_refa", "o_ref", "o_proc", "c_dec", "c_dec_p")


def calibrate(*, n: int = 1024, d: int = 64, repeats: int = 3) -> dict:
    """This machine's calibration, whole: the emulator's parts (:func:`pcast.host.calibration.emulator_costs` at
    ``n``, ``d``), the fixed costs of one call on tiny stacks (:func:`_fixed_costs`), the decode experiment's parts
    (:func:`_decode_costs`) and a shard's first calls (:func:`_first_calls`), with :func:`pcast.host.calibration.machine_key`. About
    five seconds, plus importing torch."""
    import torch  # lazy: the run plan imports this module without torch (pcast.pipeline.plan)

    cal = {**machine_key(), **emulator_costs(n=n, d=d, repeats=repeats)}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cal.update(_fixed_costs(repeats))
        cal.update(_decode_costs(repeats))
        cal["o_proc"] = _first_calls()
    finally:
        torch.set_num_threads(threads)
    return cal


def load_calibration(path: str | os.PathLike | None = None) -> dict:
    """This machine's whole calibration from ``path`` (default :func:`calibration_path`) if it was made here with
    every part of :data:`PIPELINE_KEYS`, else a new one (:func:`calibrate`), saved there."""
    return _load(path, measure=calibrate, keys=PIPELINE_KEYS)


#: Run in a fresh interpreter by :func:`_first_calls`: a shard's first reference and attention_calls on a
#: tiny stack (after the imports a shard makes before its clock starts), less the same calls made again.
_FIRST_CALLS = """
import sys, time, torch
torch.set_num_threads(1)
from pcast.models.sinks import make_base, value_stack
t = []
for rep in range(2):
    q, k, values = value_stack(make_base(rep, n=32, d=16), 4, [4.0, 5.0], [1.0], torch.device("cpu"))
    t0 = time.perf_counter()
    from pcast.reference import reference_stack
    from pcast import attention_calls
    reference_stack(q, k, values)
    attention_calls(q, k, values, [{"scale": 256.0}, {"scale": 1.0, "order": "reverse"}], order="forward",
                    ksink=4, block_n=16, backend="emulator")
    t.append(time.perf_counter() - t0)
print(max(t[0] - t[1], 0.0))
"""


def _first_calls() -> float:
    """Seconds a shard's process pays once, on its first calls (``o_proc``): measured in a fresh interpreter
    (about two seconds, most of it importing torch); 0, with a warning on the ``pcast.pipeline`` logger that
    names the cause, if that interpreter fails (the plan then underestimates small shards)."""
    try:
        proc = subprocess.run([sys.executable, "-c", _FIRST_CALLS], capture_output=True, text=True, timeout=120,
                              check=True)
        return float(proc.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError) as e:
        err = getattr(e, "stderr", None) or ""
        err = err.decode(errors="replace") if isinstance(err, bytes) else err  # a timeout's stays bytes
        detail = err.strip().splitlines()[-1:] or [f"{type(e).__name__}: {e}"]
        logging.getLogger("pcast.pipeline").warning(
            "calibration: the first-calls cost (o_proc) could not be measured in a fresh interpreter (%s); "
            "taking 0 s, so the plan underestimates small shards", detail[0])
        return 0.0


def _fixed_costs(repeats: int) -> dict:
    """The fixed costs of the module docstring (``o_call``, ``o_p``, ``o_s``, ``o_v``, ``o_refa``, ``o_ref``), from
    the best times of one attention_calls and of the reference on tiny Δ stacks (n = 32, d = 16, block_n 16):
    2 and 6 items under one call, and 6 items with a second scale, a second order or a second value tensor."""
    import torch  # lazy: the run plan imports this module without torch (pcast.pipeline.plan)

    from pcast import attention_calls  # lazy: torch-free at import
    from pcast.models.sinks import make_base, value_stack  # lazy: torch-free at import
    from pcast.reference import reference_stack  # lazy: torch-free at import

    base = make_base(0, n=32, d=16)
    tiny = {(L, nv): value_stack(base, 4, [4.0 + i for i in range(L)], [1.0, 0.5][:nv], torch.device("cpu"))
            for L, nv in ((2, 1), (6, 1), (6, 2))}
    one, scales, orders = [{"scale": 256.0}], [{"scale": 256.0}, {"scale": 1.0}], [{}, {"order": "reverse"}]
    runs = {"o2": (2, 1, one), "o6": (6, 1, one), "s6": (6, 1, scales), "r6": (6, 1, [{"scale": 256.0, **c}
                                                                                      for c in orders]),
            "v6": (6, 2, one)}
    t = dict.fromkeys([*runs, "r2", "ref6"], float("inf"))
    for _ in range(repeats):
        for key, (L, nv, calls) in runs.items():
            q, k, values = tiny[(L, nv)]
            t0 = time.perf_counter()
            attention_calls(q, k, values, calls, order="forward", ksink=4, block_n=16, backend="emulator")
            t[key] = min(t[key], time.perf_counter() - t0)
        for L, key in ((2, "r2"), (6, "ref6")):
            q, k, values = tiny[(L, 1)]
            t0 = time.perf_counter()
            reference_stack(q, k, values)
            t[key] = min(t[key], time.perf_counter() - t0)
    item = max(t["o6"] - t["o2"], 0.0) / 4  # one item under one call: o_p + o_s + its bookkeeping
    o_v = max(t["v6"] - t["o6"], 0.0) / 6
    o_s = max(max(t["s6"] - t["o6"], 0.0) / 6 - o_v, 0.0)  # a second scale: steps 3-6 again
    o_p = max(max(t["r6"] - t["o6"], 0.0) / 6 - o_s - o_v, 0.0)  # a second order: steps 1-6 again
    o_ref = max(t["ref6"] - t["r2"], 0.0) / 4
    return {"o_call": max(t["o2"] - 2 * item, 0.0), "o_p": max(item - o_s - o_v, o_p), "o_s": o_s, "o_v": o_v,
            "o_refa": max(t["r2"] - 2 * o_ref, 0.0), "o_ref": o_ref}


def _decode_costs(repeats: int) -> dict:
    """The decode experiment's parts (:mod:`pcast.pipeline.decode_runs`), the best of ``repeats`` in CPU seconds
    of this process (``time.process_time``, one thread: a loaded machine does not inflate them): ``c_dec``,
    seconds per (configuration, decode row, key) of one Δ stack of 4 rows at the experiment's n = 8192 (the
    emulator's cost per key of a split decode row depends on n; d = 16) with its float64 reference, through
    every configuration of the default grid; ``c_dec_p``, seconds per (call, row, key, d) of the P-cast error
    calls (16 rows of one 256-key partition, d = 256)."""
    import torch  # lazy: the run plan imports this module without torch (pcast.pipeline.plan)
    from pcast.pipeline.decode_runs import kind_rows, partition_rows  # lazy: they import torch (as above)
    from pcast.pipeline.runs import Tally  # lazy: it imports torch (as above)

    from pcast.models.sinks import make_base  # lazy: torch-free at import

    grid = {"num_splits": [1, 4, 16], "split_layout": ["contiguous", "interleaved"], "order": ["forward", "reverse"],
            "p_normalize": ["online", "partition"], "scale": [1, 256]}
    spec = {"ksink": 4, "calls": calls(grid), "fmt": "e4m3fn", "block_n": 64, "backend": "emulator", "sigma": [1.0],
            "partition": {"cases": [{"n": 256, "scale": 1.0}], "rows": 16}}
    n, nc = 8192, len(spec["calls"])
    base = make_base(0, heads=1, n=n, d=16)
    best = {"keys": float("inf"), "part": float("inf")}
    for _ in range(repeats):
        t0 = time.process_time()
        kind_rows(Tally(), spec, "keys", base, [4.0, 6.0, 8.0, 10.0], {}, torch.device("cpu"))
        best["keys"] = min(best["keys"], time.process_time() - t0)
        t0 = time.process_time()
        partition_rows(Tally(), spec, 0, {}, torch.device("cpu"))
        best["part"] = min(best["part"], time.process_time() - t0)
    return {"c_dec": best["keys"] / (4 * n * nc), "c_dec_p": best["part"] / (2 * 16 * 256 * 256)}
