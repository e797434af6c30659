"""Why a black box is not the declared policy, claiming no more than the probes support.

:func:`diagnose` runs the option search (:data:`pcast.probes.fingerprint.PARAM_GRID`) from the declared policy
and stops at the first option set that passes the criterion (:func:`pcast.probes.check_policy`). When one does,
each option it moved away from the declared value (and that the probes see: putting the declared value back
leaves more rows outside) is named with its confidence: 1 when exactly one value of its grid passes with the
other options there, 1/k when k values do. When none does, the kernel is outside the model: no option set of
the contract reproduces its rows, and the best distance found is given with the nearest option set, at
confidence 0.

Used by :func:`pcast.probes.assert_policy`; :func:`pcast.probes.fingerprint` states the same words
(:data:`pcast.probes.expect.OUTSIDE`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pcast.policies import Policy
from pcast.probes.expect import OUTSIDE
from pcast.probes.fingerprint import PARAM_GRID, moved_policy, explain

__all__ = ["Diagnosis", "diagnose", "OUTSIDE", "single_changes", "SINGLE_OPTIONS"]

#: The options a single change moves, nearest first (the decode options need a decode kernel's splits).
SINGLE_OPTIONS = ("order", "scale", "scale_mode", "block_n", "rescale_threshold", "rowsum", "fmt", "sink_mode")



def _g(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Diagnosis:
    """The option search's end (``end``) from ``declared``; ``outside``: no option set passed, with
    ``rows_outside`` of ``rows`` at the nearest one found; ``options``: ``(name, kernel's value, declared
    value, grid values that pass)`` for each option named (when outside: the options of the nearest set that
    differ from the declared ones, which no grid value makes pass, so their confidence is 0)."""

    declared: Policy
    end: Policy
    outside: bool
    rows_outside: int
    rows: int
    options: tuple = ()

    @property
    def distance(self) -> float:
        return self.rows_outside / self.rows if self.rows else 0.0

    def text(self) -> str:
        """``the kernel looks like scale = 1 (confidence 1); declared 256``, the outside-the-model line, or ''."""
        if self.outside:
            near = ", ".join(f"{n} = {_g(v)}" for n, v, _, _ in self.options)
            at = f" ({near}; confidence 0: it does not pass either)" if near else ""
            return (f"{OUTSIDE} (best distance {self.distance:.3g}: the nearest option set the search found{at} "
                    f"leaves {self.rows_outside} of {self.rows} rows outside)")
        if not self.options:
            return ""
        looks = ", ".join(f"{n} = {_g(v)} (confidence {1.0 / len(ok):.2g}"
                          + (f"; matching: {', '.join(map(_g, ok))}" if len(ok) > 1 else "") + ")"
                          for n, v, _, ok in self.options)
        return f"the kernel looks like {looks}; declared {', '.join(_g(w) for _, _, w, _ in self.options)}"


def single_changes(policy: Policy):
    """``(option, value, policy with that one option changed)`` for every value of
    :data:`pcast.probes.fingerprint.PARAM_GRID` of each option of :data:`SINGLE_OPTIONS` other than the policy's
    own, skipping option sets the contract refuses."""
    for name in SINGLE_OPTIONS:
        for value in PARAM_GRID[name]:
            if value == getattr(policy, name):
                continue
            try:
                yield name, value, moved_policy(policy, name, value)
            except ValueError:
                continue


def diagnose(declared: Policy, scorer, allow: float) -> Diagnosis:
    """The :class:`Diagnosis` of a black box (its ``scorer``, :class:`pcast.probes.fingerprint.Scorer`) that
    fails ``declared`` at ``allow``."""
    end = scorer.search(declared, allow)
    chk = scorer.check(end, allow)
    if not chk.passed:
        moved = tuple((n, v, w, ()) for n, (v, w) in explain(declared, end).items())
        return Diagnosis(declared, end, True, chk.outside, chk.rows, moved)
    named = tuple((n, v, w, scorer.matching(end, n, allow)) for n, (v, w) in explain(declared, end, scorer).items())
    return Diagnosis(declared, end, False, chk.outside, chk.rows, named)
