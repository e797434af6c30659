"""Triton's interpreter for CPU tensors, entered and left cleanly.

:func:`interpreting` runs every ``@triton.jit`` launch and device call inside it through the
interpreter (whatever ``TRITON_INTERPRET`` says) and puts ``triton.language`` back as it was on the
way out, so that a compilation later in the same process (``pcast.aot``) sees Triton's own
functions. :func:`interpreted` wraps one kernel for an interpreted launch.
"""

from __future__ import annotations

import contextlib
import threading

__all__ = ["interpreted", "interpreting"]


def interpreted(fn):
    """``fn`` (a ``@triton.jit`` function's Python function) as Triton's interpreter runs it."""
    from triton.runtime.interpreter import InterpretedFunction  # lazy: triton is not part of the slim install

    return InterpretedFunction(fn)


_INTERPRET_LOCK = threading.Lock()


@contextlib.contextmanager
def interpreting():
    """Run Triton's interpreter for the launches inside, whatever TRITON_INTERPRET says.

    Inside an interpreted kernel every ``@triton.jit`` callee must run interpreted too,
    including Triton's own standard library (``tl.sum``, ``tl.max``, ...), which was
    created as compiled ``JITFunction`` objects when triton was imported. So, for the
    duration, calling a ``JITFunction`` runs its interpreted twin.
    """
    import triton  # lazy: triton is not part of the slim install
    from triton.runtime.jit import JITFunction  # lazy: triton is not part of the slim install

    with _INTERPRET_LOCK:
        original_call = JITFunction.__call__
        previous = triton.knobs.runtime.interpret
        saved = _language_attributes()
        JITFunction.__call__ = lambda self, *args, **kwargs: interpreted(self.fn)(*args, **kwargs)
        triton.knobs.runtime.interpret = True
        try:
            yield
        finally:
            JITFunction.__call__ = original_call
            triton.knobs.runtime.interpret = previous
            _restore_language_attributes(saved)


def _language_attributes() -> list:
    """The attributes of ``triton.language``'s modules and tensor classes, to put back after interpreting.

    The interpreter patches them while a kernel runs, and puts back what a launch patched; but each
    call of an interpreted device function (a ``@triton.jit`` helper, ``tl.max`` and the rest of
    Triton's standard library) patches the modules its globals name, ``triton.language.core``
    among them, and never puts them back. Left so, a later compilation in the same process sees the
    interpreter's functions and fails ("'value' object has no attribute 'dtype'").
    """
    import triton.language as tl  # lazy: triton is not part of the slim install

    owners = (tl, tl.core, tl.math, tl.standard, tl.core.tensor, tl.core.tensor_descriptor_base)
    return [(obj, dict(vars(obj))) for obj in owners]


def _restore_language_attributes(saved: list) -> None:
    """Every saved attribute back to its saved value; on the tensor classes, the attributes the
    interpreter added are removed too (on the modules they are the interpreter's own globals, which
    its cached rewrites of Triton's library functions go on reading, so they stay)."""
    for obj, attrs in saved:
        now = vars(obj)
        if isinstance(obj, type):
            for name in [n for n in now if n not in attrs]:
                delattr(obj, name)
        for name, value in attrs.items():
            if now.get(name, _MISSING) is not value:
                setattr(obj, name, value)


_MISSING = object()
