"""The policies experiment's analysis: stats_policies on synthetic tidy tables with known answers,
F7 and T5 byte-deterministic, the audit's words following the data, config-key errors named, and a
partial rerun of fig_policies that touches only the policies chain."""

import hashlib
import math
import subprocess

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import brentq

import synthetic_tables as data
from pcast import theory
from pcast.theory import policy as policy_theory
from pcast.analysis import plots as P, registry, stats, tables as T, verdicts as C
from pcast.analysis.policies import policy_peaks, policy_summary, seed_mean_ci
from pcast.analysis.verdicts.audit import claim_audit
from repo_copy import copy_repo

DELTAS = tuple(np.arange(0.0, 16.01, 0.5))


def _theory_dc(f, lo=0.0, hi=16.0):
    """Where an increasing predicted fraction crosses 1/2 (scipy's brentq, independent of the module)."""
    return brentq(lambda x: float(np.asarray(f(x))) - 0.5, lo, hi, xtol=1e-10)


def _kw(order="forward"):
    return {"n": data.N, "block_n": data.BLOCK, "order": order}


@pytest.fixture(scope="module")
def cfgs():
    return data.config_sections()


@pytest.fixture(scope="module")
def dcs():
    """Each collapsing curve's Δc as the theory predicts it: keys (forward, S = 1 and 256), init logit."""
    keys = {s: _theory_dc(lambda x, s=s: theory.underflow_fraction(x, s, k=data.K, method="exact", **_kw()))
            for s in (1.0, 256.0)}
    init = _theory_dc(lambda x: policy_theory.underflow_fraction_init(x, 1.0, method="exact", **_kw()))
    return {("forward-s1", "keys"): keys[1.0], ("init-s1", "keys"): keys[1.0],
            ("forward-s256", "keys"): keys[256.0], ("init-s1", "logit"): init}


@pytest.fixture(scope="module")
def tidy(dcs):
    return data.make_policies(dcs=dcs)


@pytest.fixture(scope="module")
def summary(tidy, cfgs):
    return stats.policies(tidy, cfgs[0])


def _curve(s, policy, kind, variant="p_only", svs=0.0):
    c = s[(s["policy"] == policy) & (s["sink_kind"] == kind) & (s["variant"] == variant) & (s["sink_v_scale"] == svs)]
    return c.sort_values("delta")


# ----------------------------------------------------------------------------- statistics, known answers


def test_seed_mean_ci_is_the_student_t_interval():
    df = pd.DataFrame({"g": ["a"] * 4 + ["b"] * 4 + ["c"], "v": [1.0, 2.0, 3.0, 6.0, 5, 5, 5, 5, 7.0]})
    out = seed_mean_ci(df, ["g"], "v", 0.95).set_index("g")
    t3 = 3.182446305284263  # the 97.5% quantile of Student's t with 3 degrees of freedom (tables)
    sd = math.sqrt(((1 - 3) ** 2 + (2 - 3) ** 2 + 0 + (6 - 3) ** 2) / 3)
    assert out.loc["a", "v_mean"] == 3.0
    assert out.loc["a", "v_lo"] == pytest.approx(3 - t3 * sd / 2, rel=1e-12)
    assert out.loc["a", "v_hi"] == pytest.approx(3 + t3 * sd / 2, rel=1e-12)
    assert out.loc["b", "v_lo"] == out.loc["b", "v_hi"] == 5.0  # no spread: the interval is the point
    assert math.isnan(out.loc["c", "v_lo"])  # one seed: no interval


def test_summary_means_and_the_crossing_of_a_logistic(summary, dcs):
    """The seed mean is the logistic exactly (the seeds' offsets cancel); Δc is its linear
    interpolation between the two grid points that bracket the true crossing."""
    dc = dcs[("forward-s1", "keys")]
    c = _curve(summary, "forward-s1", "keys")
    truth = data.logistic(c["delta"], dc, 0.6)
    assert np.allclose(c["underflow_frac_mean"], truth, rtol=0, atol=1e-12)
    assert (c["underflow_frac_lo"] <= c["underflow_frac_mean"]).all() and (c["underflow_frac_hi"] >= truth).all()
    x0 = math.floor(dc / 0.5) * 0.5
    y0, y1 = data.logistic([x0, x0 + 0.5], dc, 0.6)
    expected = x0 + (0.5 - y0) * 0.5 / (y1 - y0)
    assert c["dc_meas"].iloc[0] == pytest.approx(expected, abs=1e-9)
    assert abs(expected - dc) < 0.02  # a logistic is nearly linear at its midpoint
    assert c["dc_lo"].iloc[0] <= expected <= c["dc_hi"].iloc[0]
    assert c["dc_meas"].nunique() == 1  # one Δc per curve, on each of its rows
    never = _curve(summary, "forward-s1", "logit")
    assert never["dc_meas"].isna().all() and never["dc_pred"].isna().all()


def test_a_csv_round_trip_gives_the_same_summary(tmp_path, cfgs):
    """Empty operand formats (p_only) come back from CSV as NaN; the curves must still be found."""
    small = data.make_policies(dcs={("forward-s1", "keys"): 6.0}, seeds=2, deltas=(0.0, 4.0, 8.0, 12.0))
    small.to_csv(tmp_path / "t.csv", index=False)
    back = pd.read_csv(tmp_path / "t.csv")
    assert back["qk_fmt"].isna().any()
    a, b = stats.policies(small, cfgs[0]), stats.policies(back, cfgs[0])
    num = [c for c in a.columns if a[c].dtype.kind == "f" and c not in ("qk_fmt", "v_fmt")]
    pd.testing.assert_frame_equal(a[num], b[num])
    assert a["dc_meas"].notna().any()


def test_floor_ratio_is_the_known_per_seed_ratio(summary, dcs):
    """Every seed has the same ratio rel_mse / floor_rel_mse, so the median is it and the CI collapses."""
    c = _curve(summary, "forward-s256", "keys", "deployed")
    f = data.logistic(c["delta"], dcs[("forward-s256", "keys")], 0.6)
    expected = 1 + data.PCAST_ERR * (1 + 999 * f) / data.V_FLOOR
    assert np.allclose(c["floor_ratio"], expected, rtol=1e-9)
    assert np.allclose(c["floor_ratio_lo"], c["floor_ratio_hi"]) and np.allclose(c["floor_ratio_lo"], expected)
    assert (c["n_seeds"] == 4).all()


def test_predictions_follow_each_policy_law(summary):
    keys = _curve(summary, "forward-s256", "keys")
    exact = theory.underflow_fraction(keys["delta"].to_numpy(), 256.0, k=data.K, method="exact", **_kw())
    assert np.allclose(keys["pred_underflow"], exact, rtol=1e-12) and set(keys["pred_model"]) == {"keys"}
    init = _curve(summary, "init-s1", "logit")
    law = policy_theory.underflow_fraction_init(tuple(init["delta"]), 1.0, method="exact", **_kw())
    assert np.allclose(init["pred_underflow"], law, rtol=1e-12) and set(init["pred_model"]) == {"init"}
    final = _curve(summary, "forward-s1", "logit")
    nosink = theory.underflow_fraction(0.0, 1.0, k=0, method="exact", **_kw())
    assert np.allclose(final["pred_underflow"], nosink) and set(final["pred_model"]) == {"no-sink"}
    lazy = _curve(summary, "lazy-s256", "keys")
    assert set(lazy["pred_model"]) == {"keys, eager bound"}
    assert (lazy["applied_scale"] == policy_theory.exp2_offset_scale(256.0)).all()
    # the predicted Δc is where the law crosses 1/2
    row = keys.iloc[0]
    at = theory.underflow_fraction(row["dc_pred"], 256.0, k=data.K, method="exact", **_kw())
    assert at == pytest.approx(0.5, abs=1e-5)


def test_saturation_prediction_is_the_lazy_law(summary):
    lazy = _curve(summary, "lazy-s256", "keys")
    law = policy_theory.saturation_fraction(8.0, 256.0, delta=lazy["delta"].to_numpy(), scale_mode="exp2_offset",
                                            sink_kind="keys", ksink=data.K, **_kw("reverse"))
    assert np.allclose(lazy["pred_saturated"], law, rtol=1e-12) and law.max() > 0
    eager = _curve(summary, "forward-s256", "keys")
    assert (eager["pred_saturated"] == 0).all()  # τ = 0 and S <= max_finite: nothing saturates


# ----------------------------------------------------------------------------- T5 and F7


def test_peaks_and_table(summary, cfgs):
    peaks = policy_peaks(summary, variant="p_only", floor_variant="deployed")
    assert len(peaks) == 4 * 3  # four policies x (keys v=0, keys v=1, logit)
    fs = peaks[(peaks["policy"] == "forward-s256") & (peaks["sink_kind"] == "keys")]
    assert (fs["best_ratio"] > 100).all()  # at Δ = 16 it has collapsed, the lazy policy has not
    lazy = peaks[peaks["policy"] == "lazy-s256"]
    assert np.allclose(lazy["saturated_max"], 0.01) and (lazy["saturated_delta"] == 4.0).all()
    table = T.policies(summary, cfgs[0], cfgs[1]["audit"])
    assert table.label == "tab:policies" and len(table.display) == len(peaks)
    row = table.display[(table.display["policy"] == "forward-s1") & (table.display["sink"] == "logit")].iloc[0]
    assert row["Δc measured [95% CI]"] == "never" and row["Δc predicted"] == "never"


def _digests(paths):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def test_figure_and_table_are_byte_deterministic(summary, cfgs, tmp_path):
    out = []
    for run in ("a", "b"):
        d = tmp_path / run
        fig, rows = P.fig_policies(summary)
        P.save_figure(fig, rows, d / "f.pdf", d / "f.png", d / "f.csv")
        T.write(T.policies(summary, cfgs[0], cfgs[1]["audit"]), csv=d / "t.csv", tex=d / "t.tex", md=d / "t.md")
        out.append(_digests(sorted(d.iterdir())))
    assert out[0] == out[1] and len(out[0]) == 6
    rows = pd.read_csv(tmp_path / "a" / "f.csv")
    assert list(rows.columns[:6]) == P.DATA_COLUMNS
    assert {"measured", "theory", "floor"} <= set(rows["kind"])
    assert rows["panel"].nunique() == 9  # three sink settings x three panels


# ----------------------------------------------------------------------------- the audit


def _line(result, policy, sink="sink keys, v=0"):
    lines = [d for d in result["details"] if d.startswith(f"{policy} ({sink})")]
    assert len(lines) == 1, result["details"]
    return lines[0]


def test_audit_words_follow_the_data(summary, cfgs, dcs):
    audit_cfg = cfgs[1]["audit"]
    r = claim_audit(summary, audit_cfg)
    assert r["verdict"] == "PASS", r["details"]
    assert "collapses at Δc" in _line(r, "forward-s1") and "→ predicted" in _line(r, "forward-s1")
    assert "does not collapse on this grid" in _line(r, "forward-s1", "learned sink logit")
    assert "saturates from Δ = 4" in _line(r, "lazy-s256") and "never saturates" in _line(r, "forward-s1")
    assert "exceeds the V-cast floor (deployed) from Δ =" in _line(r, "forward-s1")
    assert "stays within 2× the V-cast floor" in _line(r, "lazy-s256")
    # flip the data: a later collapse, no saturation, a P-cast error too small to matter
    moved = {k: v + 2.0 for k, v in dcs.items()}
    flipped = stats.policies(data.make_policies(dcs=moved, sat_level=0.0, peak=2.0, deltas=DELTAS), cfgs[0])
    f = claim_audit(flipped, audit_cfg)
    assert f["verdict"] == "FAIL" or f["verdict"] == "PARTIAL"
    assert "→ NOT predicted" in _line(f, "forward-s1") and "outside ±" in _line(f, "forward-s1")
    assert "never saturates on this grid" in _line(f, "lazy-s256")
    assert "stays within 2× the V-cast floor" in _line(f, "forward-s1")
    assert f["numbers"]["not_predicted"] == 7  # the collapsing curves: 3 policies x 2 key settings, init logit
    # the tolerance is the data's own: a wider confidence level widens it, still not to 2
    assert claim_audit(flipped, audit_cfg, confidence=0.999)["verdict"] == f["verdict"]


def test_audit_joins_the_verdict(summary, cfgs):
    coarse = (0.0, 8.0, 16.0)
    result = C.evaluate_tidy({"collapse": data.make_collapse(svs_values=(0.0,), seeds=3, deltas=coarse),
                              "scales": data.make_scales(seeds=3), "threshold": data.make_threshold(seeds=2, deltas=coarse),
                              "conformance": data.make_conformance(),
                              "policies": data.make_policies(dcs={}, seeds=2, deltas=coarse)}, *cfgs)
    assert list(result)[-2:] == ["audit", "conformance"]
    assert result["audit"]["evidence"] == ["fig_policies", "table_policies"]
    assert "## audit: " in C.render_markdown(result)


def test_config_key_errors_are_named(tidy, summary, cfgs):
    stats_cfg, claims_cfg = cfgs
    with pytest.raises(ValueError, match=r"statistics\.crossing_level"):
        stats.policies(tidy, {k: v for k, v in stats_cfg.items() if k != "crossing_level"})
    with pytest.raises(ValueError, match=r"claims\.audit\.floor_factor"):
        claim_audit(summary, {k: v for k, v in claims_cfg["audit"].items() if k != "floor_factor"})
    with pytest.raises(ValueError, match=r"claims\.audit\.variant"):
        T.policies(summary, stats_cfg, {"floor_variant": "deployed"})
    with pytest.raises(ValueError, match=r"floor_variant='fp8'"):
        policy_peaks(summary, variant="p_only", floor_variant="fp8")
    with pytest.raises(ValueError, match=r"variant='x'"):
        P.fig_policies(summary, variant="x")
    with pytest.raises(ValueError, match=r"saturated_frac"):
        policy_summary(tidy.drop(columns=["saturated_frac"]))
    with pytest.raises(ValueError, match=r"'sink_mode' = 'late'.*init, final"):
        policy_summary(tidy.assign(sink_mode="late"))


# ----------------------------------------------------------------------------- registry and workflow


def test_registry_names_the_policy_outputs():
    assert registry.category("fig_policies") == registry.category("table_policies") == "Deployed policies"
    assert registry.EXPERIMENT_CATEGORY["policies"] == "Deployed policies"
    assert registry.claim("audit").outputs == ("fig_policies", "table_policies")


def test_fig_policies_reruns_only_the_policies_chain(tmp_path):
    """From nothing, `snakemake fig_policies` schedules only jobs of the policies experiment."""
    repo = copy_repo(tmp_path / "repo")
    proc = subprocess.run(["snakemake", "-n", "fig_policies", "--cores", "1", "--config", "preset=smoke"],
                          cwd=repo, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    table = [line for line in out.split("Job stats:")[1].strip().split("\n\n")[0].splitlines()]
    jobs = {line.split()[0] for line in table[2:]}  # after the header and the dashes
    assert jobs == {"inputs", "sweep_shard", "tidy_table", "stats_policies", "fig_policies", "total"}, out[-3000:]
    experiments = {w.split("experiment=")[1].split(",")[0] for w in out.splitlines() if "experiment=" in w}
    assert experiments == {"policies"}


def test_a_new_preset_reaches_the_figure_and_the_table(summary, cfgs, monkeypatch):
    """A preset registered in pcast.policies.POLICIES alone (no style, no list edited) is drawn and tabled."""
    from pcast.policies import POLICIES, Policy

    monkeypatch.setitem(POLICIES, "dummy-s256", Policy("dummy-s256", scale=256.0, source="this repository: a test",
                                                       read="2026-11"))
    renamed = summary.replace({"policy": {"forward-s256": "dummy-s256"}})
    fig, rows = P.fig_policies(renamed)
    assert rows["series"].astype(str).str.contains("dummy-s256").any()
    from pcast.analysis.plots.policies import USER_STYLES, policy_style

    assert policy_style("dummy-s256", []) in USER_STYLES
    table = T.policies(renamed, cfgs[0], cfgs[1]["audit"])
    assert "dummy-s256" in set(table.display["policy"])


def test_a_dynamic_policy_is_predicted_as_reverse_order_at_the_format_max():
    """A dynamic P scale's row (tile_max, per_row; any order) is predicted as the reverse-order static law at
    S = 448 (e4m3fn), pcast.theory.dynamic; its saturated fraction has no law."""
    from pcast.analysis.policy_predictions import predict_saturation, predict_underflow
    deltas = [0.0, 8.0, 12.0, 16.0]
    base = {"sink_kind": "keys", "sink_mode": "final", "fmt": "e4m3fn", "ksink": 4, "n": 1024, "block_n": 64,
            "sigma": 1.0, "scale": 1.0, "rescale_threshold": 0.0, "causal": False}
    want = theory.underflow_fraction(np.asarray(deltas), 448.0, k=4, order="reverse", n=1024, block_n=64,
                                     method="exact")
    for mode in ("tile_max", "per_row"):
        for order in ("forward", "reverse"):
            row = {**base, "scale_mode": mode, "order": order}
            np.testing.assert_allclose(predict_underflow(row, deltas), want, rtol=1e-12)
            assert np.isnan(predict_saturation(row, deltas)).all()
    static = {**base, "scale_mode": "multiply", "order": "forward"}  # a static S = 1 row is not moved
    assert predict_underflow(static, [16.0])[0] > 0.5 > want[-1]
