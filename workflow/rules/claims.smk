# Statistics, figures, tables and the claims verdict (issue: the paper's claims rebuilt).
# Rules here read results/tidy/*.csv and write under figures/.
# CLAIMS_TARGETS lists every final output; the Snakefile's `rule all` asks for it.
CLAIMS_TARGETS = []
