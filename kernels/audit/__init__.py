"""The audit: your own q, k, v (or your own kernel) through your P-cast policy, measured head by head.

The command line is :mod:`pcast.cli.audit` (``pcast-audit``); this package is the work behind it.
Modules: :mod:`pcast.audit.settings` (the audit's settings, one frozen value built once from the flags or
:func:`pcast.audit.kernel.audit_kernel`'s keywords, every check before any work), :mod:`pcast.audit.kernel` (your kernel itself beside its policy's prediction),
:mod:`pcast.audit.flags` (your policy from its flags, ``--fail-on``, the log2-offset warning),
:mod:`pcast.audit.files` (files, layers, layout, policies, checks, estimate), :mod:`pcast.audit.heads`
(runs, rows, ksink detection, worst head), :mod:`pcast.audit.measure` (per-head measures),
:mod:`pcast.audit.verdicts` (what each verdict means, per head and pooled),
:mod:`pcast.audit.report` (verdicts, summary, gate, JSON; the schema :data:`pcast.audit.report.SCHEMA_PATH`)
and :mod:`pcast.audit.session` (a run start to end: checks, layers, runs, the printed report).
User guide: docs/audit.md.
"""

from pcast.audit.files import LAYOUTS, check_tensors, load_layers, load_policies, load_tensors, resolve_policies
from pcast.audit.heads import (COLUMNS, PER_HEAD_COLUMNS, WORST_HEAD_COMBOS, audit, audit_heads, detect_head_sinks,
                               head_scores64, leading_ksink, plan_runs, worst_head)
from pcast.audit.kernel import KernelAudit, KernelHead, audit_kernel
from pcast.audit.report import SCHEMA_PATH
from pcast.audit.settings import AUDIT_BACKENDS, AuditSettings, audit_settings, load_kernel
from pcast.audit.verdicts import head_verdicts, pooled_lines

__all__ = ["COLUMNS", "PER_HEAD_COLUMNS", "WORST_HEAD_COMBOS", "AUDIT_BACKENDS", "LAYOUTS", "SCHEMA_PATH", "audit",
           "audit_heads", "detect_head_sinks", "head_scores64", "leading_ksink", "plan_runs", "worst_head",
           "head_verdicts", "pooled_lines", "audit_kernel", "KernelAudit", "KernelHead", "load_kernel", "check_tensors", "load_layers", "load_policies",
           "load_tensors", "resolve_policies", "AuditSettings", "audit_settings"]
