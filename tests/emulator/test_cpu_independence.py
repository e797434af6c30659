"""Counts identical on every CPU: the same collapse-like stacks run in child processes under different
vector ISAs (torch's ``ATEN_CPU_CAPABILITY``) and different MKL code paths (``MKL_ENABLE_INSTRUCTIONS``,
``MKL_CBWR``).

The contract (docs/interfaces.md, "Exact decisions") makes every discrete decision of the P path on exact
values, so each count (underflow, terms, saturation, ...) of each call must be the same whatever the CPU's
code path. The outputs (float32 P·V products) are BLAS products, whose bits the contract does not promise
across code paths: they are reported, not compared.

A pair of children proves something only where their float32 scores (the emulator's own q·kᵀ, hashed in each
child) differ and their inputs do not: each test checks that the inputs are the same, and reports itself as
skipped (vacuous) where the scores are the same too. On an Intel Xeon (Sapphire Rapids, AVX-512, MKL) torch's
vector ISA leaves MKL's sgemm as it is, so the ``ATEN_CPU_CAPABILITY`` pair is vacuous there; MKL's own
settings change the scores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The stack: a sink of strength Δ over N keys, the paper's four combinations, the emulator's counts summed
# over rows per (Δ, combination, diagnostic). Printed as one JSON object.
_STACK = r"""
import hashlib, json, sys
import torch
from pcast import attention
from pcast.contract import COMBOS, DIAGNOSTICS
from pcast.emulator import core
spec = json.loads(sys.argv[1])
sys.path.insert(0, spec["support"])
torch.set_num_threads(1)
scores, inputs = hashlib.sha256(), hashlib.sha256()
real = core._scores
def hashed(*a, **kw):  # the emulator's own float32 scores, every chunk of every call
    s = real(*a, **kw)
    scores.update(s.contiguous().numpy().tobytes())
    return s
core._scores = hashed
if spec["kind"] == "random":
    from random_sinks import random_sink_inputs
    q, ks, v = random_sink_inputs(spec["seed"], spec["deltas"], n=spec["n"], d=spec["d"], ksink=spec["ksink"])
else:
    from pcast.models.sinks import make_inputs
    made = [make_inputs(0, n=spec["n"], d=spec["d"], ksink=spec["ksink"], delta=float(x)) for x in spec["deltas"]]
    q, v, ks = made[0][0], made[0][2], [m[1] for m in made]
counts, outs = {}, []
for t in (q, v, *ks):
    inputs.update(t.contiguous().numpy().tobytes())
for delta, k in zip(spec["deltas"], ks):
    for bn in spec["block_n"]:
        for order, scale in COMBOS:
            r = attention(q, k, v, order=order, scale=scale, ksink=spec["ksink"], block_n=bn, backend="emulator")
            for name in DIAGNOSTICS:
                counts[f"{delta} block_n={bn} {order} S={scale:g} {name}"] = int(getattr(r, name).sum())
            outs.append(hashlib.sha256(r.out.contiguous().numpy().tobytes()).hexdigest())
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "counts": counts, "out": outs,
                  "scores": scores.hexdigest(), "inputs": inputs.hexdigest()}))
"""

# (variable, the two settings compared): each pair is one code path against another on this CPU. torch's
# vector ISA changes exp and its own kernels; MKL's instruction set and its conditional numerical
# reproducibility mode (MKL_CBWR) change the sgemm behind the scores.
_ENVS = {
    "ATEN_CPU_CAPABILITY": ("default", "avx2"),
    "MKL_ENABLE_INSTRUCTIONS": ("SSE4_2", "AVX2"),
    "MKL_CBWR": ("AUTO", "COMPATIBLE"),
}


def _cpu_has(flag: str) -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return flag in f.read().split()
    except OSError:
        return False


def _run_stack(env_update: dict, spec: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _ENVS}
    env.update(env_update, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    spec = {**spec, "support": str(Path(__file__).resolve().parents[1] / "support")}
    done = subprocess.run([sys.executable, "-c", _STACK, json.dumps(spec)], env=env, capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _differing(a: dict, b: dict) -> list[str]:
    assert a.keys() == b.keys()
    return [f"{key}: {a[key]} vs {b[key]}" for key in a if a[key] != b[key]]


def _check(var: str, spec: dict) -> None:
    if not _cpu_has("avx2"):
        pytest.skip("the CPU has no AVX2, so the two code paths compared are one")
    first, second = (_run_stack({var: value}, spec) for value in _ENVS[var])
    if var == "ATEN_CPU_CAPABILITY":  # the variable took effect in each child
        assert (first["capability"], second["capability"]) == ("DEFAULT", "AVX2")
    assert first["inputs"] == second["inputs"], "the children drew different inputs: their counts prove nothing"
    if first["scores"] == second["scores"]:
        pytest.skip(f"vacuous: {var}={_ENVS[var][0]} and ={_ENVS[var][1]} give the same float32 scores on this "
                    "CPU and BLAS, so the children decided on the same values")
    diff = _differing(first["counts"], second["counts"])
    calls = sum(a != b for a, b in zip(first["out"], second["out"]))  # reported: not promised
    assert not diff, (f"{len(diff)} of {len(first['counts'])} counts differ between {var}="
                      f"{_ENVS[var][0]} and {_ENVS[var][1]}, whose scores differ (outputs differ in their bits in "
                      f"{calls} of {len(first['out'])} calls):\n" + "\n".join(diff))


#: A collapse-like stack dense where the counts are most sensitive: N = 2,048, d = 128, 4 sink keys
#: (:func:`pcast.models.sinks.make_inputs`), Δ from 5 to 14 in steps of 0.2 (both thresholds,
#: ln(1/2^-10) − δk and the same + ln 256, inside), the four combinations: 1,288 counts. Decided on float32
#: values, 16 of them differ between MKL_CBWR=AUTO and =COMPATIBLE on an AMD EPYC.
DENSE = dict(kind="sinks", n=2048, d=128, ksink=4, block_n=[64], deltas=[round(5.0 + 0.2 * i, 1) for i in range(46)])
#: Single calls at small d with sink keys in a random direction and of large norm (a few hundred at Δ = 15:
#: tests/support/random_sinks.py), two heads, Δ = 0…15, three block sizes, the four combinations.
RANDOM = dict(kind="random", seed=3, n=1024, d=64, ksink=4, block_n=[32, 64, 128], deltas=list(range(16)))


@pytest.mark.slow
@pytest.mark.parametrize("var", sorted(_ENVS))
@pytest.mark.parametrize("stack", ["dense", "random"])
def test_counts_identical_across_cpu_code_paths(var, stack):
    """The counts of each stack identical between the two children of each variable. (Child processes, a
    minute or more each: ``slow``. The inner loop's checks of the same property are in
    tests/emulator/test_exact_decisions.py: counts equal to the exact computation's, and counts that do not
    move when every score and exp moves by two ulps, on both stacks' shapes.)"""
    _check(var, DENSE if stack == "dense" else RANDOM)
