"""Table T10 and the deployed section of the verdict: INCONCLUSIVE naming the fetch command without the wheels,
PASS only when the numbers of every row say so."""

import numpy as np
import pandas as pd
import pytest

import pcast.deployed as D
from pcast.analysis.verdicts.deployed import claim_deployed, row_status
from pcast.pipeline.deployed import T10_COLUMNS, t10_rows


def _row(**kw):
    base = {"kernel": "vllm-unified", "release": "vllm 0.34.0", "preset": "vllm-unified", "fingerprint": "vllm-unified",
            "probe_rows_outside": "0", "real_rows_outside": "0", "status": "PASS", "reason": ""}
    return base | kw


def test_without_the_wheels_every_row_is_inconclusive_naming_the_fetch(tmp_path, monkeypatch):
    monkeypatch.setenv(D.CACHE_ENV, str(tmp_path))
    tensors = {f"layer0/{t}": np.zeros((1, 2, 8, 16), np.float32) for t in "qkv"}
    rows = t10_rows(tensors)
    assert [r["kernel"] for r in rows] == list(D.ADAPTERS)
    assert all(r["status"] == "INCONCLUSIVE" and D.FETCH_COMMAND in r["reason"] for r in rows)
    verdict = claim_deployed(pd.DataFrame(rows, columns=T10_COLUMNS).astype(str))
    assert verdict["verdict"] == "INCONCLUSIVE" and any(D.FETCH_COMMAND in d for d in verdict["details"])


@pytest.mark.parametrize("kw, status", [({}, "PASS"), ({"fingerprint": "vllm-unified-1c98a49"}, "FAIL"),
                                        ({"real_rows_outside": "3"}, "FAIL"), ({"probe_rows_outside": "1"}, "FAIL"),
                                        ({"status": "INCONCLUSIVE"}, "FAIL"),
                                        ({"status": "INCONCLUSIVE", "reason": "run x"}, "INCONCLUSIVE")])
def test_a_row_is_checked_from_its_numbers(kw, status):
    assert row_status(_row(**kw)) == status


def test_the_section_passes_only_when_every_kernel_does():
    ok = pd.DataFrame([_row(), _row(kernel="sglang-decode", preset="sglang-decode", fingerprint="sglang-decode")])
    assert claim_deployed(ok)["verdict"] == "PASS"
    bad = pd.DataFrame([_row(), _row(kernel="sglang-decode", preset="sglang-decode", fingerprint="none",
                                     status="FAIL", reason="the fingerprint names none")])
    assert claim_deployed(bad)["verdict"] == "FAIL"
