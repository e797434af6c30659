"""Library code behind the Snakemake pipeline (``Snakefile``, ``workflow/``), one module per concern.

The rule scripts in ``workflow/scripts/`` are thin: each reads the ``snakemake`` object inside
``with rule_log(snakemake) as log:`` and calls one function here, so everything that matters can
be tested without Snakemake. Callers import the module they need
(``from pcast.pipeline import config``); this package re-exports nothing.

==========================  =======================================================================
module                      concern
==========================  =======================================================================
:mod:`.config`              presets merged over ``config.yaml`` (``resolve_preset``), the checks a
                            JSON schema cannot express (``check_config``, ``ConfigError``), a schema
                            error as one line naming the key (``schema_message``), the Δ
                            grid (``delta_values``), shards of seeds and what each job computes
                            (``shard_seeds``, ``n_shards``, ``shard_spec``, ``inputs_spec``,
                            ``expected_rows``, ``spec_json``), GPU jobs (``gpu_jobs``). Torch-free.
:mod:`.claims_config`       the ``statistics:`` and ``claims:`` sections against the experiments
                            (``check_analysis``: finite numbers, ordered bands, every combination,
                            scale and variant named one an experiment runs); ``config`` dispatches here.
:mod:`.plan`                the run plan before the first job: runs, shards, estimated CPU time and
                            the largest job's memory per experiment (``plan_rows``, ``format_plan``),
                            a grid too big for memory refused (``check_memory``), the per-machine
                            calibration (``calibrate``, ``load_calibration``).
:mod:`.resources`           what each job asks a cluster for, from the plan with stated factors and
                            floors (``shard_resources``, ``inputs_resources``, ``rule_resources``,
                            ``resource_table``, ``format_requests``); the local rules. Torch-free.
:mod:`.slurm`               the SLURM profile's checks against the cluster: a run bound for SLURM
                            (``bound_for_slurm``), sinfo's nodes and the refusal of a job no node can
                            hold (``parse_sinfo``, ``refusal``), squeue's jobs that cannot start
                            (``parse_squeue``, ``stuck``, ``stuck_message``), the profile's environment
                            (``SLURM_ENV``, ``slurm_env_error``). Torch-free.
:mod:`.inputs`              the Δ-free base tensors of a shard in one safetensors file
                            (``write_inputs``, ``load_inputs``, ``base_tensors``).
:mod:`.runs`                the sweeps' shard job ``run_sweep_shard`` and what the shard jobs share.
:mod:`.conformance_cases`   the experiments' calls the conformance check runs, and the covering
                            subset the Triton kernel runs (torch-free).
:mod:`.conformance_runs`    the conformance shard job, ``run_conformance_shard``.
:mod:`.policy_config`       the policies experiment's checks, specs and row count (torch-free):
                            ``check_policies``, ``resolve_policies``, ``resolve_variants``,
                            ``policy_shard_spec``, ``policy_expected_rows``; ``config`` dispatches here.
:mod:`.policy_runs`         its shard job, ``run_policies_shard`` (each distinct call once, the
                            V-cast floor once per stack and variant).
:mod:`.fp4_config`          the fp4 experiment's P casts, checks, specs and row count (torch-free):
                            ``casts``, ``cast_label``, ``check_fp4``, ``fp4_shard_spec``,
                            ``fp4_expected_rows``, ``groups_per_row``; ``config`` dispatches here.
:mod:`.fp4_runs`            its shard job, ``run_fp4_shard`` (every cast and order on a Δ stack).
:mod:`.dynamic_config`      the dynamic experiment's P casts (static S, dynamic scales), checks, spec and row
                            count (torch-free), beyond the paper; ``config`` dispatches here.
:mod:`.dynamic_runs`        its shard job, ``run_dynamic_shard`` (the fp4 shard job on its casts).
:mod:`.decode_config`       the decode experiment's configurations, checks, spec and row count (torch-free):
                            ``calls``, ``partition_cases``, ``check_decode``, ``decode_shard_spec``,
                            ``decode_expected_rows``; ``config`` dispatches here.
:mod:`.decode_runs`         its shard job, ``run_decode_shard`` (decode rows on Δ stacks, P-cast error rows).
:mod:`.tables`              fixed text form (``format_value``, ``%.10g``), CSV text and reading,
                            shard tables merged into sorted tidy tables (``merge_tidy``,
                            ``merge_timing``), the benchmark summary (``summarize_benchmarks``).
:mod:`pcast.host.files`     atomic writes (``atomic_path``, ``atomic_write_text``): an interrupted
                            job never leaves a partial file under its final name.
:mod:`.logs`                a rule's log and traceback (``rule_log``, ``setup_logging``,
                            ``logged_errors``, ``progress``).
==========================  =======================================================================

The shared names (experiments, column lists, ``combo_label``, diagnostics, shapes) live in
:mod:`pcast.contract`.
"""
