"""The supporting check: every Triton-kernel-vs-emulator difference explained."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from kernels.analysis.text import short, truthy
from kernels.analysis.verdicts.common import result

__all__ = ["conformance_check"]


def conformance_check(conf: pd.DataFrame, cfg: Mapping | None = None) -> dict:
    """Every kernel-vs-emulator difference explained; the diagnostics' agreement reported."""
    crit = "every (order, S, causal, shape, seed) row has explained = True"
    if conf is None or conf.empty:
        return result("conformance", "INCONCLUSIVE", crit, {}, ["no conformance data"])
    expl = truthy(conf["explained"])
    diag = truthy(conf["diag_equal"])
    nums = {"rows": int(len(conf)), "explained": int(expl.sum()), "diag_equal": int(diag.sum()),
            "max_abs_diff": conf["max_abs_diff"].max(),
            "kernel_backends": "+".join(sorted(set(map(str, conf.get("kernel_backend", []))))) or "unknown"}
    details = [f"{nums['explained']}/{nums['rows']} rows explained, diagnostics identical in "
               f"{nums['diag_equal']}/{nums['rows']}; max |Δout| = {short(nums['max_abs_diff'])}; kernel ran as "
               f"{nums['kernel_backends']}"]
    verdict = "PASS" if expl.all() else "FAIL"
    return result("conformance", verdict, crit, nums, details)
