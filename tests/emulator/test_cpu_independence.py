"""Counts identical on every CPU: the same collapse-like stack run in child processes under different
vector ISAs (torch's ``ATEN_CPU_CAPABILITY``) and different MKL code paths (``MKL_ENABLE_INSTRUCTIONS``).

The contract (docs/interfaces.md, "Exact decisions") makes every discrete decision of the P path on exact
values, so each count (underflow, terms, saturation, ...) of each call must be the same whatever the CPU's
code path. Outputs (float32 P·V products) may differ in their last bits where the sgemm's do; the counts may
not. Under torch's vector ISA alone (MKL's sgemm unchanged) the outputs are identical too: the P path's exp,
exp2 and sums are the contract's own (:mod:`pcast.emulator.ieee`), not torch's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# The stack: a sink of strength Δ over N keys, the paper's four combinations, the emulator's counts summed
# over rows per (Δ, combination, diagnostic). Printed as one JSON object.
_STACK = r"""
import json, sys
import torch
from pcast import attention
from pcast.contract import COMBOS, DIAGNOSTICS
from pcast.models.sinks import make_inputs
n, d, ksink, deltas = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
torch.set_num_threads(1)
counts, outs = {}, []
for delta in deltas:
    q, k, v = make_inputs(0, n=n, d=d, ksink=ksink, delta=float(delta))
    for order, scale in COMBOS:
        r = attention(q, k, v, order=order, scale=scale, ksink=ksink, backend="emulator")
        for name in DIAGNOSTICS:
            counts[f"{delta} {order} S={scale:g} {name}"] = int(getattr(r, name).sum())
        outs.append(r.out.flatten())
out = torch.stack(outs).view(torch.int32).tolist()
# a probe of the code path: the bits of one float32 matmul and one exp (over positive and negative arguments)
g = torch.Generator().manual_seed(1)
a, b, x = torch.randn(256, 64, generator=g), torch.randn(64, 256, generator=g), torch.randn(1 << 16, generator=g) * 30
probe = [hash(tuple((a @ b).view(torch.int32).flatten().tolist())), hash(tuple(x.exp().view(torch.int32).tolist()))]
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "counts": counts, "out": out,
                  "probe": probe}))
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


def _run_stack(env_update: dict, n: int, d: int, ksink: int, deltas) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _ENVS}
    env.update(env_update, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0")
    done = subprocess.run([sys.executable, "-c", _STACK, str(n), str(d), str(ksink), json.dumps(list(deltas))],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _differing(a: dict, b: dict) -> list[str]:
    assert a.keys() == b.keys()
    return [f"{key}: {a[key]} vs {b[key]}" for key in a if a[key] != b[key]]


def _check(var: str, n: int, d: int, ksink: int, deltas) -> None:
    if not _cpu_has("avx2"):
        pytest.skip("the CPU has no AVX2, so the two code paths compared are one")
    first, second = (_run_stack({var: value}, n, d, ksink, deltas) for value in _ENVS[var])
    if var == "ATEN_CPU_CAPABILITY":  # the variable took effect in each child
        assert (first["capability"], second["capability"]) == ("DEFAULT", "AVX2")
    elif first["probe"] == second["probe"]:  # (a hash is per process, so equal hashes need a fixed seed)
        pytest.skip(f"{var}={_ENVS[var][0]} and ={_ENVS[var][1]} give the same matmul and exp bits on this "
                    "CPU and MKL: the two settings run one code path")
    diff = _differing(first["counts"], second["counts"])
    calls = [a != b for a, b in zip(first["out"], second["out"])]  # reported, not required
    assert not diff, (f"{len(diff)} of {len(first['counts'])} counts differ between {var}="
                      f"{_ENVS[var][0]} and {_ENVS[var][1]} (outputs differ in their bits in {sum(calls)} "
                      f"of {len(calls)} calls):\n" + "\n".join(diff))
    if var == "ATEN_CPU_CAPABILITY":  # torch's vector ISA changes its exp and sums, which the P path does not use
        assert not any(calls), f"outputs differ in their bits in {sum(calls)} of {len(calls)} calls"


@pytest.mark.slow
@pytest.mark.parametrize("var", sorted(_ENVS))
def test_counts_identical_across_cpu_code_paths(var):
    """A collapse-like stack dense where the counts are most sensitive: N = 2,048, d = 128, 4 sink keys, Δ from
    5 to 14 in steps of 0.2 (both thresholds, ln(1/2^-10) − δk and the same + ln 256, inside), the four
    combinations: 1,288 counts. Decided on float32 values, 16 of them differ between MKL_CBWR=AUTO and
    =COMPATIBLE on an AMD EPYC. (Child processes, about 40 s each: ``slow``. The inner loop's checks of the same
    property are in tests/emulator/test_exact_decisions.py: counts equal to the exact computation's, and
    counts that do not move when every score and exp moves by two ulps.)"""
    _check(var, 2048, 128, 4, [round(5.0 + 0.2 * i, 1) for i in range(46)])
