# Config validation, constants and output helpers for workflow/rules/claims.smk (no rules here).

from snakemake.utils import validate

validate(config, "../schemas/claims.schema.yaml")

STATS = config["statistics"]
CLAIMS = config["claims"]
TIDY = "results/tidy/{}.csv"
STATS_DIR = "results/stats"
CLAIMS_LOGS = "results/logs/claims"
CLAIMS_BENCH = "results/benchmarks/claims"

# Report categories: one per claim (or group of claims an output answers).
CLAIM_CATEGORY = {
    "fig_theory_scale": "C3 · S = 256",
    "table_scales": "C3 · S = 256",
    "fig_collapse": "C1, C2 · underflow law, reverse order",
    "fig_mse": "C5 · MSE improvement",
    "fig_improvement": "C5 · MSE improvement",
    "table_paired_tests": "C5, C6 · paired tests",
    "fig_threshold": "C4 · threshold Δc",
    "table_thresholds": "C4 · threshold Δc",
    "fig_conformance": "Kernel conformance",
    "table_conformance": "Kernel conformance",
    "claims": "Claims verdict",
}
FIGURES = [
    "fig_theory_scale",
    "fig_collapse",
    "fig_mse",
    "fig_improvement",
    "fig_threshold",
    "fig_conformance",
]
TABLES = ["table_paired_tests", "table_scales", "table_thresholds", "table_conformance"]


def figure_outputs(name):
    """PDF for the paper, PNG for the report (captioned, grouped by claim), data CSV beside them."""
    return {
        "pdf": f"figures/{name}.pdf",
        "png": report(
            f"figures/{name}.png",
            caption=f"../report/{name}.rst",
            category=CLAIM_CATEGORY[name],
            labels={"output": name, "kind": "figure"},
        ),
        "csv": f"figures/{name}.csv",
    }


def table_outputs(name):
    """CSV (shown in the report), LaTeX booktabs and Markdown."""
    return {
        "csv": report(
            f"figures/{name}.csv",
            caption=f"../report/{name}.rst",
            category=CLAIM_CATEGORY[name],
            labels={"output": name, "kind": "table"},
        ),
        "tex": f"figures/{name}.tex",
        "md": f"figures/{name}.md",
    }


CLAIMS_TARGETS = (
    [f"figures/{n}.{ext}" for n in FIGURES for ext in ("pdf", "png", "csv")]
    + [f"figures/{n}.{ext}" for n in TABLES for ext in ("csv", "tex", "md")]
    + ["figures/claims.md", "figures/claims.json"]
)
