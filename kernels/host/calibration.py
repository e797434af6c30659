"""This machine's emulator costs, measured on one thread as the sweeps run them and kept once per machine: the
calibration behind the run plan's CPU estimate (:mod:`pcast.pipeline.plan`, which adds the pipeline's own parts
through :mod:`pcast.pipeline.calibration`) and the audit's estimate (:func:`pcast.audit.files.estimate`).

The parts, seconds per score (n²) at n = 1024, d = 64 (the meaning of each in the plan's docstring): ``c_q`` the
q·kᵀ matmuls, ``c_p`` steps 1-2 (the walk and the unrounded P), ``c_s`` the cast and the row sum, ``c_s_mx`` the
same for a microscaled P, ``c_v`` P·V, ``c_refa`` and ``c_ref`` the float64 reference.

Importing this module imports neither torch nor the emulator (the run plan reads it in Snakemake's process);
they are imported when a calibration is measured.
"""

from __future__ import annotations
from importlib.metadata import version

import json
import os
import platform
import time

__all__ = ["emulator_costs", "machine_key", "calibration_path", "load_calibration", "EMULATOR_KEYS"]

_CAL_FORMAT = "pcast-fp8 calibration v9"
#: The parts :func:`emulator_costs` measures.
EMULATOR_KEYS = ("c_q", "c_p", "c_s", "c_s_mx", "c_v", "c_refa", "c_ref", "n", "d")


def emulator_costs(*, n: int = 1024, d: int = 64, repeats: int = 3) -> dict:
    """Seconds per score (n²) of each part of the module docstring, on one thread, the best of ``repeats``,
    measured on Δ stacks of 2 and 6 items built as the jobs build them: ``c_q`` is the emulator's q·kᵀ matmuls of
    one item, chunk by chunk; one call (one order, scale and value tensor) at 2 and 6 items gives the per-item work
    (the difference over 4 items); at 6 items, three value tensors add ``2·c_v`` per item and three scales of one
    order ``2·(c_s + c_v)``; the reference at 2 and 6 items separates ``c_refa`` from ``c_ref``. About two
    seconds, plus importing torch."""
    import torch  # lazy: measured only when no calibration is kept (module docstring)

    from pcast import attention_calls  # lazy: torch-free at import
    from pcast.emulator.core import CHUNK_ELEMS  # lazy: torch-free at import
    from pcast.models.sinks import make_base, value_stack  # lazy: torch-free at import
    from pcast.reference import reference_stack  # lazy: torch-free at import

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
        rows = max(1, CHUNK_ELEMS // n)  # the emulator's chunk of rows
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
    finally:
        torch.set_num_threads(threads)
    u = n * n
    item = max(best["one6"] - best["one2"], 0.0) / 4 / u  # c_p + c_s + c_v
    c_v = max(best["values6"] - best["one6"], 0.0) / 2 / 6 / u
    c_s = max(max(best["scales6"] - best["one6"], 0.0) / 2 / 6 / u - c_v, 0.0)
    c_ref = max(best["ref6"] - best["ref2"], 0.0) / 4 / u
    c_s_mx = c_s + max(best["mx6"] - best["one6"], 0.0) / 6 / u  # steps 3-4 of an NVFP4/MXFP4 cast
    return {"c_q": best["scores"] / u, "c_p": max(item - c_s - c_v, 0.0), "c_s": c_s, "c_s_mx": c_s_mx, "c_v": c_v,
            "c_refa": max(best["ref2"] / u - 2 * c_ref, 0.0), "c_ref": c_ref, "n": n, "d": d}


def machine_key() -> dict:
    """What a calibration is valid for (read without importing torch)."""
    return {"format": _CAL_FORMAT, "host": platform.node(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "torch": version("torch")}


def calibration_path() -> str:
    """Where this machine's calibration is kept: one file per user, shared by every checkout."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "pcast-fp8", "calibration.json")


def load_calibration(path: str | os.PathLike | None = None, *, measure=None, keys=EMULATOR_KEYS) -> dict:
    """This machine's calibration from ``path`` (default :func:`calibration_path`) if it was made here and holds
    every part of ``keys``, else a new one, saved there: ``measure()`` (default :func:`emulator_costs`) with
    :func:`machine_key`. The pipeline measures more parts into the same file; a calibration it made serves the
    audit, and one the audit made is measured again, whole, by the pipeline."""
    path = calibration_path() if path is None else path
    try:
        with open(path) as fh:
            cal = json.load(fh)
        if all(cal.get(k) == v for k, v in machine_key().items()) and all(k in cal for k in keys):
            return cal
    except (OSError, ValueError):
        pass
    cal = {**machine_key(), **(measure or emulator_costs)()}
    try:  # best effort: an unwritable cache only means calibrating again next time
        os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)
        tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
        with open(tmp, "w") as fh:
            json.dump(cal, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass
    return cal
