"""The ``statistics:`` and ``claims:`` sections checked against the experiments (torch-free).

``workflow/schemas/claims.schema.yaml`` holds the ranges (levels in (0, 1), tolerances > 0, ...);
:func:`check_analysis` checks what it cannot say, on the merged config, before any job:

* every number finite (a schema's bounds let NaN through);
* each ``[lo, hi]`` band ordered, lo < hi (``claims.C5.band``, each of ``claims.C5.moderate``,
  ``claims.paper.band``, ``claims.realmodel.band``), and ``claims.C5.far_above >= claims.C5.band[1]``;
* every combination, scale and variant named is one that the experiment its reader reads runs
  under the merged config (a user may shrink an experiment's ``order`` or ``scale`` grid):

  ==================================================  ============================================
  key                                                 read against (reader)
  ==================================================  ============================================
  ``statistics.baseline``                             ``scales`` (``stats.scales``) and
                                                      ``collapse`` (F3, F4 via ``paired.csv``)
  ``statistics.reference``, ``.fixes``, ``.pairs``    ``collapse`` (``stats.paired``, F4)
  ``claims.C1.combos``, ``claims.C2.*_combo``         ``collapse`` (``stats.collapse``)
  ``claims.C5.baseline``, ``.fixes``, ``claims.C6``   ``collapse`` (``paired.csv``; ``claims.C6.trivial_pair``
                                                      too)
  ``claims.C3.scale``, ``.compare_scale``             ``experiments.scales.scale`` (``stats.scales``)
  ``claims.audit.variant``, ``.floor_variant``        ``experiments.policies.variants``
  ``claims.realmodel.combos``                         ``pcast.contract.COMBO_LABELS`` (what
                                                      ``realmodel`` always runs)
  ``claims.fp4.delta``                                ``experiments.fp4.delta`` (T7's and the FP4
                                                      section's MSE ratios)
  ==================================================  ============================================

  ``paired.csv`` holds a ratio only for the pairs ``statistics.pairs`` lists (in that order), so
  those are distinct with a != b, ``claims.C6.pairs`` are among them, and so are [baseline, fix]
  of ``statistics.fixes`` and ``claims.C5.fixes``; the MSE knee needs a pair [forward ...,
  ``statistics.reference``]. T1 shows the ``statistics.table_deltas`` on the collapse Δ grid
  (others are skipped), so at least one must lie on it.

Messages name the full key (``claims.C6.pairs[1][0]``) and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
import re
from typing import Any

from pcast.contract import (CLAIM_IDS, COMBO_LABELS, FP4_EXPERIMENT, POLICY_EXPERIMENT, REALMODEL, TEMPLATE_SLOT,
                            combo_label)
from pcast.pipeline.grid import delta_values, listed

__all__ = ["check_analysis"]


class _Error(ValueError):
    """Raised here; :mod:`pcast.pipeline.config` re-raises it as its ``ConfigError``."""


def check_analysis(config: Mapping) -> None:
    """The statistics and claims sections against the experiments; raises ValueError naming the key.

    Runs after both schemas and after the experiments' own checks (it reads their grids).
    """
    stats, claims, exps = config["statistics"], config["claims"], config["experiments"]
    _check_finite("statistics", stats)
    _check_finite("claims", claims)
    _check_statistics(stats, exps)
    _check_claims(claims, stats, exps)
    preset = (config.get("presets") or {}).get(config.get("preset"), {}) if isinstance(config.get("presets"), Mapping) \
        else {}
    _check_templates(preset.get("expected_verdicts") or {}, config.get("preset"))


def _check_templates(expected: Mapping, preset) -> None:
    """Every slot of an expected-verdict ``why`` names a claim of the registry (the run fills its number)."""
    ids = set(CLAIM_IDS)
    for key, e in expected.items():
        for m in re.finditer(TEMPLATE_SLOT, str((e or {}).get("why", ""))):
            claim, field = m["claim"], m["key"]
            if claim not in ids:
                raise _Error(f"config key 'presets.{preset}.expected_verdicts.{key}.why': slot {{{claim}.{field}}} "
                             f"names no claim; allowed: {{ID.key}} with ID one of {', '.join(sorted(ids))}")


# ----------------------------------------------------------------------------- what runs


def _combos(exp: Mapping) -> list[str]:
    """The combination labels an experiment runs: its order x scale, in config order."""
    return [combo_label(o, float(s)) for o in listed(exp["order"]) for s in listed(exp["scale"])]


def _delta_grid(exp: Mapping) -> list[float]:
    return delta_values(exp["delta"])


def _on_grid(x: float, grid: Sequence[float]) -> bool:
    """As T1's display selects Δ rows (numpy.isclose's default tolerances)."""
    return any(abs(x - g) <= 1e-8 + 1e-5 * abs(g) for g in grid)


def _fmt_pair(pair) -> str:
    return "[" + ", ".join(map(str, pair)) + "]"


# ----------------------------------------------------------------------------- checks


def _check_finite(key: str, value: Any) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _check_finite(f"{key}.{k}", v)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_finite(f"{key}[{i}]", v)
    elif isinstance(value, float) and not math.isfinite(value):
        raise _Error(f"config key '{key}': {value!r} is not allowed; allowed: a finite number")


def _run_by(key: str, label: str, exps: Mapping, name: str) -> None:
    """``label`` must be a combination that ``experiments.<name>`` runs."""
    allowed = _combos(exps[name])
    if label not in allowed:
        raise _Error(f"config key '{key}': {label!r} is not a combination that experiments.{name} runs "
                     f"(its order x scale); allowed: {', '.join(allowed)}")


def _in_pairs(key: str, pair: Sequence[str], pairs: list[tuple[str, str]], what: str) -> None:
    """``pair`` (a, b) must be one of ``statistics.pairs``: paired.csv holds no other ratio."""
    if tuple(pair) not in pairs:
        raise _Error(f"config key '{key}': {what} {_fmt_pair(pair)} is not one of statistics.pairs (the only "
                     f"ratios stats_paired computes, a/b in that order); allowed: "
                     f"{', '.join(_fmt_pair(p) for p in pairs)}")


def _check_band(key: str, band: Sequence[float]) -> None:
    lo, hi = band
    if not lo < hi:
        raise _Error(f"config key '{key}': [{lo:g}, {hi:g}] is out of order; allowed: [low, high] with "
                     "0 < low < high")


def _check_statistics(stats: Mapping, exps: Mapping) -> None:
    base, ref = stats["baseline"], stats["reference"]
    _run_by("statistics.baseline", base, exps, "scales")
    _run_by("statistics.baseline", base, exps, "collapse")
    _run_by("statistics.reference", ref, exps, "collapse")
    for i, fix in enumerate(stats["fixes"]):
        _run_by(f"statistics.fixes[{i}]", fix, exps, "collapse")
    pairs = [tuple(p) for p in stats["pairs"]]
    for i, (a, b) in enumerate(pairs):
        for j, label in enumerate((a, b)):
            _run_by(f"statistics.pairs[{i}][{j}]", label, exps, "collapse")
        if a == b:
            raise _Error(f"config key 'statistics.pairs[{i}]': {_fmt_pair((a, b))} pairs a combination with "
                         "itself; allowed: two different combinations [a, b]")
        if (a, b) in pairs[:i]:
            raise _Error(f"config key 'statistics.pairs[{i}]': {_fmt_pair((a, b))} is listed twice (at "
                         f"[{pairs.index((a, b))}] too); allowed: distinct pairs (Holm runs over the family)")
    if not any(b == ref and a.startswith("forward ") for a, b in pairs):
        knee = sorted({b for a, b in pairs if a.startswith("forward ")})
        raise _Error(f"config key 'statistics.reference': {ref!r} is the b of no pair [forward ..., {ref}] in "
                     "statistics.pairs, so no MSE knee is measured; allowed: the b of a pair whose a is a "
                     f"forward combination: {', '.join(knee) or '(none in statistics.pairs)'}")
    for i, fix in enumerate(stats["fixes"]):
        _in_pairs(f"statistics.fixes[{i}]", (base, fix), pairs, "the pair [statistics.baseline, fix]")
    grid = _delta_grid(exps["collapse"])
    if not any(_on_grid(float(d), grid) for d in stats["table_deltas"]):
        raise _Error(f"config key 'statistics.table_deltas': none of {list(stats['table_deltas'])} is on the "
                     f"Δ grid of experiments.collapse, so T1 would show no row; allowed: values among "
                     f"{', '.join(f'{d:g}' for d in grid)}")


def _check_claims(claims: Mapping, stats: Mapping, exps: Mapping) -> None:
    pairs = [tuple(p) for p in stats["pairs"]]
    for i, label in enumerate(claims["C1"]["combos"]):
        _run_by(f"claims.C1.combos[{i}]", label, exps, "collapse")
    for field in ("zero_combo", "reverse_combo", "forward_combo"):
        if field in claims["C2"]:
            _run_by(f"claims.C2.{field}", claims["C2"][field], exps, "collapse")
    scales = [float(s) for s in listed(exps["scales"]["scale"])]
    for field in ("scale", "compare_scale"):
        s = claims["C3"][field]
        if float(s) not in scales:
            raise _Error(f"config key 'claims.C3.{field}': {s!r} is not a scale that experiments.scales runs; "
                         f"allowed: {', '.join(f'{x:g}' for x in scales)}")
    top = float(claims["C3"].get("max_scale", math.inf))
    if top < float(claims["C3"]["scale"]):
        raise _Error(f"config key 'claims.C3.max_scale': {top:g} is below claims.C3.scale = {claims['C3']['scale']:g}; "
                     "allowed: a top of the range of S at or above the scale the claim is about")
    c5 = claims["C5"]
    _run_by("claims.C5.baseline", c5["baseline"], exps, "collapse")
    for i, fix in enumerate(c5["fixes"]):
        _run_by(f"claims.C5.fixes[{i}]", fix, exps, "collapse")
    for i, fix in enumerate(c5["fixes"]):
        _in_pairs(f"claims.C5.fixes[{i}]", (c5["baseline"], fix), pairs, "the pair [claims.C5.baseline, fix]")
    _check_band("claims.C5.band", c5["band"])
    if c5["far_above"] < c5["band"][1]:
        raise _Error(f"config key 'claims.C5.far_above': {c5['far_above']:g} is below claims.C5.band[1] = "
                     f"{c5['band'][1]:g}; allowed: far_above >= the band's high end")
    for i, pair in enumerate(claims["C6"]["pairs"]):
        for j, label in enumerate(pair):
            _run_by(f"claims.C6.pairs[{i}][{j}]", label, exps, "collapse")
        _in_pairs(f"claims.C6.pairs[{i}]", pair, pairs, "the pair")
    _in_pairs("claims.C6.trivial_pair", claims["C6"]["trivial_pair"], pairs, "the pair")
    for i, window in enumerate(c5["moderate"]):
        _check_band(f"claims.C5.moderate[{i}]", window)
    alt = c5.get("alternatives") or {}
    for i, windows in enumerate(alt.get("moderate", [])):
        for j, window in enumerate(windows):
            _check_band(f"claims.C5.alternatives.moderate[{i}][{j}]", window)
    for i, far in enumerate(alt.get("far_above", [])):
        if far < c5["band"][1]:
            raise _Error(f"config key 'claims.C5.alternatives.far_above[{i}]': {far:g} is below claims.C5.band[1] = "
                         f"{c5['band'][1]:g}; allowed: far_above >= the band's high end")
    _check_band("claims.paper.band", claims["paper"]["band"])
    variants = list(exps[POLICY_EXPERIMENT]["variants"])
    for field in ("variant", "floor_variant"):
        v = claims["audit"][field]
        if v not in variants:
            raise _Error(f"config key 'claims.audit.{field}': {v!r} is not a variant that "
                         f"experiments.{POLICY_EXPERIMENT} runs; allowed: {', '.join(variants)} (the keys of "
                         f"experiments.{POLICY_EXPERIMENT}.variants)")
    rm = claims[REALMODEL]
    _check_band(f"claims.{REALMODEL}.band", rm["band"])
    for i, label in enumerate(rm["combos"]):
        if label not in COMBO_LABELS:
            raise _Error(f"config key 'claims.{REALMODEL}.combos[{i}]': {label!r} is not a combination that "
                         f"experiments.{REALMODEL} runs; allowed: {', '.join(COMBO_LABELS)}")
    grid = _delta_grid(exps[FP4_EXPERIMENT])
    if FP4_EXPERIMENT in claims and not _on_grid(float(claims[FP4_EXPERIMENT]["delta"]), grid):
        raise _Error(f"config key 'claims.{FP4_EXPERIMENT}.delta': {claims[FP4_EXPERIMENT]['delta']!r} is not on the Δ "
                     f"grid of experiments.{FP4_EXPERIMENT}; allowed: one of {', '.join(f'{d:g}' for d in grid)}")
