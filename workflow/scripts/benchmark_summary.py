"""Print the per-step runtime table (Markdown) from the benchmark files of the last run.

A utility, not a rule. Usage, after a run:  python workflow/scripts/benchmark_summary.py [results/benchmarks]
"""

import sys

from pcast.pipeline.tables import summarize_benchmarks

if __name__ == "__main__":
    print(summarize_benchmarks(sys.argv[1] if len(sys.argv) > 1 else "results/benchmarks"), end="")
