"""The audit's settings: one frozen, typed value built once, by :func:`audit_settings`, from the command line's
flags (:mod:`pcast.cli.audit`) or from :func:`pcast.audit.kernel.audit_kernel`'s keywords.

Every check runs here, before any work, and each error names the flag (or, from Python, the keyword) and what is
allowed. The modules of :mod:`pcast.audit` read what they need from the :class:`AuditSettings` they are given.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

from pcast.api_inputs import as_policy
from pcast.audit.files import file_dtype, resolve_policies
from pcast.audit.flags import declared, parse_fail_on, yours
from pcast.contract import PV_ARITHS
from pcast.emulator.tensorcore import PV_FORMATS
from pcast.policies import Policy

__all__ = ["AuditSettings", "audit_settings", "load_kernel", "AUDIT_BACKENDS"]

#: The backends ``--backend`` accepts (the float64 reference is every row's baseline, not a row).
AUDIT_BACKENDS = ("auto", "triton", "emulator")

#: How :func:`pcast.audit.kernel.audit_kernel` names the settings it takes, where its keyword differs from the field.
_API_NAMES = {"kernel_allow": "allow", "kernel_policy": "policy"}


@dataclass(frozen=True)
class AuditSettings:
    """What one audit runs and how it judges, checked. ``policy`` is your policy (``yours``, from its flags;
    ``declared``: whether any of them was given), ``policies`` the named ones (``--policy``, ``--policies``),
    ``combos`` whether the four reference combinations run; ``fail_on`` the gate's conditions as
    ``((word, bound or None), ...)`` (with a kernel, ``mismatch`` is among them unless ``report_mismatch``);
    ``kernel_fn`` the callable of ``--kernel``, ``kernel_policy`` the policy declared for it (None: fingerprinted)
    and ``input_dtype`` the dtype the kernel is given (the file's); ``pv_arith`` and ``pv_promote`` the tensor
    core's P·V arithmetic of your policy's run and the kernel's prediction (:attr:`pv_options`)."""

    inputs: str | None = None
    layers: tuple = ()
    layout: str | None = None
    causal: bool = False
    causal_align: str | None = None
    ksink: int | str = 1
    sm_scale: float | None = None
    sink_logit: Any = None
    backend: str = "auto"
    per_head: bool = False
    quiet: bool = False
    csv: str | None = None
    json: str | None = None
    policy: Policy | None = None
    declared: bool = False
    scale_given: bool = False
    policies: tuple = ()
    combos: bool = True
    collapse_threshold: float = 0.5
    collapse_mass: float = 0.01
    floor_factor: float = 2.0
    fail_on: tuple = ()
    kernel: str | None = None
    kernel_fn: Callable | None = None
    kernel_policy: Policy | None = None
    kernel_allow: float = 0.02
    report_mismatch: bool = False
    input_dtype: Any = None
    pv_arith: str = "fp32"
    pv_promote: int = 0

    @property
    def pv_options(self) -> dict:
        """The P·V arithmetic of your policy's run and of the kernel's prediction, as keywords of
        :func:`pcast.attention` (``{}`` for float32 P·V; else ``pv_arith``, ``pv_promote`` and the emulator, the
        one backend that models a tensor core)."""
        if self.pv_arith == "fp32":
            return {}
        return {"pv_arith": self.pv_arith, "pv_promote": self.pv_promote, "backend": "emulator"}

    @property
    def bounds(self) -> dict:
        """``{condition: its tightest bound}`` of the conditions of ``fail_on`` that have one."""
        return {w: min(b for v, b in self.fail_on if v == w) for w, b in self.fail_on if b is not None}

    @property
    def rel_mse_bound(self) -> float | None:
        return self.bounds.get("rel-mse")

    @property
    def measure(self) -> bool:
        """Whether the per-head measures run: for ``per_head``, ``json`` and the gates that read the lost mass."""
        return self.per_head or self.json is not None or any(w in ("collapse", "mass-underflow")
                                                             for w, _ in self.fail_on)


def _check_path(path, flag) -> None:
    """--csv and --json must be writable: checked before any work, so a long run is never lost to a bad path."""
    if path is None:
        return
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ValueError(f"{flag}={path!r} is a directory; allowed: a file path in a writable directory")
    if not os.path.isdir(parent):
        raise ValueError(f"{flag}={path!r}: directory {parent!r} does not exist; allowed: a file path in a "
                         "writable directory")
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise ValueError(f"{flag}={path!r} is not writable; allowed: a file path in a writable directory")


def _ksink(value):
    """--ksink: ``"auto"`` or an int (its range is checked against N once the tensors are read)."""
    text = str(value).strip()
    if text.lower() == "auto":
        return "auto"
    try:
        return int(text, 10)
    except ValueError:
        raise ValueError(f"--ksink={value!r} is not allowed; allowed: an integer 0 <= ksink < N (the number of "
                         "keys), or auto") from None


def _check_numbers(kw: Mapping, name) -> None:
    if kw["backend"] not in AUDIT_BACKENDS:
        raise ValueError(f"{name('backend')}={kw['backend']!r} is not allowed; allowed: {', '.join(AUDIT_BACKENDS)} "
                         "(the float64 reference is what every row is measured against)")
    sm = kw["sm_scale"]
    if sm is not None and not (math.isfinite(sm) and sm > 0):
        raise ValueError(f"{name('sm_scale')}={sm!r} is not allowed; allowed: a finite number > 0")
    _check_path(kw["csv"], name("csv"))
    _check_path(kw["json"], name("json"))
    sl = kw["sink_logit"]
    if isinstance(sl, (int, float)) and not math.isfinite(sl):
        raise ValueError(f"{name('sink_logit')}={sl!r} is not allowed; allowed: a finite number")
    if not 0.0 <= kw["collapse_threshold"] < 1.0:
        raise ValueError(f"{name('collapse_threshold')}={kw['collapse_threshold']!r} is not allowed; allowed: "
                         "0 <= x < 1")
    if not (math.isfinite(kw["floor_factor"]) and kw["floor_factor"] >= 1.0):
        raise ValueError(f"{name('floor_factor')}={kw['floor_factor']!r} is not allowed; allowed: a finite "
                         "number >= 1")
    if not 0.0 <= kw["collapse_mass"] < 1.0:
        raise ValueError(f"{name('collapse_mass')}={kw['collapse_mass']!r} is not allowed; allowed: 0 <= x < 1")


def load_kernel(spec: str):
    """The callable named by ``MODULE:FN`` (an importable module, or a ``.py`` file's path) or ValueError naming
    ``--kernel`` and what is allowed."""
    allowed = "MODULE:FN (an importable module, or path/to/file.py, and a callable in it)"
    module, sep, name = str(spec).rpartition(":")
    if not sep or not module or not name.isidentifier():
        raise ValueError(f"--kernel={spec!r} is not allowed; allowed: {allowed}")
    try:
        if module.endswith(".py"):
            if not os.path.isfile(module):
                raise ValueError(f"--kernel={spec!r}: no file {module!r}; allowed: {allowed}")
            found = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(module))[0], module)
            mod = importlib.util.module_from_spec(found)
            found.loader.exec_module(mod)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            mod = importlib.import_module(module)
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever the user's module raises is reported, named
        raise ValueError(f"--kernel={spec!r}: importing {module!r} raised {type(e).__name__}: {e}") from e
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise ValueError(f"--kernel={spec!r}: {module!r} has no callable {name!r}; allowed: {allowed}")
    return fn


def _kernel_fail_on(kw: Mapping, fail_on: list, name) -> list:
    """``--kernel`` and what goes with it: ``--fail-on mismatch`` and ``--report-mismatch`` need it (and exclude
    each other); the callable takes no score scale. With a kernel, ``mismatch`` is gated unless
    ``--report-mismatch`` asks otherwise. Returns the conditions."""
    has_kernel = kw["kernel"] is not None or kw["kernel_fn"] is not None
    asked = any(w == "mismatch" for w, _ in fail_on)
    if asked and not has_kernel:
        raise ValueError("--fail-on mismatch needs --kernel MODULE:FN; allowed: --kernel with it, or another condition")
    if kw["report_mismatch"] and not has_kernel:
        raise ValueError("--report-mismatch needs --kernel MODULE:FN; allowed: --kernel with it, or neither")
    if kw["report_mismatch"] and asked:
        raise ValueError("--report-mismatch is not allowed with --fail-on mismatch; allowed: one of them (with "
                         "--kernel, mismatch is gated unless --report-mismatch is given)")
    if not has_kernel:
        return fail_on
    if not asked and not kw["report_mismatch"]:
        fail_on = fail_on + [("mismatch", None)]
    if kw["sm_scale"] is not None:
        raise ValueError(f"{name('sm_scale')} is not allowed with --kernel; allowed: the default 1/sqrt(d), the "
                         "score scale of the probes' callable convention")
    if kw["causal"] and kw["causal_align"] == "top_left":
        raise ValueError(f"{name('causal_align')} top_left is not allowed with --kernel; allowed: bottom_right, the "
                         "mask the probes' callable convention applies")
    allow = kw["kernel_allow"]
    if isinstance(allow, bool) or not isinstance(allow, (int, float)) or not (math.isfinite(allow) and 0 <= allow < 1):
        raise ValueError(f"{name('kernel_allow')}={allow!r} is not allowed; allowed: a fraction in [0, 1)")
    return fail_on


def _kernel_policy(kw: Mapping, mine, is_declared: bool, policies: list):
    """The policy the kernel is declared to implement: ``kernel_policy`` as given (Python), else your policy when
    its flags were given, else the one named policy; None (fingerprinted) when nothing is declared."""
    if kw["kernel_policy"] is not None:
        return as_policy(kw["kernel_policy"])
    if kw["kernel"] is None and kw["kernel_fn"] is None:
        return None
    if is_declared:
        return mine
    if len(policies) == 1:
        return policies[0]
    if policies:
        raise ValueError(f"--kernel with {len(policies)} named policies: which one does the kernel implement? "
                         "allowed: one --policy NAME, your policy's flags, or neither (then it is fingerprinted)")
    return None


def _pv_promote(value, name) -> int:
    """--pv-promote: an int >= 0, given as an int (Python) or its text (the command line)."""
    try:
        n = int(str(value).strip(), 10) if isinstance(value, str) else value
    except ValueError:
        n = None
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"{name('pv_promote')}={value!r} is not allowed; allowed: an int >= 0 (0: never promoted)")
    return n


def _check_pv(kw: Mapping, name, targets) -> int:
    """``pv_arith`` and ``pv_promote`` against the runs they apply to (``targets``: ``[(who, Policy)]``, your
    policy's and the kernel's declared one), as :func:`pcast.attention` would check them at run time; returns the
    promotion interval."""
    pv, promote = kw["pv_arith"], _pv_promote(kw["pv_promote"], name)
    if pv not in PV_ARITHS:
        raise ValueError(f"{name('pv_arith')}={pv!r} is not allowed; allowed: {', '.join(PV_ARITHS)}")
    if pv == "fp32":
        if promote:
            raise ValueError(f"{name('pv_promote')}={promote!r} is not allowed without {name('pv_arith')} (float32 "
                             f"P·V has no narrow accumulator); allowed: 0, or {name('pv_arith')} with a tensor core's "
                             "arithmetic")
        return promote
    bad = f"{name('pv_arith')}={pv!r} is not allowed"
    if kw["backend"] == "triton":
        raise ValueError(f"{bad} with {name('backend')} triton (the Triton interpreter has no FP8 tensor core); "
                         f"allowed: {name('backend')} emulator, or auto (the run then takes the emulator)")
    if (kw["kernel"] is not None or kw["kernel_fn"] is not None) and kw["kernel_checked"] is None:
        raise ValueError(f"{bad} with a fingerprinted kernel; allowed: a declared policy for the kernel (your "
                         "policy's flags, or policy= from Python)")
    for who, pol in targets:
        for field in ("fmt", "v_fmt"):
            got = getattr(pol, field)
            got = getattr(got, "name", got)
            if got not in PV_FORMATS:
                raise ValueError(f"{bad} with {who} {name(field)} {got or 'none'} (the MMA's operands are FP8); "
                                 f"allowed: {name(field)} {' or '.join(PV_FORMATS)} with it")
        if pol.block_n % 32:
            raise ValueError(f"{bad} with {who} {name('block_n')} {pol.block_n}; allowed: a multiple of 32 with it")
        if pol.num_splits > 1 or pol.p_normalize == "partition":
            raise ValueError(f"{bad} with {who} split decode ({name('num_splits')} {pol.num_splits}, "
                             f"{name('p_normalize')} {pol.p_normalize}); allowed: one split with online normalisation")
    return promote


_DEFAULTS = {"inputs": None, "layers": (), "layout": None, "causal": False, "causal_align": None, "ksink": "1",
             "sm_scale": None, "sink_logit": None, "backend": "auto", "per_head": False, "quiet": False, "csv": None,
             "json": None, "policy_flags": None, "exp2_offset": None, "policies": (), "policies_file": None,
             "only_yours": False, "collapse_threshold": 0.5, "collapse_mass": 0.01, "floor_factor": 2.0,
             "fail_on": (), "kernel": None, "kernel_fn": None, "kernel_policy": None, "kernel_allow": 0.02,
             "report_mismatch": False, "pv_arith": "fp32", "pv_promote": 0}


def audit_settings(*, api: bool = False, **keywords) -> AuditSettings:
    """The :class:`AuditSettings` of one audit, every value checked before any work; ValueError naming the flag
    (``api``: the keyword of :func:`pcast.audit.kernel.audit_kernel`) and what is allowed.

    Keywords (the command line's flags, and their defaults): ``inputs``, ``layers``, ``layout``, ``causal``,
    ``causal_align``, ``ksink`` (``"1"``: an int or ``auto``), ``sm_scale``, ``sink_logit``, ``backend``,
    ``per_head``, ``quiet``, ``csv``, ``json``, ``policy_flags`` (your policy's flags as given: ``{field: text or
    None}``), ``exp2_offset``, ``policies`` (names), ``policies_file``, ``only_yours``, ``collapse_threshold``,
    ``collapse_mass``, ``floor_factor``, ``fail_on`` (the conditions' texts), ``kernel`` (``MODULE:FN``) or
    ``kernel_fn`` (the callable), ``kernel_policy`` (the policy declared for it: a name, a dict or a Policy),
    ``kernel_allow``, ``report_mismatch``, ``pv_arith`` and ``pv_promote`` (the P·V arithmetic of your policy's run
    and the kernel's prediction, :func:`pcast.attention`'s call options; the other runs stay in float32)."""
    unknown = sorted(set(keywords) - set(_DEFAULTS))
    if unknown:
        raise TypeError(f"audit_settings() got unknown keywords {unknown}; allowed: {', '.join(_DEFAULTS)}")
    kw = {**_DEFAULTS, **keywords}

    def name(field: str) -> str:
        return _API_NAMES.get(field, field) if api else "--" + field.replace("_", "-")

    ksink = _ksink(kw["ksink"])
    _check_numbers(kw, name)
    fail_on = parse_fail_on(kw["fail_on"])
    combos = not kw["only_yours"]
    if any(w == "ratio" for w, _ in fail_on) and not combos:
        raise ValueError("--fail-on ratio>X needs the four reference combinations; allowed: without --only yours / "
                         "--no-reference-combos")
    fail_on = _kernel_fail_on(kw, fail_on, name)
    texts = dict(kw["policy_flags"] or {})
    mine = yours(texts, kw["exp2_offset"])
    is_declared = declared(texts, kw["exp2_offset"])
    policies = resolve_policies(kw["policies"], kw["policies_file"])  # bad names fail here, before any work
    kernel_policy = _kernel_policy(kw, mine, is_declared, policies)
    targets = ([] if api else [("your policy's", mine)]) + ([] if kernel_policy is None else
                                                             [("the kernel's declared policy's", kernel_policy)])
    promote = _check_pv({**kw, "kernel_checked": kernel_policy}, name, targets)
    fn = kw["kernel_fn"] if kw["kernel"] is None else load_kernel(kw["kernel"])
    dtype = file_dtype(kw["inputs"]) if fn is not None and kw["inputs"] is not None else None
    return AuditSettings(
        inputs=kw["inputs"], layers=tuple(kw["layers"]), layout=kw["layout"], causal=bool(kw["causal"]),
        causal_align=kw["causal_align"], ksink=ksink, sm_scale=kw["sm_scale"], sink_logit=kw["sink_logit"],
        backend=kw["backend"], per_head=bool(kw["per_head"]), quiet=bool(kw["quiet"]), csv=kw["csv"],
        json=kw["json"], policy=mine, declared=is_declared, scale_given=texts.get("scale") is not None,
        policies=tuple(policies), combos=combos, collapse_threshold=kw["collapse_threshold"],
        collapse_mass=kw["collapse_mass"], floor_factor=kw["floor_factor"], fail_on=tuple(fail_on),
        kernel=kw["kernel"], kernel_fn=fn, kernel_policy=kernel_policy, kernel_allow=float(kw["kernel_allow"]),
        report_mismatch=bool(kw["report_mismatch"]), input_dtype=dtype, pv_arith=kw["pv_arith"], pv_promote=promote)
