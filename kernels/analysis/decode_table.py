"""T8 (rule table_decode): the decode experiment per configuration, and the partition-normalised P's error.

One row per configuration (sink kind x splits x layout x order x P normalisation x S, and each decode preset) of
``results/stats/decode.csv``: the mean non-sink underflow fraction at the Δ of the grid nearest
``claims.decode.delta`` with the theory's, the measured Δc with its bootstrap CI and the theory's (or where
the curve is: ``never`` below the crossing level, ``always`` at or above it), and their difference. Then one
row per (partition keys n, S) of ``decode_partition.csv``: the relative RMS error of the cast with its CI and
the closed form.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from pcast.analysis.decode import CONFIG_KEYS
from pcast.analysis.policies import require
from pcast.analysis.tables import Table
from pcast.analysis.text import short

__all__ = ["decode"]


def _dc(status: str, v: float, lo: float = np.nan, hi: float = np.nan) -> str:
    if status != "cross":
        return status
    return f"{short(v, 4)} [{short(lo, 4)}, {short(hi, 4)}]" if np.isfinite(lo) else short(v, 4)


def decode(summary: pd.DataFrame, curves: pd.DataFrame, partition: pd.DataFrame, stats_cfg: Mapping,
           decode_cfg: Mapping) -> Table:
    """T8 (module docstring)."""
    require(stats_cfg, "statistics", ("crossing_level", "confidence_level"))
    require(decode_cfg, "claims.decode", ("delta",))
    grid = np.sort(curves["delta"].unique().astype(float))
    at = float(grid[np.argmin(np.abs(grid - float(decode_cfg["delta"])))])
    here = curves[np.isclose(curves["delta"].to_numpy(float), at)].set_index(CONFIG_KEYS)
    data = summary.copy()
    keys = [tuple(r) for r in data[CONFIG_KEYS].itertuples(index=False)]
    data["delta"] = at
    data["underflow_frac"] = [float(here.loc[k, "underflow_frac_mean"]) for k in keys]
    data["underflow_theory"] = [float(here.loc[k, "theory"]) for k in keys]
    rows = [{"policy": r["policy"], "sink": r["kind"], "splits": int(r["num_splits"]),
             "layout": r["split_layout"] if int(r["num_splits"]) > 1 else "—", "order": r["order"],
             "P": r["p_normalize"], "S": f"{float(r['scale']):g}",
             f"underflow at Δ={at:g} (theory)": f"{r['underflow_frac']:.4f} ({r['underflow_theory']:.4f})",
             "Δc measured [CI]": _dc(r["status_meas"], r["dc_meas"], r["dc_lo"], r["dc_hi"]),
             "Δc theory": _dc(r["status_pred"], r["dc_pred"]),
             "difference": short(r["dc_miss"], 3) if np.isfinite(r["dc_miss"]) else "—"}
            for _, r in data.iterrows()]
    for _, r in partition.iterrows():
        rows.append({"policy": "-", "sink": "none", "splits": 1, "layout": "—", "order": "—", "P": f"partition n={int(r['n'])}",
                     "S": f"{float(r['scale']):g}",
                     f"underflow at Δ={at:g} (theory)": f"rel. RMS {float(r['rel_rms']):.4f} "
                                                         f"[{short(r['rel_rms_lo'], 4)}, {short(r['rel_rms_hi'], 4)}]",
                     "Δc measured [CI]": "—", "Δc theory": f"rel. RMS {float(r['theory']):.4f}",
                     "difference": f"{float(r['rel_diff']):+.1%}"})
    part = partition.assign(kind="partition-error")
    level = float(stats_cfg["crossing_level"])
    caption = (f"T8. Decode rows (Nq = 1 over n keys; decode experiment): mean non-sink underflow fraction at Δ = "
               f"{at:g} with pcast.theory.decode's in parentheses; Δc where the mean over rows crosses {level:g} "
               f"(bootstrap-over-rows {stats_cfg['confidence_level']:g} CI), the theory's, and measured minus "
               "theory. Last rows: relative RMS error of a partition-normalised P cast (pooled over seeds, "
               "bootstrap CI) against its closed form (pcast.theory.decode.partition_rms_error).")
    return Table(pd.DataFrame(rows), pd.concat([data, part], ignore_index=True), caption, "tab:decode")
