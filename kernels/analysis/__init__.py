"""The analysis of the tidy tables: paired statistics, the claims verdict, tables and figures.

Torch-free. Modules, in the order the pipeline uses them:

* :mod:`.registry`: the claims, their config keys and the outputs that answer them;
* :mod:`.paired`: pairing by seed, ratio CIs, Wilcoxon, t, TOST, Holm (the T1 family);
* :mod:`.summaries`: seed intervals, Δc crossings, the per-experiment summaries, ``write_csv``;
* :mod:`.policies`, :mod:`.policy_predictions`: the policies experiment's summary and its theory;
* :mod:`.fp4`, :mod:`.fp4_predictions`: the fp4 experiment's summary and its theory (:mod:`pcast.theory.fp4`);
* :mod:`.decode`: the decode experiment's statistics and its theory (:mod:`pcast.theory.decode`);
* :mod:`.dynamic`: the dynamic experiment's summary and its finding (beyond the paper, no verdict;
  :mod:`pcast.theory.dynamic`);
* :mod:`.stats`: one builder per statistics rule, from the ``statistics:`` section;
* :mod:`.tables`: T1–T6 and their LaTeX / Markdown / CSV writers; :mod:`.fp4_table`: T7; :mod:`.decode_table`: T8;
* :mod:`.plots`: F1–F13 and F14 (beyond the paper), one module per figure, one shared style;
* :mod:`.verdicts`: the verdict per claim, ``figures/claims.md`` and ``claims.json``;
* :mod:`.text`: numbers as short text, shared by verdicts, tables and plots.
"""
