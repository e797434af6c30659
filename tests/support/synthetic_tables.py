"""Constructed tidy tables with known answers, for the verdict, table and figure tests.

Each ``make_*`` builds the tidy table of one experiment (columns
:data:`pcast.contract.TIDY_COLUMNS`; the conformance table its own columns) from the theory, so
that the data agrees with every claim; each keyword moves the data away from one claim.
:func:`config_sections` gives the ``statistics:`` and ``claims:`` sections of config.yaml with a
cheap bootstrap.
"""

import copy
import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from pcast import theory
from pcast.contract import POLICY_TIDY_COLUMNS, TIDY_COLUMNS, combo_label

ROOT = Path(__file__).resolve().parents[2]
N, BLOCK, K = 256, 64, 4
SCALES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 448, 512)


def config_sections():
    """The statistics and claims sections of config.yaml, with a cheap bootstrap for the tests."""
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    stats_cfg = dict(cfg["statistics"], bootstrap_resamples=200)
    return stats_cfg, copy.deepcopy(cfg["claims"])


def _row(experiment, seed, delta, svs, order, scale, mse, frac, *, n=N, k=K, saturated=0):
    terms = (n - k) * n
    uf = int(round(frac * terms))
    return {"experiment": experiment, "seed": seed, "n": n, "d": 64, "block_m": BLOCK, "block_n": BLOCK,
            "causal": False, "ksink": k, "delta": float(delta), "sigma": 1.0, "sink_v_scale": float(svs),
            "order": order, "scale": float(scale), "fmt": "e4m3fn", "rowsum": "unrounded",
            "combo": combo_label(order, scale), "backend": "emulator", "mse": mse, "rel_mse": mse,
            "max_abs_err": math.sqrt(mse), "underflow": uf, "terms": terms, "underflow_frac": uf / terms,
            "underflow_sink": 0, "terms_sink": k * n, "underflow_sink_frac": 0.0, "saturated": saturated}


def _frame(rows):
    return pd.DataFrame(rows)[list(TIDY_COLUMNS)]


def _bump(delta, peak):
    """1 far from Δ = 7, ``peak`` at Δ = 7: the baseline's MSE over the floor."""
    return 1 + (peak - 1) * math.exp(-0.5 * ((delta - 7) / 1.5) ** 2)


def make_collapse(*, ratio_peak=6.0, floor_gap=1.0, floor_gap_from=-math.inf, cell_peaks=None, uf_shift=0.0,
                  reverse_leak=0, reverse_zero=False, seeds=8, deltas=tuple(np.arange(0.0, 16.01, 1.0)),
                  svs_values=(0.0, 1.0), seed_spread=0.3):
    """Collapse tidy table built from the theory: underflow = exact prediction (+ ``uf_shift`` for
    forward S=1); MSE(forward S=1) = floor x a bump peaking at ``ratio_peak`` near Δ = 7; the fixes sit
    on the floor, forward S=256 at ``floor_gap`` x the floor from Δ = ``floor_gap_from`` on;
    ``cell_peaks[(sink_v_scale, fix label)]`` sets that fix's own peak ratio MSE(forward S=1) / MSE(fix);
    ``reverse_zero`` zeroes reverse S=256's underflow (the paper's guarantee; ``"all"``: reverse S=1's too, the
    guarantee read over every non-sink key); ``reverse_leak`` underflow
    events are added to reverse S=256 at Δ = 0; ``seed_spread``: the log-normal spread of the seeds' MSE."""
    rng = np.random.default_rng(0)
    base = rng.lognormal(-12, seed_spread, seeds)
    rows = []
    for order in ("forward", "reverse"):
        for scale in (1, 256):
            pred = theory.underflow_fraction(np.array(deltas), scale, k=K, order=order, n=N, block_n=BLOCK,
                                             method="exact")
            for svs in svs_values:
                for di, delta in enumerate(deltas):
                    factor = _factor(order, scale, svs, delta, ratio_peak, floor_gap, floor_gap_from, cell_peaks)
                    frac = float(pred[di])
                    if (order, scale) == ("forward", 1):
                        frac = min(1.0, frac + uf_shift)
                    if order == "reverse" and (reverse_zero == "all" or (scale == 256 and reverse_zero)):
                        frac = 0.0
                    for seed in range(seeds):
                        noise = math.exp(rng.normal(0, 0.01))
                        r = _row("collapse", seed, delta, svs, order, scale, base[seed] * factor * noise, frac)
                        if (order, scale) == ("reverse", 256) and delta == deltas[0] and reverse_leak:
                            r["underflow"] += reverse_leak
                            r["underflow_frac"] = r["underflow"] / r["terms"]
                        rows.append(r)
    return _frame(rows)


def _factor(order, scale, svs, delta, ratio_peak, floor_gap, floor_gap_from, cell_peaks):
    """One combination's MSE over the floor at (sink_v_scale, Δ) (see :func:`make_collapse`)."""
    if (order, scale) == ("forward", 1):
        return _bump(delta, ratio_peak)
    f = floor_gap if (order, scale) == ("forward", 256) and delta >= floor_gap_from else 1.0
    peak = (cell_peaks or {}).get((float(svs), combo_label(order, scale)))
    return f * (_bump(delta, ratio_peak) / _bump(delta, peak) if peak is not None else 1.0)


def make_scales(*, penalty_256=1.0, seeds=6):
    """Scales tidy table: MSE falls with S up to 256 (flat among large powers of two), 512 saturates;
    ``penalty_256`` multiplies the MSE at S = 256."""
    rng = np.random.default_rng(1)
    base = rng.lognormal(-12, 0.3, seeds)
    rows = []
    for order in ("forward", "reverse"):
        for scale in SCALES:
            for delta in (4.0, 8.0):
                g = 1 + 8 / scale if scale <= 448 else 50.0
                if scale == 256:
                    g *= penalty_256
                frac = float(theory.underflow_fraction(delta, scale, k=K, order=order, n=N, block_n=BLOCK))
                for seed in range(seeds):
                    rows.append(_row("scales", seed, delta, 0.0, order, scale,
                                     base[seed] * g * math.exp(rng.normal(0, 0.01)), frac,
                                     saturated=1000 if scale > 448 else 0))
    return _frame(rows)


def make_threshold(*, shift=0.0, seeds=4, deltas=tuple(np.arange(0.0, 16.01, 0.25))):
    """Threshold tidy table: the leading-order law, shifted by ``shift`` in Δ, per (ksink, S)."""
    rng = np.random.default_rng(2)
    rows = []
    for k in (1, 4):
        for scale in (1, 256):
            d = np.array(deltas)
            frac = theory.underflow_fraction(d - shift, scale, k=k, order="forward", n=N, block_n=BLOCK)
            for seed in range(seeds):
                jitter = np.clip(frac + rng.normal(0, 0.002, d.size), 0, 1)
                for delta, f in zip(d, jitter):
                    rows.append(_row("threshold", seed, delta, 1.0, "forward", scale, 1e-6, float(f), k=k))
    return _frame(rows)


_CONF_OPTIONS = {"scale_mode": "multiply", "rescale_threshold": 0.0, "sink_kind": "keys", "ksink": 4,
                 "sink_mode": "final", "fmt": "e4m3fn", "rowsum": "unrounded", "qk_fmt": "none", "v_fmt": "none",
                 "block_m": 64, "block_n": 64}


def make_conformance(*, unexplained=0, engine_diff=None):
    """Conformance table: the kernel grid (every combination, causal or not, two seeds, n = 64) and engine
    rows (three sweep calls and one learned-sink policy call at n = 1024, Δ 4, 8, 12, sink value norms 0
    and 1, all identical). The first ``unexplained`` kernel rows have differing diagnostics that are not
    explained; ``engine_diff`` makes one engine row differ while it still says explained: ``"ulp"`` by one
    float32 ulp of its output (2**-24 at 0.5), ``"count"`` by one diagnostic count."""
    rows = []
    for order in ("forward", "reverse"):
        for scale in (1, 256):
            for causal in (False, True):
                for seed in range(2):
                    rows.append({**_CONF_OPTIONS, "check": "kernel", "case": f"{order} S={scale}", "order": order,
                                 "scale": scale, "causal": causal, "n": 64, "d": 16, "delta": 8.0,
                                 "sink_v_scale": 1.0, "seed": seed, "block_m": 16, "block_n": 16,
                                 "kernel_backend": "triton-interpreted", "max_abs_diff": 1e-7 * (seed + 1),
                                 "max_rel_diff": 1e-7, "diag_equal": True, "mismatched_rows": 0, "explained": True,
                                 "fragile_elements": 0})
    for r in rows[:unexplained]:
        r.update(diag_equal=False, explained=False, mismatched_rows=1)
    calls = [("sweeps forward S=1", "forward", 1.0, "keys"), ("sweeps reverse S=256", "reverse", 256.0, "keys"),
             ("sweeps forward S=448", "forward", 448.0, "keys"), ("policies vllm p_only logit", "forward", 1.0, "logit")]
    engine = []
    for case, order, scale, kind in calls:
        for delta in (4.0, 8.0, 12.0):
            for svs in ((0.0, 1.0) if kind == "keys" else (0.0,)):
                engine.append({**_CONF_OPTIONS, "check": "engine", "case": case, "order": order, "scale": scale,
                               "causal": False, "n": 1024, "d": 64, "delta": delta, "sink_v_scale": svs, "seed": 0,
                               "sink_kind": kind, "ksink": 4 if kind == "keys" else 0,
                               "sink_mode": "init" if kind == "logit" else "final", "kernel_backend": "emulator",
                               "max_abs_diff": 0.0, "max_rel_diff": 0.0, "diag_equal": True, "mismatched_rows": 0,
                               "explained": True, "fragile_elements": 0})
    if engine_diff == "ulp":
        engine[5].update(max_abs_diff=2.0 ** -24, max_rel_diff=2.0 ** -24, mismatched_rows=1)
    elif engine_diff == "count":
        engine[5].update(diag_equal=False, mismatched_rows=1)
    return pd.DataFrame(rows + engine)


# ----------------------------------------------------------------------------- the policies experiment

# Policies of the synthetic policies table, by their fields (independent of pcast.policies): two of
# the paper's, a lazy-rescaling exp2_offset policy that saturates, and one that seeds the max with a
# learned sink logit.
POLICY_FIELDS = {
    "forward-s1": {"order": "forward", "scale": 1.0, "scale_mode": "multiply", "rescale_threshold": 0.0,
                   "sink_mode": "final"},
    "forward-s256": {"order": "forward", "scale": 256.0, "scale_mode": "multiply", "rescale_threshold": 0.0,
                     "sink_mode": "final"},
    "lazy-s256": {"order": "reverse", "scale": 256.0, "scale_mode": "exp2_offset", "rescale_threshold": 8.0,
                  "sink_mode": "final"},
    "init-s1": {"order": "forward", "scale": 1.0, "scale_mode": "multiply", "rescale_threshold": 0.0,
                "sink_mode": "init"},
}
PCAST_ERR, V_FLOOR, EXACT_FLOOR = 1e-5, 1e-3, 1e-12  # rel. MSE of the P cast alone, of FP8 V, of fp32


def logistic(delta, dc, width):
    """A rising underflow curve that crosses 1/2 at ``dc``."""
    return 1.0 / (1.0 + np.exp(-(np.asarray(delta, dtype=float) - dc) / width))


def _policy_row(seed, kind, delta, svs, variant, name, fields, *, frac, sat, rel, floor, n=N):
    k = K if kind == "keys" else 0
    terms, terms_sink = (n - k) * n, k * n
    return {"experiment": "policies", "seed": seed, "n": n, "d": 64, "sink_kind": kind, "ksink": k,
            "delta": float(delta), "sigma": 1.0, "sink_v_scale": float(svs), "variant": variant, "policy": name,
            **fields, "fmt": "e4m3fn", "rowsum": "unrounded", "qk_fmt": "e4m3fn" if variant == "deployed" else "",
            "v_fmt": "e4m3fn" if variant == "deployed" else "", "block_m": BLOCK, "block_n": BLOCK,
            "causal": False, "backend": "emulator", "mse": rel, "rel_mse": rel, "max_abs_err": math.sqrt(rel),
            "floor_mse": floor, "floor_rel_mse": floor, "underflow": int(round(frac * terms)), "terms": terms,
            "underflow_frac": frac, "underflow_sink": 0, "terms_sink": terms_sink, "underflow_sink_frac": 0.0,
            "saturated": int(round(sat * (terms + terms_sink))), "saturated_frac": sat}


def make_policies(*, dcs, width=0.6, peak=1000.0, sat_level=0.01, sat_from=4.0, seeds=4, eps=0.02,
                  deltas=tuple(np.arange(0.0, 16.01, 0.5)), policies=tuple(POLICY_FIELDS)):
    """Policies tidy table (columns pcast.contract.POLICY_TIDY_COLUMNS) with known answers.

    ``dcs[(policy, sink_kind)]``: the Δ where that curve's underflow fraction crosses 1/2 (a logistic
    of ``width``); a missing key: no collapse (fraction 1e-4). Per seed s the fraction is moved by
    ``±eps·f(1 - f)`` (sign alternating with s), so with an even number of seeds the seed mean is
    exactly the logistic. The P-cast error is PCAST_ERR·(1 + (peak − 1)·f) on top of the floor
    (V_FLOOR deployed, EXACT_FLOOR p_only); one factor per seed multiplies both, so the per-seed
    ratio rel_mse / floor_rel_mse is the same for every seed. Policies with τ > 0 saturate a fraction
    ``sat_level`` of their keys from Δ = ``sat_from`` on; the others never.
    """
    rng = np.random.default_rng(3)
    seed_factor = rng.lognormal(0.0, 0.3, seeds)
    rows = []
    for kind, svs_values in (("keys", (0.0, 1.0)), ("logit", (0.0,))):
        for name in policies:
            fields = POLICY_FIELDS[name]
            dc = dcs.get((name, kind))
            f = logistic(deltas, dc, width) if dc is not None else np.full(len(deltas), 1e-4)
            sat = np.where(np.asarray(deltas) >= sat_from, sat_level, 0.0) if fields["rescale_threshold"] > 0 \
                else np.zeros(len(deltas))
            for svs in svs_values:
                for variant, floor in (("p_only", EXACT_FLOOR), ("deployed", V_FLOOR)):
                    for i, delta in enumerate(deltas):
                        pcast = PCAST_ERR * (1 + (peak - 1) * f[i])
                        for seed in range(seeds):
                            frac = f[i] + (-1) ** seed * eps * f[i] * (1 - f[i])
                            c = seed_factor[seed]
                            rows.append(_policy_row(seed, kind, delta, svs, variant, name, fields, frac=frac,
                                                    sat=float(sat[i]), rel=c * (floor + pcast), floor=c * floor))
    return pd.DataFrame(rows)[list(POLICY_TIDY_COLUMNS)]


def make_realmodel_heads(*, layers=2, heads=3, passages=2, n=256):
    """A realmodel heads table (results/realmodel/heads/layer*.csv, concatenated): head (L, 0) a clean sink
    whose forward S=1 MSE is 20x its reverse S=256 one, the others without a sink at 2x; the measured fractions
    sit 0.01 above the theory, the key-shuffled control 0.05 above."""
    from pcast.contract import COMBOS, combo_label
    from pcast.models.heads import predict_underflow

    rows = []
    for layer in range(layers):
        for head in range(heads):
            clean = head == 0
            for order, scale in COMBOS:
                run = combo_label(order, scale)
                pred = predict_underflow({"delta": 5.0 + layer, "sigma": 1.0}, int(clean), order=order, scale=scale,
                                         n=n, block_n=64)
                for p in range(passages):
                    mse = {combo_label("forward", 1): 20.0 if clean else 2.0}.get(run, 1.0) * 1e-6 * (1 + p)
                    row = {"layer": layer, "head": head, "passage": p, "run": run, "kind": "combo", "order": order,
                           "scale": scale, "fmt": "e4m3fn", "block_n": 64, "backend": "emulator", "mse": mse,
                           "rel_mse": mse * 10, "underflow": 0, "terms": 0, "underflow_frac": pred + 0.01,
                           "mass_underflow": 0.02 if clean else 0.001, "underflow_sink": 0, "saturated": 0,
                           "sinks": "0" if clean else np.nan, "n_sinks": int(clean),
                           "sink_type": "clean" if clean else "none", "delta": 5.0 + layer, "sigma": 1.0,
                           "cls_mass": 0.3 if clean else 0.05, "n": n}
                    rows += [row, {**row, "run": "shuffled " + run, "kind": "shuffled",
                                   "underflow_frac": pred + 0.05}]
    return pd.DataFrame(rows)


def make_realmodel_outputs(*, passages=3, runs=("forward S=1", "forward S=256", "reverse S=1", "reverse S=256",
                                                 "fa3", "fa4-s256")):
    """A realmodel outputs table (results/realmodel/outputs.csv): 1 - cosine 1e-4 for forward S=1, 1e-6 else."""
    rows = []
    for run in runs:
        for p in range(passages):
            gap = (1e-4 if run == "forward S=1" else 0.05 if run == "fa4-s256" else 1e-6) * (1 + 0.1 * p)
            rows.append({"run": run, "kind": "combo" if " S=" in run else "policy", "passage": p,
                         "source": f"module{p}", "cosine": 1 - gap, "one_minus_cos": gap})
    return pd.DataFrame(rows)


def make_fp4(*, dcs=None, seeds=4, deltas=tuple(np.arange(0.0, 16.01, 1.0)), fr=2.0, base=3.0, n=512, block_n=64):
    """A tidy fp4 table (pcast.contract.FP4_TIDY_COLUMNS) whose answers are known: each static NVFP4 S1
    of ``dcs`` (S1 -> Δc) has a forward flushed-group fraction rising linearly from 0 to 1 over Δc ± 1
    (so the seed-mean crossing of 1/2 is exactly Δc; seeds differ by ±0.1 symmetrically), reverse none;
    every cast's forward MSE is ``fr`` x its reverse MSE and ``base`` x the FP8 baseline's (same order)."""
    from pcast.contract import FP4_TIDY_COLUMNS
    from pcast.pipeline.fp4_config import cast_label

    dcs = {1.0: 6.0, 256.0: 11.5} if dcs is None else dcs
    casts = [("nvfp4", s, "multiply") for s in dcs] + [("nvfp4", 1.0, "per_row"), ("mxfp4", 1.0, "multiply"),
                                                       ("e4m3fn", 256.0, "multiply")]
    rows = []
    for seed, (fmt, s, mode), order, dl in itertools.product(range(seeds), casts, ("forward", "reverse"), deltas):
        jitter = 0.1 * (seed - (seeds - 1) / 2) / max(1, (seeds - 1) / 2)
        flush = float(np.clip((dl - dcs[s] - jitter) / 2 + 0.5, 0, 1)) if (fmt, mode) == ("nvfp4", "multiply") \
            and order == "forward" else 0.0
        groups = n * n // 16 if fmt == "nvfp4" else (n * n // 32 if fmt == "mxfp4" else 0)
        gf = int(round(flush * groups))
        terms = n * (n - 4)
        us = int(round(flush * terms))
        mse = 1e-4 * (1 + 0.01 * seed) * (fr if order == "forward" else 1.0) * (1.0 if fmt == "e4m3fn" else base)
        rows.append({"experiment": "fp4", "seed": seed, "n": n, "d": 64, "block_m": 64, "block_n": block_n,
                     "causal": False, "ksink": 4, "sigma": 1.0, "sink_v_scale": 1.0, "fmt": fmt, "scale_mode": mode,
                     "scale": s, "order": order, "delta": float(dl), "cast": cast_label(fmt, s, mode),
                     "backend": "emulator", "mse": mse, "rel_mse": mse * 10, "max_abs_err": 0.01, "underflow": us + 10,
                     "underflow_scale": us, "underflow_elem": 10, "terms": terms, "underflow_frac": (us + 10) / terms,
                     "underflow_scale_frac": us / terms, "underflow_elem_frac": 10 / terms, "underflow_sink": 0,
                     "terms_sink": 4 * n, "groups_flushed": gf, "groups": groups,
                     "groups_flushed_frac": gf / groups if groups else 0.0, "saturated": 0, "saturated_frac": 0.0})
    return pd.DataFrame(rows, columns=list(FP4_TIDY_COLUMNS))


def make_dynamic(*, ratio=1.1, seeds=4, deltas=tuple(np.arange(0.0, 16.01, 2.0)), n=512, block_n=64):
    """A tidy dynamic table (pcast.contract.DYNAMIC_TIDY_COLUMNS) whose answers are known: every dynamic cast's MSE
    is ``ratio`` x reverse S=256's, S=1's 3x, at every Δ and seed; the underflow fraction is the theory's."""
    from pcast import theory
    from pcast.contract import DYNAMIC_TIDY_COLUMNS
    from pcast.theory.dynamic import underflow_fraction_dynamic

    casts = [("S=1", "multiply", 1.0, 3.0), ("S=256", "multiply", 256.0, 1.0), ("tile_max", "tile_max", 1.0, ratio),
             ("row_block_max", "per_row", 1.0, ratio)]
    rows = []
    for seed, (cast, mode, s, f), order, dl in itertools.product(range(seeds), casts, ("forward", "reverse"), deltas):
        kw = {"k": 4, "n": n, "block_n": block_n, "method": "exact"}
        uf = float(theory.underflow_fraction(dl, s, order=order, **kw)) if mode == "multiply" else \
            float(underflow_fraction_dynamic(dl, mode, order, **kw))
        terms = n * (n - 4)
        mse = 1e-6 * (1 + 0.01 * seed) * (1 + dl) * f
        rows.append({"experiment": "dynamic", "seed": seed, "n": n, "d": 64, "block_m": 64, "block_n": block_n,
                     "causal": False, "ksink": 4, "sigma": 1.0, "sink_v_scale": 1.0, "fmt": "e4m3fn",
                     "scale_mode": mode, "scale": s, "order": order, "delta": float(dl), "cast": cast,
                     "backend": "emulator", "mse": mse, "rel_mse": mse * 10, "max_abs_err": 0.01,
                     "underflow": int(round(uf * terms)), "underflow_scale": 0, "underflow_elem": 0, "terms": terms,
                     "underflow_frac": round(uf * terms) / terms, "underflow_scale_frac": 0.0,
                     "underflow_elem_frac": 0.0, "underflow_sink": 0, "terms_sink": 4 * n, "groups_flushed": 0,
                     "groups": 0, "groups_flushed_frac": 0.0, "saturated": 0, "saturated_frac": 0.0})
    return pd.DataFrame(rows, columns=list(DYNAMIC_TIDY_COLUMNS))


def make_decode(*, shift=0.0, rms_off=0.0, seeds=2, heads=2, deltas=tuple(np.arange(0.0, 16.01, 1.0)), n=1024):
    """A tidy decode table (pcast.contract.DECODE_TIDY_COLUMNS) built from pcast.theory.decode: each row's
    underflow fraction is the theory's at ``Δ - shift`` (rows differ by ±0.005 symmetrically), so the measured
    Δc is the theory's plus ``shift``; the P-cast error rows' relative RMS error is the closed form's times
    ``1 + rms_off``. Two configurations per sink kind (one split forward online, four contiguous splits)."""
    from pcast.analysis.decode import predicted_fraction
    from pcast.contract import DECODE_TIDY_COLUMNS
    from pcast.theory.decode import partition_rms_error

    fixed = {"experiment": "decode", "policy": "-", "n": n, "d": 16, "block_n": 64, "sigma": 1.0, "fmt": "e4m3fn",
             "split_layout": "contiguous", "p_normalize": "online", "backend": "emulator", "mse": 1e-4,
             "rel_mse": 1e-3, "underflow_sink": 0, "saturated": 0, "p_rows": 0, "p_err2": math.nan,
             "p_x2": math.nan, "p_rel_rms": math.nan}
    rows = []
    for kind, ns, order in itertools.product(("keys", "logit"), (1, 4), ("forward",)):
        cfg = {**fixed, "kind": kind, "num_splits": ns, "order": order, "scale": 1.0, "ksink": 4 if kind == "keys" else 0,
               "sink_mode": "-" if kind == "keys" else "init"}
        curve = predicted_fraction(cfg, np.asarray(deltas) - shift)
        for seed, h in itertools.product(range(seeds), range(heads)):
            jitter = 0.005 * (1 if (seed + h) % 2 else -1)
            for dl, f in zip(deltas, curve):
                frac = float(np.clip(f + jitter, 0, 1))
                terms = n - cfg["ksink"]
                rows.append({**cfg, "seed": seed, "head": h, "delta": float(dl), "underflow": int(round(frac * terms)),
                             "terms": terms, "underflow_frac": frac, "terms_sink": cfg["ksink"]})
    for seed, (m, s) in itertools.product(range(seeds), ((256, 1.0), (256, 256.0))):
        rel = partition_rms_error(m, s) * (1 + rms_off) * (1 + 0.01 * (seed - (seeds - 1) / 2))
        rows.append({**fixed, "kind": "partition", "seed": seed, "head": 0, "n": m, "d": 256, "block_n": 256,
                     "ksink": 0, "num_splits": 1, "order": "forward", "p_normalize": "partition", "scale": s,
                     "sink_mode": "-", "delta": 0.0, "underflow": 0, "terms": 16 * m, "underflow_frac": 0.0,
                     "terms_sink": 0, "p_rows": 16, "p_err2": rel ** 2, "p_x2": 1.0, "p_rel_rms": rel})
    return pd.DataFrame(rows, columns=list(DECODE_TIDY_COLUMNS))
