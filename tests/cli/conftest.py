"""Fixtures of the command-line tests: ``no_work``, for the audit's checks of bad input before any work."""

import pytest


@pytest.fixture()
def no_work(monkeypatch):
    """Any attention call (the work) fails the test: the errors the test expects must come first. The names are
    patched where the audit calls them."""
    import pcast.api
    import pcast.audit.heads
    import pcast.audit.kernel

    def fail(*a, **kw):
        pytest.fail("the audit started work")

    for mod, name in ((pcast.api, "attention"), (pcast.audit.heads, "attention"),
                      (pcast.audit.heads, "attention_calls"), (pcast.audit.kernel, "attention")):
        monkeypatch.setattr(mod, name, fail)
