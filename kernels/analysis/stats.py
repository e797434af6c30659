"""One builder per statistics step, from the ``statistics:`` section of config.yaml.

Each rule of ``workflow/rules/statistics.smk`` calls one of these on its tidy table, and so does
:func:`pcast.analysis.verdicts.evaluate_tidy`, so a config key is read in exactly one place:

* :func:`collapse` (rule ``stats_collapse``, tidy ``collapse``): ``seed_interval``;
* :func:`paired` (rule ``stats_paired``, tidy ``collapse``): ``pairs``, ``tost_margin``,
  ``alpha``, ``reference``, ``knee_factor`` and the bootstrap keys;
* :func:`scales` (rule ``stats_scales``, tidy ``scales``): ``baseline``, ``seed_interval`` and
  the bootstrap keys;
* :func:`threshold` (rule ``stats_threshold``, tidy ``threshold``): ``crossing_level`` and the
  bootstrap keys;
* :func:`policies` (rule ``stats_policies``, tidy ``policies``): ``crossing_level`` and the
  bootstrap keys (``confidence_level`` also sets the seed-mean CIs);
* :func:`fp4` (rule ``stats_fp4``, tidy ``fp4``): the same keys as :func:`policies`.
* :func:`decode` (rule ``stats_decode``, tidy ``decode``): the same keys; three tables (:mod:`pcast.analysis.decode`).
* :func:`dynamic` (rule ``stats_dynamic``, tidy ``dynamic``, beyond the paper): ``reference`` and the bootstrap
  keys (:mod:`pcast.analysis.dynamic`).

The bootstrap keys are ``bootstrap_resamples``, ``confidence_level``, ``bootstrap_method`` and
``seed`` (:func:`bootstrap`). The statistics themselves live in :mod:`.paired` and
:mod:`.summaries`.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from pcast.analysis import registry
from pcast.analysis.decode import decode_crossings, decode_curves, decode_partition
from pcast.analysis.dynamic import dynamic_summary
from pcast.analysis.fp4 import fp4_summary
from pcast.analysis.paired import paired_tests
from pcast.analysis.policies import policy_summary, require
from pcast.analysis.summaries import collapse_summary, knee_summary, scales_summary, threshold_summary

__all__ = ["bootstrap", "collapse", "paired", "scales", "threshold", "policies", "fp4", "decode", "dynamic",
           "POLICY_KEYS",
           "READS", "reads"]

# The keys of the statistics section that stats.policies reads.
POLICY_KEYS = registry.STATISTICS_READS["policies"]
READS = registry.STATISTICS_READS

def reads(job: str, cfg: Mapping) -> dict:
    """The part of the ``statistics:`` section that ``job`` (a key of :data:`READS`) reads."""
    return registry.statistics_reads(job, cfg)


def bootstrap(cfg: Mapping) -> dict:
    """The bootstrap keyword arguments (``n_resamples``, ``confidence_level``, ``boot_method``,
    ``seed``) of every bootstrapped statistic, from the ``statistics:`` section."""
    return {"n_resamples": int(cfg["bootstrap_resamples"]),
            "confidence_level": float(cfg["confidence_level"]),
            "boot_method": cfg["bootstrap_method"],
            "seed": int(cfg["seed"])}


def collapse(tidy: pd.DataFrame, cfg: Mapping) -> pd.DataFrame:
    """Measured vs predicted underflow and MSE per configuration of the collapse experiment."""
    return collapse_summary(tidy, level=float(cfg["seed_interval"]))


def paired(tidy: pd.DataFrame, cfg: Mapping) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The T1 family of paired tests on the collapse experiment, and the MSE knees from it."""
    tests = paired_tests(tidy, [tuple(p) for p in cfg["pairs"]], margin=float(cfg["tost_margin"]),
                         alpha=float(cfg["alpha"]), **bootstrap(cfg))
    knees = knee_summary(tests, reference=cfg["reference"], factor=float(cfg["knee_factor"]))
    return tests, knees


def scales(tidy: pd.DataFrame, cfg: Mapping) -> pd.DataFrame:
    """Theory of S next to measured MSE, underflow and the paired improvement over the baseline."""
    return scales_summary(tidy, baseline=cfg["baseline"], level=float(cfg["seed_interval"]),
                          **bootstrap(cfg))


def threshold(tidy: pd.DataFrame, cfg: Mapping) -> pd.DataFrame:
    """Measured Δc (crossing of ``crossing_level``, bootstrap CI over seeds) vs predicted."""
    return threshold_summary(tidy, level=float(cfg["crossing_level"]), **bootstrap(cfg))


def policies(tidy: pd.DataFrame, cfg: Mapping) -> pd.DataFrame:
    """What each deployed P policy loses per Δ: seed means with CIs, MSE over the V-cast floor, Δc, theory."""
    require(cfg, "statistics", POLICY_KEYS)
    return policy_summary(tidy, crossing_level=float(cfg["crossing_level"]), **bootstrap(cfg))


def fp4(tidy: pd.DataFrame, cfg: Mapping) -> pd.DataFrame:
    """P in FP4: seed means with CIs per configuration, the theory, group-flush Δc, paired MSE ratios."""
    require(cfg, "statistics", POLICY_KEYS)
    return fp4_summary(tidy, crossing_level=float(cfg["crossing_level"]), **bootstrap(cfg))


def decode(tidy: pd.DataFrame, cfg: Mapping) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Decode rows: (underflow curves with the theory, Δc per configuration, partition-normalised RMS error)."""
    require(cfg, "statistics", POLICY_KEYS)
    b = bootstrap(cfg)
    boot = {"n_resamples": b["n_resamples"], "confidence_level": b["confidence_level"], "method": b["boot_method"],
            "seed": b["seed"]}
    curves = decode_curves(tidy, confidence_level=b["confidence_level"])
    return (curves, decode_crossings(tidy, curves, level=float(cfg["crossing_level"]), boot=boot),
            decode_partition(tidy, boot=boot))


def dynamic(tidy: pd.DataFrame, cfg: Mapping) -> pd.DataFrame:
    """Dynamic P scales beside static S: seed means with CIs, the theory, MSE over the reference combination's."""
    require(cfg, "statistics", registry.STATISTICS_READS["dynamic"])
    return dynamic_summary(tidy, reference=str(cfg["reference"]), **bootstrap(cfg))
