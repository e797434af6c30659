"""F6 (rule fig_conformance): the Triton kernel against the emulator, per combination."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D

from kernels.contract import combo_label
from kernels.analysis.text import truthy
from kernels.analysis.plots.style import COLUMN_WIDTH, COMBO_STYLE, combos_present, figure_data, series, use_style

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


def fig_conformance(conformance: pd.DataFrame, *, linthresh: float = 1e-9):
    """F6: Triton kernel vs emulator per combination: max ``|Δout|`` per row of the conformance table
    (symlog axis: exact agreement shows as 0), filled where all diagnostics agree, open where
    they differ but every difference is explained, a cross where not explained."""
    use_style()
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 2.4))
    conf = conformance.copy()
    conf["combo"] = [combo_label(o, s) for o, s in zip(conf["order"], conf["scale"])]
    conf["causal_b"] = truthy(conf["causal"])
    conf["diag_b"] = truthy(conf["diag_equal"])
    conf["expl_b"] = truthy(conf["explained"])
    combos = combos_present(conf)
    rows = _draw(ax, conf, combos)
    ax.set_yscale("symlog", linthresh=linthresh, linscale=0.4)
    top = max(float(conf["max_abs_diff"].max()) * 10 if len(conf) else 1e-5, 1e-5)
    ax.set_ylim(0, top)
    ax.set_xticks(range(len(combos)))
    ax.set_xticklabels([c.replace(" ", "\n", 1) for c in combos], fontsize=6.5)
    ax.set_xlim(-0.6, len(combos) - 0.4)
    ax.set_ylabel("max |out_kernel − out_emulator|")
    backends = "+".join(sorted(set(map(str, conf.get("kernel_backend", [])))))
    ax.set_title(f"Triton kernel ({backends}) vs emulator", fontsize=7)
    handles = [Line2D([], [], color="#555555", marker="o", ls="none", ms=3.5, label="non-causal"),
               Line2D([], [], color="#555555", marker="s", ls="none", ms=3.5, label="causal"),
               Line2D([], [], color="#555555", marker="o", ls="none", ms=3.5, mfc="white",
                      label="diagnostics differ (explained)"),
               Line2D([], [], color="#000000", marker="x", ls="none", ms=5, label="not explained")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, fontsize=6)
    fig.tight_layout(pad=0.4)
    return fig, figure_data(rows)
