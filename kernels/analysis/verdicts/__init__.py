"""The verdict on each claim of the paper, computed from the measured data.

Every ``claim_*`` function takes the summary tables of :mod:`pcast.analysis.stats` (what the
statistics rules write to ``results/stats/``) and its part of the ``claims:`` section of
config.yaml, and returns a dict::

    {"claim": "C1", "statement": ..., "verdict": "PASS" | "PARTIAL" | "FAIL" | "INCONCLUSIVE",
     "criterion": <the rule applied, with the config's numbers>, "numbers": {...},
     "details": [<lines>], "evidence": [<figure/table targets>],
     "scoped": [{"scope", "verdict", "domain"}], "tolerances": [<each tolerance and its source>],
     # C1–C6 also:
     "readings": [{"reading", "verdict", "domain"}], "headline": <the readings under which it holds>,
     "robustness": [{"choice", "value", "source", "verdicts": {<alternative>: <verdict>}}],
     "kinds": [<which sub-cases are settings, which readings, and why>],
     "beyond_domain": [{"scope", "verdict", "domain"}]}   # C6: outside the claim's domain

The statement (for C1–C6 the abstract's sentence) and the evidence come from
:mod:`pcast.analysis.registry`. The verdict is on the claim as stated, by the one strict rule
of :mod:`.common`: settings combine strictly, readings by :func:`.common.across_readings`; the
scoped verdicts beneath never replace it. Tolerances come from the
data (bootstrap CIs, standard errors at ``statistics.confidence_level``) or from a stated physical
reason; the config holds the rest, and ``claims.paper`` the abstract's own numbers. ``INCONCLUSIVE`` means the data cannot
evaluate the criterion at all (e.g. a Δ grid too coarse to contain a crossing, as on the smoke
preset); it is never used to soften a claim that the data contradicts.

One module per claim group: :mod:`.underflow` (C1, C2), :mod:`.scale` (C3), :mod:`.threshold`
(C4), :mod:`.mse` (C5), :mod:`.floor` (C6), :mod:`.paper` (the abstract's numbers), :mod:`.audit` (deployed P
policies, from the policies experiment),
:mod:`.realmodel` (a pretrained model's heads and outputs), :mod:`.fp4` (P in microscaled FP4, from the
fp4 experiment), :mod:`.decode` (split-KV decode rows, from the decode experiment), :mod:`.tensorcore` (an FP8 tensor core's P·V accumulation), :mod:`.cases` (the public reports rebuilt, from table T9), :mod:`.conformance`; here, all of them at
once and their output.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import pandas as pd

from pcast import theory
from pcast.analysis import stats
from pcast.analysis.text import intervals
from pcast.analysis.verdicts.audit import AUDIT, claim_audit
from pcast.analysis.verdicts.cases import CASES_ID, claim_cases
from pcast.analysis.verdicts.deployed import DEPLOYED_ID, claim_deployed
from pcast.analysis.verdicts.common import (VERDICTS, Choice, Subcase, across_readings, ci_tolerance, combine, family_z,
                                            subcase_verdict)
from pcast.analysis.verdicts.conformance import conformance_check
from pcast.analysis.verdicts.decode import DECODE, claim_decode
from pcast.analysis.verdicts.fp4 import FP4, claim_fp4
from pcast.analysis.verdicts.floor import claim_c6
from pcast.analysis.verdicts.mse import claim_c5, sink_value_norms
from pcast.analysis.verdicts.paper import claim_paper
from pcast.analysis.verdicts.realmodel import REALMODEL, claim_realmodel
from pcast.analysis.verdicts.scale import claim_c3
from pcast.analysis.verdicts.templates import fill, gaps
from pcast.analysis.verdicts.tensorcore import TENSORCORE, claim_tensorcore
from pcast.analysis.verdicts.threshold import claim_c4
from pcast.analysis.verdicts.underflow import claim_c1, claim_c2

__all__ = [
    "VERDICTS", "Subcase", "Choice", "combine", "across_readings", "subcase_verdict", "family_z", "ci_tolerance",
    "claim_c1", "claim_c2", "claim_c3", "claim_c4", "claim_c5", "claim_c6", "claim_paper", "claim_audit",
    "claim_realmodel", "claim_fp4", "claim_tensorcore", "claim_decode", "claim_cases", "claim_deployed", "conformance_check", "evaluate", "evaluate_tidy", "with_defaults", "baseline_fraction", "render_markdown", "findings_section", "verdict_table", "to_json",
    "intervals",
]


def baseline_fraction(collapse: pd.DataFrame, baseline: str) -> pd.Series | None:
    """Δ -> the exact model's non-sink underflow fraction of the baseline (C5's readings of 'moderate')."""
    b = collapse[collapse["combo"] == baseline].dropna(subset=["pred_exact"]) if len(collapse) else collapse
    return b.groupby("delta")["pred_exact"].mean() if len(b) else None


def evaluate(*, collapse: pd.DataFrame, paired: pd.DataFrame, scales: pd.DataFrame,
             thresholds: pd.DataFrame, knees: pd.DataFrame, conformance: pd.DataFrame | None,
             claims_cfg: Mapping, policies: pd.DataFrame | None = None,
             realmodel: pd.DataFrame | None = None, realmodel_outputs: pd.DataFrame | None = None,
             fp4: pd.DataFrame | None = None, cases: pd.DataFrame | None = None,
             confidence_level: float = 0.95, tensorcore: tuple[pd.DataFrame, Mapping] | None = None,
             decode: pd.DataFrame | None = None, decode_partition: pd.DataFrame | None = None,
             tidy_collapse: pd.DataFrame | None = None, stats_cfg: Mapping | None = None,
             realmodel_tensors: Mapping | None = None, deployed: pd.DataFrame | None = None,
             defaults: Mapping | None = None) -> dict:
    """Every verdict from the summary tables (what the ``claims`` rule runs); the audit of deployed
    policies joins them when ``policies`` (the policies summary) is given, the real-model section
    when ``realmodel`` (the per-head summary; ``realmodel_outputs`` the per-run output summary) is,
    the FP4 section when ``fp4`` (the fp4 summary) is, the reported cases when ``cases`` (table T9) is,
    the deployed kernels when ``deployed`` (table T10) is,
    the tensor-core section when ``tensorcore`` (its summary and mmasim check) is, the decode section
    when ``decode`` (the decode Δc summary; ``decode_partition`` its P-cast error table) is.
    ``confidence_level``: the statistics
    section's, the level of every CI the tolerances are read from. ``tidy_collapse`` (the tidy collapse
    table) and ``stats_cfg`` (the statistics section) let the robustness tables recompute C4's knees
    and C6's TOST at the alternative values of ``claims.<id>.alternatives``, from the same data;
    ``realmodel_tensors`` (the captured ``layer{L}/v`` arrays) gives the real model's sink-value norms
    beside C5's norm grid. ``defaults`` (config.yaml's ``statistics`` and ``claims`` sections under the run's
    preset, before the command line's overrides) puts the default of every overridden key in the robustness
    tables (:func:`with_defaults`)."""
    claims_cfg = with_defaults(claims_cfg, stats_cfg, defaults)
    fmt = str(collapse["fmt"].iloc[0]) if len(collapse) and "fmt" in collapse else "e4m3fn"
    k = int(collapse["ksink"].iloc[0]) if len(collapse) and "ksink" in collapse else 4
    onset = theory.critical_delta(float(claims_cfg["C3"]["scale"]), k=k, fmt=fmt)
    lv = float(confidence_level)
    grid_max = float(collapse["delta"].max()) if len(collapse) else float("inf")
    norms = sink_value_norms(realmodel_tensors, realmodel) if realmodel_tensors is not None and realmodel is not None \
        else None
    c5 = claim_c5(paired, claims_cfg["C5"], baseline_fraction(collapse, claims_cfg["C5"]["baseline"]), sink_norms=norms)
    out = {
        "C1": claim_c1(collapse, claims_cfg["C1"], level=lv),
        "C2": claim_c2(collapse, claims_cfg["C2"], level=lv),
        "C3": claim_c3(scales, claims_cfg["C3"], fmt=fmt),
        "C4": claim_c4(thresholds, knees, claims_cfg["C4"], level=lv, grid_max=grid_max, paired=paired,
                       collapse=collapse, stats_cfg=stats_cfg, sink_norms=norms),
        "C5": c5,
        "C6": claim_c6(paired, claims_cfg["C6"], dc_onset=onset, tidy=tidy_collapse, stats_cfg=stats_cfg),
        "paper": claim_paper(claims_cfg["paper"], thresholds, c5, fmt=fmt, level=lv),
    }
    if policies is not None:
        out[AUDIT] = claim_audit(policies, claims_cfg[AUDIT], confidence=lv)
    if fp4 is not None:
        out[FP4] = claim_fp4(fp4, claims_cfg[FP4], confidence=lv)
    if tensorcore is not None:
        out[TENSORCORE] = claim_tensorcore(*tensorcore, claims_cfg[TENSORCORE])
    if decode is not None:
        out[DECODE] = claim_decode(decode, decode_partition, claims_cfg[DECODE])
    if realmodel is not None:
        out[REALMODEL] = claim_realmodel(realmodel, realmodel_outputs, claims_cfg[REALMODEL])
    if cases is not None:
        out[CASES_ID] = claim_cases(cases)
    if deployed is not None:
        out[DEPLOYED_ID] = claim_deployed(deployed)
    out["conformance"] = conformance_check(conformance)
    return out


def with_defaults(claims_cfg: Mapping, stats_cfg: Mapping | None, defaults: Mapping | None) -> dict:
    """``claims_cfg`` with, in each of C1–C6, ``_defaults``: config key -> config.yaml's value, for every key of
    ``claims.<id>`` and of the statistics section whose value this run overrides (read by
    :func:`.common.choice`)."""
    out = dict(claims_cfg)
    if not defaults:
        return out
    changed = {f"statistics.{k}": v for k, v in (defaults.get("statistics") or {}).items()
               if stats_cfg is not None and k in stats_cfg and stats_cfg[k] != v}
    for cid in ("C1", "C2", "C3", "C4", "C5", "C6"):
        d = (defaults.get("claims") or {}).get(cid) or {}
        mine = {f"claims.{cid}.{k}": v for k, v in d.items() if k != "alternatives" and claims_cfg[cid].get(k) != v}
        if changed or mine:
            out[cid] = {**claims_cfg[cid], "_defaults": {**changed, **mine}}
    return out


def evaluate_tidy(tidy: Mapping[str, pd.DataFrame], stats_cfg: Mapping, claims_cfg: Mapping) -> dict:
    """The whole chain in memory: tidy tables -> summaries (the statistics rules' builders) ->
    verdicts (the audit too when ``tidy`` has ``policies``). Used by the tests."""
    paired, knees = stats.paired(tidy["collapse"], stats_cfg)
    policies = stats.policies(tidy["policies"], stats_cfg) if "policies" in tidy else None
    return evaluate(collapse=stats.collapse(tidy["collapse"], stats_cfg), paired=paired,
                    scales=stats.scales(tidy["scales"], stats_cfg),
                    thresholds=stats.threshold(tidy["threshold"], stats_cfg), knees=knees,
                    conformance=tidy.get("conformance"), claims_cfg=claims_cfg, policies=policies,
                    confidence_level=float(stats_cfg["confidence_level"]), tidy_collapse=tidy["collapse"],
                    stats_cfg=stats_cfg)


def to_json(result: Mapping) -> str:
    """Deterministic JSON (sorted keys, fixed float text)."""
    return json.dumps(result, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _table(rows: list[dict]) -> list[str]:
    cols = list(rows[0])
    return (["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            + ["| " + " | ".join(str(r[c]).replace("|", "\\|") for c in cols) + " |" for r in rows] + [""])


def _section(key: str, r: Mapping) -> list[str]:
    quote = "the abstract's sentence" if key in ("C1", "C2", "C3", "C4", "C5", "C6") else "claim"
    rule = ("settings combined strictly; across readings PASS if it holds under every reading, PARTIAL under "
            "some, FAIL under none" if "readings" in r else
            "strict rule: PASS only if every sub-case passes, FAIL if any fails, PARTIAL otherwise")
    lines = [f"## {key}: {r['verdict']}", "", f"*Claim ({quote}).* “{r['statement']}”", "",
             f"*Verdict on the claim as stated:* **{r['verdict']}** ({rule})", ""]
    if r.get("headline"):
        lines += [f"*Headline.* {r['headline']}", ""]
    lines += [f"*Criterion.* {r['criterion']}", ""]
    if r.get("kinds"):
        lines += ["*Settings and readings.*", ""] + [f"- {k}" for k in r["kinds"]] + [""]
    if r.get("readings"):
        lines += ["*Readings (each over the claim's domain).*", ""]
        lines += _table([{"reading": x["reading"], "verdict": f"**{x['verdict']}**", "domain": x["domain"] or "—"}
                         for x in r["readings"]])
    if "robustness" in r:
        lines += ["*Robustness (every choice that can decide the verdict; alternatives computed from the same "
                  "data).*", ""]
        lines += _table([{"choice": c["choice"] + (f" ({c['key']})" if c.get("key") else ""),
                          "value": c["value"] + (f" (overridden; default {c['default']})" if c.get("default") else ""),
                          "source": c["source"],
                          "verdict at alternatives": "; ".join(f"{k}: {v}" for k, v in c["verdicts"].items()) or "—"}
                         for c in r["robustness"]]) if r["robustness"] else ["none", ""]
    if r.get("tolerances"):
        lines += ["*Tolerances.*", ""] + [f"- {t}" for t in r["tolerances"]] + [""]
    if r.get("table"):
        lines += _table(r["table"])
    if r.get("scoped"):
        lines += ["*Scoped verdicts (each over its own domain; they never replace the verdict above).*", ""]
        lines += [f"- {s['scope']}: **{s['verdict']}**" + (f" — {s['domain']}" if s["domain"] else "")
                  for s in r["scoped"]] + [""]
    if r.get("beyond_domain"):
        lines += ["*Beyond the claim's domain (shown, never in the verdict).*", ""]
        lines += [f"- {s['scope']}: {s['verdict']}" + (f" — {s['domain']}" if s["domain"] else "")
                  for s in r["beyond_domain"]] + [""]
    lines += ["*Details.*", ""] + [f"- {d}" for d in r["details"]] + [""]
    return lines


def verdict_table(result: Mapping, *, error: BaseException | None = None) -> str:
    """The verdict table alone (claims.md when the full rendering fails: the verdicts are never lost), with the
    rendering error that left out the rest."""
    lines = ["# Claims verdict", "", "| claim | verdict |", "|---|---|"]
    lines += [f"| {key} | **{r['verdict']}** |" for key, r in result.items()] + [""]
    if error is not None:
        lines += [f"The rest of this file could not be rendered ({type(error).__name__}: {error}); claims.json holds "
                  "every verdict with its numbers.", ""]
    return "\n".join(lines)


def render_markdown(result: Mapping, *, preset: str | None = None, expected: Mapping | None = None,
                    findings: Mapping | None = None) -> str:
    """``figures/claims.md``: a verdict table, what the preset is expected to give (``expected``: claim ->
    {verdict, why}, the preset's ``expected_verdicts``), then per claim the criterion and the numbers, then
    the findings beyond the paper (``findings``: id -> :func:`pcast.analysis.dynamic.dynamic_finding`'s dict)."""
    lines = ["# Claims verdict", ""]
    if preset:
        lines += [f"Computed from the `{preset}` preset's tidy tables by `snakemake claims`; "
                  "criteria from the `claims:` section of config.yaml (docs/claims.md explains each rule).", ""]
    lines += ["| claim | verdict | evidence |", "|---|---|---|"]
    for key, r in result.items():
        lines.append(f"| {key} | **{r['verdict']}** | {', '.join(r['evidence']) or '—'} |")
    lines.append("")
    if expected:
        lines += expected_section(result, expected, preset)
    for key, r in result.items():
        lines += _section(key, r)
    if findings:
        lines += findings_section(findings)
    return "\n".join(lines)


def findings_section(findings: Mapping) -> list[str]:
    """Markdown lines of "Findings beyond the paper": per finding its question, what the data say and the numbers;
    no verdict (they answer no claim of the paper)."""
    lines = ["## Findings beyond the paper", "",
             "Experiments the paper does not make. Each states what its data say; none is a verdict, and none feeds "
             "a claim above.", ""]
    for key, f in findings.items():
        lines += [f"### {key}", "", f"*Question.* {f['statement']}", "", f"*Finding.* {f['finding']}", "",
                  f"*Evidence.* {', '.join(f['evidence'])}", ""]
        if f.get("table"):
            lines += _table(f["table"])
    return lines


def expected_section(result: Mapping, expected: Mapping, preset: str | None) -> list[str]:
    """Markdown lines: per claim the preset's expected verdict, this run's, and why it is expected (each ``why`` a
    template filled from this run's numbers, :mod:`.templates`)."""
    differ = [k for k, e in expected.items() if k in result and result[k]["verdict"] != e["verdict"]]
    lines = [f"## Expected verdicts of the `{preset}` preset", "",
             ("This run gives every expected verdict." if not differ else
              f"This run differs from the expected verdict in: {', '.join(differ)}."), "",
             "| claim | expected | this run | why |", "|---|---|---|---|"]
    for key, e in expected.items():
        got = result[key]["verdict"] if key in result else "not run"
        why = fill(e["why"], result).replace("|", "\\|")
        lines.append(f"| {key} | {e['verdict']} | {got}{' (differs)' if key in differ else ''} | {why} |")
    missing = [f"{key}: {g}" for key, e in expected.items() for g in gaps(e["why"], result)]
    if missing:
        lines += ["", "Numbers the expected texts name that this run does not have (a grid override or an experiment "
                  "left out; each shown as [not in this run: ...] above):", ""] + [f"- {m}" for m in missing]
    return lines + [""]
