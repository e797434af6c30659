"""The run plan's calibration (:mod:`pcast.pipeline.plan`): the parts of its CPU-time model measured on
this machine, on one thread, as the jobs run them. ``load_calibration`` makes it
once per machine and keeps it; the model and the meaning of each part are in that module's docstring."""

from __future__ import annotations

import json
import os
import platform
import time

__all__ = ["calibrate"]


def calibrate(*, n: int = 1024, d: int = 64, repeats: int = 3) -> dict:
    """Seconds per score (n²) of each part of the module docstring's model, on one thread, the best of
    ``repeats``, measured on Δ stacks of 2 and 6 items built as the jobs build them: ``c_q`` is the
    emulator's q·kᵀ matmuls of one item, chunk by chunk; one call (one order, scale and value tensor)
    at 2 and 6 items gives the per-item work (the difference over 4 items); at 6 items, three value tensors add ``2·c_v`` per item and three scales of one
    order ``2·(c_s + c_v)``; the reference at 2 and 6 items separates ``c_refa`` from ``c_ref``.
    About two seconds, plus importing torch."""
    import torch

    from pcast import attention_calls
    from pcast.emulator.core import _CHUNK_ELEMS
    from pcast.reference import reference_stack
    from pcast.models.sinks import make_base
    from pcast.pipeline.runs import value_stack

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        base = make_base(0, n=n, d=d)
        stacks = {L: value_stack(base, 4, [4.0 + i for i in range(L)], [1.0], torch.device("cpu")) for L in (2, 6)}
        one = [{"scale": 256.0}]
        runs = {"one2": (2, 1, one), "one6": (6, 1, one), "values6": (6, 3, one),
                "scales6": (6, 1, [{"scale": s} for s in (1.0, 16.0, 256.0)]),
                "mx6": (6, 1, [{"scale": 256.0, "fmt": "nvfp4"}])}  # a microscaled cast instead of E4M3
        best = dict.fromkeys([*runs, "ref2", "ref6", "scores"], float("inf"))
        q1, kT = stacks[2][0][0, 0], stacks[2][1][0, 0].t()
        rows = max(1, _CHUNK_ELEMS // n)  # the emulator's chunk of rows
        for _ in range(repeats):
            t0 = time.perf_counter()
            for r0 in range(0, n, rows):
                torch.matmul(q1[r0:r0 + rows], kT)
            best["scores"] = min(best["scores"], time.perf_counter() - t0)
            for key, (L, nv, calls) in runs.items():
                q, k, (v,) = stacks[L]
                t0 = time.perf_counter()
                attention_calls(q, k, [v] * nv, calls, order="forward", ksink=4, backend="emulator")
                best[key] = min(best[key], time.perf_counter() - t0)
            for L in (2, 6):
                q, k, values = stacks[L]
                t0 = time.perf_counter()
                reference_stack(q, k, values)
                best[f"ref{L}"] = min(best[f"ref{L}"], time.perf_counter() - t0)
        small = _fixed_costs(repeats)
        small.update(_decode_costs(repeats))
        small["o_proc"] = _first_calls()
    finally:
        torch.set_num_threads(threads)
    u = n * n
    item = max(best["one6"] - best["one2"], 0.0) / 4 / u  # c_p + c_s + c_v
    c_v = max(best["values6"] - best["one6"], 0.0) / 2 / 6 / u
    c_s = max(max(best["scales6"] - best["one6"], 0.0) / 2 / 6 / u - c_v, 0.0)
    c_ref = max(best["ref6"] - best["ref2"], 0.0) / 4 / u
    c_s_mx = c_s + max(best["mx6"] - best["one6"], 0.0) / 6 / u  # steps 3-4 of an NVFP4/MXFP4 cast
    return {**_machine_key(), "c_q": best["scores"] / u, "c_p": max(item - c_s - c_v, 0.0),
            "c_s": c_s, "c_s_mx": c_s_mx, "c_v": c_v, "c_refa": max(best["ref2"] / u - 2 * c_ref, 0.0), "c_ref": c_ref, "n": n, "d": d,
            **{k: v for k, v in small.items() if k.startswith(("o_", "c_dec"))}}


#: Run in a fresh interpreter by :func:`_first_calls`: a shard's first reference and attention_calls on a
#: tiny stack (after the imports a shard makes before its clock starts), less the same calls made again.
_FIRST_CALLS = """
import sys, time, torch
torch.set_num_threads(1)
from pcast.pipeline.runs import value_stack
from pcast.models.sinks import make_base
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
    import logging
    import subprocess
    import sys

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
    import torch

    from pcast import attention_calls
    from pcast.reference import reference_stack
    from pcast.models.sinks import make_base
    from pcast.pipeline.runs import value_stack

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
    import torch

    from pcast.models.sinks import make_base
    from pcast.pipeline.decode_config import calls
    from pcast.pipeline.decode_runs import _kind_rows, _partition_rows
    from pcast.pipeline.runs import _Tally

    grid = {"num_splits": [1, 4, 16], "split_layout": ["contiguous", "interleaved"], "order": ["forward", "reverse"],
            "p_normalize": ["online", "partition"], "scale": [1, 256]}
    spec = {"ksink": 4, "calls": calls(grid), "fmt": "e4m3fn", "block_n": 64, "backend": "emulator", "sigma": [1.0],
            "partition": {"cases": [{"n": 256, "scale": 1.0}], "rows": 16}}
    n, nc = 8192, len(spec["calls"])
    base = make_base(0, heads=1, n=n, d=16)
    best = {"keys": float("inf"), "part": float("inf")}
    for _ in range(repeats):
        t0 = time.process_time()
        _kind_rows(_Tally(), spec, "keys", base, [4.0, 6.0, 8.0, 10.0], {}, torch.device("cpu"))
        best["keys"] = min(best["keys"], time.process_time() - t0)
        t0 = time.process_time()
        _partition_rows(_Tally(), spec, 0, {}, torch.device("cpu"))
        best["part"] = min(best["part"], time.process_time() - t0)
    return {"c_dec": best["keys"] / (4 * n * nc), "c_dec_p": best["part"] / (2 * 16 * 256 * 256)}


# ----------------------------------------------------------------------------- the cached calibration

_CAL_FORMAT = "pcast-fp8 calibration v9"


def _machine_key() -> dict:
    """What a calibration is valid for (read without importing torch)."""
    from importlib.metadata import version

    return {"format": _CAL_FORMAT, "host": platform.node(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "torch": version("torch")}


def calibration_path() -> str:
    """Where this machine's calibration is kept: one file per user, shared by every checkout."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "pcast-fp8", "calibration.json")


def load_calibration(path: str | os.PathLike | None = None) -> dict:
    """This machine's calibration from ``path`` (default :func:`calibration_path`) if it was made
    here, else a new one (:func:`calibrate`), saved there."""
    path = calibration_path() if path is None else path
    try:
        with open(path) as fh:
            cal = json.load(fh)
        if all(cal.get(k) == v for k, v in _machine_key().items()):
            return cal
    except (OSError, ValueError):
        pass
    cal = calibrate()
    try:  # best effort: an unwritable cache only means calibrating again next time
        os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)
        tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
        with open(tmp, "w") as fh:
            json.dump(cal, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass
    return cal
