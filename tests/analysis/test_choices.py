"""Every number a C1–C6 verdict reads is a key of ``claims.<id>`` (or of ``statistics``) in config.yaml, and every
such key that is a choice is a row of the claim's robustness table: no choice that decides a verdict can be left
out of it. The keys that are not choices are listed here, each with the reason (the sentence names it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pcast.analysis import verdicts as C

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())

#: claims.<id> keys that are not choices of the artifact: the sentence names them.
SET_BY_THE_SENTENCE = {
    "C1": {"combos": "the sentence's forward order, at each S the grid runs"},
    "C2": {"zero_combo": "the sentence's 'reverse combined with S = 256'", "reverse_combo": "the sentence's reverse "
           "order", "forward_combo": "the collapse the sentence says reverse removes (shown, never judged)"},
    "C3": {"scale": "the sentence's S = 256"},
    "C4": {},
    "C5": {"baseline": "the collapse the fixes are measured against", "fixes": "the sentence's fixes",
           "band": "the sentence's 3–10×"},
    "C6": {"pairs": "the sentence's 'both fixes' against the combined one", "trivial_pair": "the pair that marks a "
           "Δ where the sink changes nothing (its margin is the choice, claims.C6.trivial_margin)"},
}


@pytest.fixture(scope="module")
def rows():
    """The robustness rows of C1–C6 on the synthetic agreeing tables (tests/support/synthetic_tables.py)."""
    import numpy as np
    from synthetic_tables import config_sections, make_collapse, make_conformance, make_scales, make_threshold

    stats_cfg, claims_cfg = config_sections()
    tidy = {"collapse": make_collapse(reverse_zero="all", deltas=tuple(np.arange(0.0, 12.01, 1.0))),
            "scales": make_scales(), "threshold": make_threshold(), "conformance": make_conformance()}
    got = C.evaluate_tidy(tidy, stats_cfg, claims_cfg)
    return {cid: got[cid]["robustness"] for cid in SET_BY_THE_SENTENCE}


@pytest.mark.parametrize("cid", sorted(SET_BY_THE_SENTENCE))
def test_every_choice_a_verdict_reads_is_a_row_of_its_robustness_table(cid, rows):
    cfg = CONFIG["claims"][cid]
    keys = {r["key"] for r in rows[cid]}
    for k in cfg:
        if k == "alternatives":
            continue
        if SET_BY_THE_SENTENCE[cid].get(k):
            continue
        assert f"claims.{cid}.{k}" in keys, f"claims.{cid}.{k} decides the verdict but is no robustness row: {keys}"
    for k, values in (cfg.get("alternatives") or {}).items():
        row = [r for r in rows[cid] if r["key"].endswith(f".{k}")]
        assert row, f"claims.{cid}.alternatives.{k} has no robustness row"
        assert row[0]["verdicts"] and all(isinstance(v, str) for v in row[0]["verdicts"].values())
        assert len(row[0]["verdicts"]) >= len([v for v in values if str(v) != row[0]["value"]]), (cid, k, row[0])
    for r in rows[cid]:  # a row read from the config names a key the config has
        if r["key"].startswith(("claims.", "statistics.")):
            section, *path = r["key"].split(".")
            node = CONFIG[section]
            for p in path:
                assert p in node, (cid, r["key"])
                node = node[p]


def test_the_sentences_keys_are_named_with_a_reason():
    for cid, keys in SET_BY_THE_SENTENCE.items():
        for k, why in keys.items():
            assert k in CONFIG["claims"][cid], (cid, k)
            assert why is None or len(why) > 10


def test_no_verdict_number_is_typed_in_the_claim_modules():
    """The numbers the issue found typed (C1's 0.0595, C3's 448) come from the config: changing the config key
    changes the verdict's criterion."""
    from synthetic_tables import config_sections, make_collapse, make_scales
    from pcast.analysis import stats

    stats_cfg, claims_cfg = config_sections()
    coll = stats.collapse(make_collapse(svs_values=(0.0,)), stats_cfg)
    a = C.claim_c1(coll, claims_cfg["C1"])
    b = C.claim_c1(coll, dict(claims_cfg["C1"], allowance=2.0))
    assert b["numbers"]["tolerance_leading"] == pytest.approx(2 * a["numbers"]["tolerance_leading"])
    assert a["numbers"]["tolerance_leading"] == pytest.approx(0.0595, abs=5e-4)  # one term at ksink 4
    sc = stats.scales(make_scales(), stats_cfg)
    assert C.claim_c3(sc, claims_cfg["C3"])["verdict"] == "PASS"
    assert C.claim_c3(sc, dict(claims_cfg["C3"], max_scale=512))["verdict"] == "FAIL"  # 512 covers more than 256


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("cid", ["C1", "C2"])
def test_the_docs_state_the_criterion_the_code_applies(cid):
    """docs/method.md and docs/claims.md state C1's and C2's rule in the words every verdict's criterion starts
    with (claims.json's ``criterion``)."""
    import numpy as np
    from synthetic_tables import config_sections, make_collapse
    from pcast.analysis import stats
    from pcast.analysis.verdicts.underflow import RULES

    stats_cfg, claims_cfg = config_sections()
    coll = stats.collapse(make_collapse(svs_values=(0.0,), deltas=tuple(np.arange(0.0, 12.01, 2.0))), stats_cfg)
    r = (C.claim_c1 if cid == "C1" else C.claim_c2)(coll, claims_cfg[cid])
    assert r["criterion"].startswith(RULES[cid] + ": ")
    for page in ("docs/method.md", "docs/claims.md"):
        assert _words(RULES[cid]) in _words((ROOT / page).read_text()), f"{page} does not state {cid}'s rule"
