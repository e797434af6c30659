"""A new preset is one entry in pcast.policies: every list of presets derives from POLICIES or is checked
against it by a test naming the file to change (docs/contributing.md, "Adding a policy")."""

from pathlib import Path

import pytest

import pcast
from pcast.policies import POLICIES, Policy
from pcast.policies.lists import DOC_FILES, preset_list, stale
from pcast.probes import fingerprint, small_probes

ROOT = Path(__file__).resolve().parents[2]
DUMMY = Policy("dummy-s32", order="reverse", scale=32.0, block_n=128, source="this repository: a test",
               read="2026-11")


@pytest.fixture
def dummy(monkeypatch):
    monkeypatch.setitem(POLICIES, DUMMY.name, DUMMY)
    return DUMMY.name


def test_the_docs_list_every_preset():
    assert stale(ROOT) == [], f"stale preset lists in {stale(ROOT)}: run `python tools/preset_docs.py`"
    for name in POLICIES:
        assert f"`{name}`" in preset_list()


def test_the_docs_list_takes_a_new_preset(dummy):
    assert f"`{dummy}`" in preset_list() and f"({len(POLICIES)} presets)" in preset_list()
    assert stale(ROOT) == list(DOC_FILES)  # every docs list is now out of date, and the check says so


def test_the_fingerprint_confusion_matrix_takes_a_new_preset(dummy):
    def box(name):
        return lambda q, k, v, *, sink_logit=None: pcast.attention(q, k, v, policy=name, sink_logit=sink_logit,
                                                                   backend="emulator").out
    fp = fingerprint(box(dummy), probes=small_probes(), params=False)
    assert fp.policy == dummy and set(fp.distance) == set(POLICIES)  # its row, over every preset
    other = fingerprint(box("fa3"), probes=small_probes(), params=False)
    assert other.policy == "fa3" and other.distance[dummy] > 0  # and its column in another preset's row
