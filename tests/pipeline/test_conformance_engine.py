"""The conformance check's cases and engine rows (pcast.pipeline.conformance_cases, conformance_runs).

* the cases are every call the experiments of config.yaml make: each listed policy under each variant and
  sink kind, each fp4 cast in each order, each sweep order x scale, read from the config here, not from the
  module;
* the covering subset meets every (option, value) of the cases, and the property can fail;
* engine rows: pcast.attention_calls on a Δ stack against one pcast.attention per item, on real tensors,
  identical; the comparison catches one float32 ulp of one output and one count of one diagnostic.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest
import torch
import yaml

from pcast.contract import combo_label
from pcast.models.sinks import make_base
from pcast.pipeline import config as pconfig
from pcast.pipeline.conformance_cases import OPTIONS, covering_subset, experiment_cases, option_values
from pcast.pipeline.conformance_runs import _equal_row, _stack, engine_rows

REPO = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())


@pytest.fixture(scope="module")
def cases():
    e = CONFIG["experiments"]
    return experiment_cases(e, CONFIG.get("policies"), ksink=e["conformance"]["ksink"])


def test_the_cases_are_every_call_of_the_experiments(cases):
    e = CONFIG["experiments"]
    labels = [c["label"] for c in cases]
    assert len(labels) == len(set(labels))
    want = {f"sweeps {combo_label(o, s)}" for x in ("collapse", "scales", "threshold")
            for o, s in itertools.product(e[x]["order"], e[x]["scale"])}
    pol = e["policies"]
    want |= {f"policies {p} {v} {k}" for p, v, k in itertools.product(pol["policies"], pol["variants"],
                                                                       pol["sink_kinds"])}
    want |= {f"policies floor {v} {k}" for v, k in itertools.product(pol["variants"], pol["sink_kinds"])}
    fp4 = e["fp4"]
    casts = [f"nvfp4 S1={s:g}" for s in fp4["nvfp4_scales"]] + ["nvfp4 per-row"] * bool(fp4["nvfp4_per_row"])
    casts += [f"mxfp4 S1={s:g}" for s in fp4["mxfp4_scales"]] + [f"{fp4['baseline']['fmt']} S={fp4['baseline']['scale']:g}"]
    want |= {f"fp4 {c} {o}" for c, o in itertools.product(casts, fp4["order"])}
    assert set(labels) == want
    # the deployed variant carries its operand casts; a learned sink logit has no sink key
    dep = [c for c in cases if " deployed " in c["label"]]
    assert dep and all(c["call"]["qk_fmt"] == "e4m3fn" and c["call"]["v_fmt"] == "e4m3fn" for c in dep)
    assert all(c["call"]["ksink"] == 0 for c in cases if c["kind"] == "logit")


def test_the_covering_subset_meets_every_option_value(cases):
    idx = covering_subset(cases)
    assert len(idx) < len(cases) / 5  # a small subset: the interpreter costs about a second a call
    # the FP8 dynamic scales (the policies tile-max and row-block-max) are engine cases the kernel refuses: never
    # chosen, their values met by the other cases or not at all
    refused = [i for i, c in enumerate(cases) if c["call"]["scale_mode"] in ("tile_max", "per_row")
               and c["call"]["fmt"] == "e4m3fn"]
    assert refused and not set(refused) & set(idx)
    every = {(k, v) for i, c in enumerate(cases) if i not in refused for k, v in option_values(c).items()}
    met = {(k, v) for i in idx for k, v in option_values(cases[i]).items()}
    assert met == every and {k for k, _ in every} == set(OPTIONS)
    # values the experiments use that only a few calls carry are among them
    for pair in [("fmt", "nvfp4"), ("fmt", "mxfp4"), ("fmt", "e5m2"), ("scale_mode", "per_row"),
                 ("rescale_threshold", "8"), ("sink", "logit init"), ("qk_fmt", "e4m3fn"),
                 ("scale", "non-power of two"), ("scale", "above max_finite"), ("order", "reverse")]:
        assert pair in met
    # the property can fail: leave out the one chosen case that carries per_row
    per_row = [i for i in idx if option_values(cases[i])["scale_mode"] == "per_row"]
    rest = {(k, v) for i in idx if i not in per_row for k, v in option_values(cases[i]).items()}
    assert ("scale_mode", "per_row") not in rest


def test_engine_rows_are_identical_to_single_calls(cases):
    """A few of the experiments' calls, Δ below, at and above Δc, two sink norms, at a small N."""
    pick = [c for c in cases if c["label"] in ("sweeps forward S=1", "sweeps reverse S=256", "sweeps forward S=448",
                                               "fp4 nvfp4 S1=2048 reverse", "fp4 nvfp4 per-row forward")]
    base = make_base(0, n=128, d=16)
    q, k, values, svs, sink = _stack(base, "keys", 4, [4.0, 6.0, 12.0], [0.0, 1.0])
    rows = engine_rows(q, k, values, svs, sink, [4.0, 6.0, 12.0], pick, {"n": 128, "d": 16, "seed": 0})
    assert len(rows) == len(pick) * 3 * 2
    assert all(r["explained"] and r["max_abs_diff"] == 0 and r["diag_equal"] and r["mismatched_rows"] == 0
               for r in rows)
    # the single calls engine_rows compares with are pcast.attention's bits, value tensor by value tensor
    from pcast import attention, attention_calls, attention_values
    for c in pick[:2] + pick[-1:]:
        eng = attention_calls(q, k, values, [c["call"]], backend="emulator")[0]
        for j in range(2):
            one = attention(q[1:2], k[1:2], values[j][1:2], backend="emulator", **c["call"])
            assert _equal_row(one, attention_values(q[1:2], k[1:2], [v[1:2] for v in values], backend="emulator",
                                                    **c["call"])[j]) == (0.0, True, 0)
            assert torch.equal(eng[j].out[1:2], one.out) and torch.equal(eng[j].underflow[1:2], one.underflow)
    logit = [c for c in cases if c["label"] in ("policies vllm-unified p_only logit", "policies fa4 deployed logit")]
    q, k, values, svs, sink = _stack(base, "logit", 4, [4.0, 12.0], [0.0, 1.0])
    assert sink is not None and svs == [0.0]
    rows = engine_rows(q, k, values, svs, sink, [4.0, 12.0], logit, {"n": 128, "d": 16, "seed": 0})
    assert len(rows) == 2 * 2 and all(r["explained"] for r in rows)


def test_the_engine_comparison_catches_one_ulp_and_one_count():
    from pcast import attention

    q, k, v = (t[..., :64, :] for t in make_base(1, n=64, d=16))
    r = attention(q, k, v, order="forward", scale=256.0, ksink=4, block_m=16, block_n=16, backend="emulator")
    assert _equal_row(r, r) == (0.0, True, 0)
    out = r.out.clone()
    out[0, 0, 5, 3] = torch.nextafter(out[0, 0, 5, 3], torch.tensor(float("inf")))
    dmax, diag, bad = _equal_row(dataclasses.replace(r, out=out), r)
    assert dmax > 0 and diag and bad == 1
    under = r.underflow.clone()
    under[0, 0, 7] += 1
    dmax, diag, bad = _equal_row(dataclasses.replace(r, underflow=under), r)
    assert dmax == 0 and not diag and bad == 1


def test_the_engine_part_needs_the_other_experiments_and_checks_its_shapes():
    e = CONFIG["experiments"]
    with pytest.raises(pconfig.ConfigError, match="other experiments"):
        pconfig.shard_spec("conformance", e["conformance"], 0)
    spec = pconfig.shard_spec("conformance", e["conformance"], 0, experiments=e, policies=CONFIG.get("policies"))
    assert spec["engine"]["shape"] == {"n": 1024, "d": 64} and len(spec["engine"]["delta"]) >= 3
    nd = pconfig.inputs_spec("conformance", e["conformance"], 0)["nd"]
    assert [1024, 64] in nd and [spec["cover"]["shape"]["n"], spec["cover"]["shape"]["d"]] in nd
    bad = {**e["conformance"], "engine": {**e["conformance"]["engine"], "shape": {"n": 4, "d": 64}}}
    with pytest.raises(pconfig.ConfigError, match=r"conformance\.engine\.shape\.n"):
        pconfig.check_config({**CONFIG, "experiments": {**e, "conformance": bad}})
