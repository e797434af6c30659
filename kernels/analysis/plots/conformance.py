"""F6 (rule fig_conformance): the Triton kernel against the emulator, per combination and covering case, and the
multi-call engine against single calls, per group of calls."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from pcast.contract import combo_label
from pcast.analysis.conformance_table import row_passes
from pcast.analysis.text import truthy
from pcast.analysis.plots.style import COLUMN_WIDTH, COMBO_STYLE, combos_present, figure_data, series, use_style

__all__ = ["fig_conformance"]


def _points(ax, h: pd.DataFrame, x: float, causal: bool, style: dict) -> None:
    """The rows of one (combination, causal, shape) cell: filled if diagnostics agree, x if unexplained."""
    for _, r in h.iterrows():
        if not r["expl_b"]:
            ax.plot([x], [r["max_abs_diff"]], "x", color="#000000", ms=5, mew=1.2, zorder=4)
        ax.plot([x], [r["max_abs_diff"]], "o" if not causal else "s", color=style["color"], ms=3.5,
                mfc=style["color"] if r["diag_b"] else "white", mew=0.8, zorder=3)


def _draw(ax, conf: pd.DataFrame, combos) -> list[dict]:
    """Every row of the conformance table, grouped by combination, causal flag and shape."""
    rows: list[dict] = []
    shapes = sorted({(int(n), int(d)) for n, d in zip(conf["n"], conf["d"])})
    for xi, combo in enumerate(combos):
        g = conf[conf["combo"] == combo]
        for ci, causal in enumerate((False, True)):
            h = g[g["causal_b"] == causal].sort_values(["n", "d", "seed"])
            for si, (n, d) in enumerate(shapes):
                hh = h[(h["n"] == n) & (h["d"] == d)]
                if hh.empty:
                    continue
                x = xi + (ci - 0.5) * 0.36 + (si - (len(shapes) - 1) / 2) * 0.1
                _points(ax, hh, x, causal, COMBO_STYLE[combo])
                rows += series("a", f"{combo} causal={causal} n={n} d={d}", hh["seed"], hh["max_abs_diff"],
                               diag_equal=None, explained=None)
                rows[-len(hh):] = [dict(r, diag_equal=bool(de), explained=bool(ex), combo=combo, causal=causal,
                                        n=n, d=d) for r, de, ex in zip(rows[-len(hh):], hh["diag_b"], hh["expl_b"])]
    return rows


def _draw_groups(ax, conf: pd.DataFrame, x0: int) -> tuple[list[str], list[dict]]:
    """The covering cases (one column) and the engine rows (one column per experiment whose calls they are)
    from ``x0`` on; returns the column labels and the data rows."""
    cols = [("kernel:\ncover", conf[(conf["check"] != "engine") & ~conf["grid"]])]
    eng = conf[conf["check"] == "engine"]
    for exp, g in eng.groupby(eng["case"].str.split(" ").str[0], sort=True):
        cols.append((f"engine:\n{exp}", g))
    labels, rows = [], []
    for i, (label, g) in enumerate(c for c in cols if not c[1].empty):
        x = x0 + i
        xs = x + ((np.arange(len(g)) % 9) - 4) * 0.04
        y, diag, ok = g["max_abs_diff"].to_numpy(float), g["diag_b"].to_numpy(bool), g["expl_b"].to_numpy(bool)
        ax.plot(xs[diag], y[diag], "o", color="#555555", ms=2.5, zorder=3)
        ax.plot(xs[~diag], y[~diag], "o", color="#555555", mfc="white", ms=2.5, mew=0.6, zorder=3)
        ax.plot(xs[~ok], y[~ok], "x", color="#000000", ms=5, mew=1.2, zorder=4)
        labels.append(label)
        rows += [dict(r, diag_equal=bool(de), explained=bool(ex)) for r, de, ex in
                 zip(series("a", label.replace("\n", " "), g["seed"], g["max_abs_diff"]), g["diag_b"], g["expl_b"])]
    return labels, rows


def fig_conformance(conformance: pd.DataFrame, *, linthresh: float = 1e-9):
    """F6: max ``|Δout|`` per row of the conformance table (symlog axis: exact agreement shows as 0): the
    Triton kernel vs the emulator per combination of the grid and for the covering cases, and the engine
    vs single calls per experiment whose calls it ran; filled where all diagnostics agree, open where they
    differ but every difference is explained, a cross where a row fails."""
    use_style()
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 2.4))
    conf = conformance.copy()
    if "check" not in conf:
        conf["check"] = "kernel"
    conf["combo"] = [combo_label(o, s) for o, s in zip(conf["order"], conf["scale"])]
    conf["grid"] = (conf["case"] == conf["combo"]) if "case" in conf else True
    conf["causal_b"] = truthy(conf["causal"])
    conf["diag_b"] = truthy(conf["diag_equal"])
    conf["expl_b"] = row_passes(conf)
    grid = conf[(conf["check"] != "engine") & conf["grid"]]
    combos = combos_present(grid)
    rows = _draw(ax, grid, combos)
    labels, extra = _draw_groups(ax, conf, len(combos))
    rows += extra
    ax.set_yscale("symlog", linthresh=linthresh, linscale=0.4)
    top = max(float(conf["max_abs_diff"].max()) * 10 if len(conf) else 1e-5, 1e-5)
    ax.set_ylim(0, top)
    ticks = [c.replace(" ", "\n", 1) for c in combos] + labels
    ax.set_xticks(range(len(ticks)))
    ax.set_xticklabels(ticks, fontsize=5.5)
    ax.set_xlim(-0.6, len(ticks) - 0.4)
    ax.set_ylabel("max |Δout| of a row")
    backends = "+".join(sorted(set(map(str, conf.loc[conf["check"] != "engine", "kernel_backend"]))))
    ax.set_title(f"Triton kernel ({backends}) vs emulator;\nmulti-call engine vs single calls", fontsize=7)
    handles = [Line2D([], [], color="#555555", marker="o", ls="none", ms=3.5, label="non-causal"),
               Line2D([], [], color="#555555", marker="s", ls="none", ms=3.5, label="causal"),
               Line2D([], [], color="#555555", marker="o", ls="none", ms=3.5, mfc="white",
                      label="diagnostics differ (explained)"),
               Line2D([], [], color="#000000", marker="x", ls="none", ms=5, label="fails (not explained / not identical)")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, fontsize=6)
    fig.tight_layout(pad=0.4)
    return fig, figure_data(rows)
