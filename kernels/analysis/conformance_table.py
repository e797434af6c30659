"""T4's display and the numbers the conformance verdict states, from ``results/tidy/conformance.csv``.

The table's rows (``check``, docs/interfaces.md "Pipeline data"): ``kernel`` rows compare the Triton kernel
with the emulator (every difference explained by :func:`pcast.conformance.explain`), ``engine`` rows
compare :func:`pcast.attention_calls` with one :func:`pcast.attention` per item on the emulator (bit for
bit). :func:`row_passes` is the one rule a row is judged by; :func:`coverage` lists what the rows cover
(Δ, sink value norms, every option's values, the shapes), :func:`table_conformance` builds T4's display:
the kernel grid per (order, S, causal, n, d) over seeds, each covering case, and the engine rows per
group of calls (the experiment whose calls they are, the sink kind and the Q·K cast).
"""

from __future__ import annotations

import pandas as pd

from pcast.analysis.text import short, truthy

__all__ = ["OPTION_COLUMNS", "prepared", "row_passes", "coverage", "table_conformance"]

#: The option columns whose values the verdict lists (every value the rows carry).
OPTION_COLUMNS = ("order", "scale", "scale_mode", "rescale_threshold", "sink_kind", "sink_mode", "fmt", "rowsum",
                  "qk_fmt", "v_fmt")


def prepared(conf: pd.DataFrame) -> pd.DataFrame:
    """The table with booleans parsed, ``check`` filled (``kernel`` where absent) and ``passes``
    (:func:`row_passes`) added."""
    c = conf.copy()
    if "check" not in c:
        c["check"] = "kernel"
    for col in ("diag_equal", "explained"):
        c[col + "_b"] = truthy(c[col])
    c["passes"] = row_passes(c)
    return c


def row_passes(c: pd.DataFrame) -> pd.Series:
    """A kernel row passes when every difference is explained; an engine row only when it is identical bit
    for bit: no output difference, every diagnostic equal, no mismatched row (and the row says so)."""
    expl = truthy(c["explained"])
    identical = (c["max_abs_diff"].astype(float) == 0) & truthy(c["diag_equal"]) & (c["mismatched_rows"] == 0)
    return expl & ((c["check"] != "engine") | identical)


def _values(s: pd.Series) -> list:
    vals = s.dropna().unique().tolist()
    try:
        return sorted(vals, key=float)
    except (TypeError, ValueError):
        return sorted(map(str, vals))


def coverage(conf: pd.DataFrame) -> dict:
    """What the rows cover, per check: rows, shapes (n, d), Δ, sink value norms, each option's values."""
    c = prepared(conf)
    out = {}
    for check, g in c.groupby("check", sort=True):
        opts = {col: _values(g[col]) for col in OPTION_COLUMNS if col in g}
        if "block_m" in g:
            opts["blocks"] = sorted({f"{m}x{n}" for m, n in zip(g["block_m"], g["block_n"])})
        out[check] = {"rows": int(len(g)), "passing": int(g["passes"].sum()),
                      "n": _values(g["n"]), "d": _values(g["d"]),
                      "delta": _values(g["delta"]) if "delta" in g else [],
                      "sink_v_scale": _values(g["sink_v_scale"]) if "sink_v_scale" in g else [],
                      "cases": int(g["case"].nunique()) if "case" in g else 0,
                      "max_abs_diff": float(g["max_abs_diff"].max()), "options": opts}
    return out


def _line(g: pd.DataFrame, **head) -> dict:
    nums = ", ".join(short(x, 3) for x in _values(g["delta"])) if "delta" in g else ""
    norms = ", ".join(short(x, 3) for x in _values(g["sink_v_scale"])) if "sink_v_scale" in g else ""
    return {**head, "Δ": nums, "v": norms, "rows": str(len(g)),
            "ran as": "+".join(sorted(set(map(str, g["kernel_backend"])))),
            "max |Δout|": short(g["max_abs_diff"].max(), 3), "max rel": short(g["max_rel_diff"].max(), 3),
            "diagnostics equal": f"{int(g['diag_equal_b'].sum())}/{len(g)}",
            "mismatched rows": str(int(g["mismatched_rows"].sum())),
            "pass": f"{int(g['passes'].sum())}/{len(g)}", "fragile P": str(int(g["fragile_elements"].sum()))}


def table_conformance(conf: pd.DataFrame) -> pd.DataFrame:
    """T4 display: the kernel grid per (order, S, causal, n, d) over seeds; each covering case (a kernel row
    whose case is not an (order, S) label of the grid); the engine rows per group of calls."""
    c = prepared(conf)
    if "case" not in c:
        c["case"] = [f"{o} S={s:g}" for o, s in zip(c["order"], c["scale"])]
    grid_labels = {f"{o} S={float(s):g}" for o, s in zip(c["order"], c["scale"])}
    kern, eng = c[c["check"] != "engine"], c[c["check"] == "engine"]
    rows = []
    grid = kern[kern["case"].isin(grid_labels)]
    for (order, scale, causal, n, d), g in grid.groupby(["order", "scale", "causal", "n", "d"], sort=True):
        rows.append(_line(g, check="kernel", case=f"{order} S={float(scale):g}",
                          options=f"causal={causal}", n=str(n), d=str(d)))
    for case, g in kern[~kern["case"].isin(grid_labels)].groupby("case", sort=True):
        r = g.iloc[0]
        opts = (f"{r['fmt']} {r['scale_mode']} τ={float(r['rescale_threshold']):g} {r['sink_kind']}"
                f"{' ' + r['sink_mode'] if r['sink_kind'] == 'logit' else ''} qk={r['qk_fmt']} v={r['v_fmt']} "
                f"{r['block_m']}x{r['block_n']}")
        rows.append(_line(g, check="kernel (cover)", case=case, options=opts, n=str(r["n"]), d=str(r["d"])))
    if not eng.empty:
        exp = eng["case"].str.split(" ").str[0]
        keys = [exp, eng["sink_kind"], eng["qk_fmt"]]
        for (e, kind, qk), g in eng.groupby(keys, sort=True):
            rows.append(_line(g, check="engine", case=f"{e}: {g['case'].nunique()} calls",
                              options=f"{kind} qk={qk}", n=str(g["n"].iloc[0]), d=str(g["d"].iloc[0])))
    return pd.DataFrame(rows)
