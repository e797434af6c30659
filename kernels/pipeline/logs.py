"""Logging for the rule scripts: every rule's ``log:`` file gets its messages and its traceback.

A rule script is three lines around its work::

    from pcast.pipeline.logs import rule_log

    with rule_log(snakemake) as log:   # logging and warnings -> snakemake.log[0]
        ...                            # an exception is written to the log, then fails the job
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator

__all__ = ["setup_logging", "logged_errors", "progress", "rule_log"]

log = logging.getLogger("pcast.pipeline")


def setup_logging(log_path: str | os.PathLike | None, *, name: str = "pcast") -> logging.Logger:
    """Send the root logger (INFO) and Python warnings to ``log_path`` (truncated)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%d %H:%M:%S")
    if log_path:
        os.makedirs(os.path.dirname(os.fspath(log_path)) or ".", exist_ok=True)
        handler: logging.Handler = logging.FileHandler(log_path, mode="w", encoding="utf-8")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(fmt)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    return logging.getLogger(name)


@contextlib.contextmanager
def logged_errors() -> Iterator[None]:
    """Write any exception's traceback to the log before it propagates (and fails the job)."""
    try:
        yield
    except BaseException:
        log.exception("job failed")
        raise


@contextlib.contextmanager
def rule_log(snakemake, *, name: str | None = None) -> Iterator[logging.Logger]:
    """The rule's logger, writing to ``snakemake.log[0]``; a failure's traceback goes there too.

    ``name`` defaults to ``pcast.<rule>``.
    """
    logger = setup_logging(snakemake.log[0], name=name or f"pcast.{snakemake.rule}")
    with logged_errors():
        yield logger


def progress(message: str) -> None:
    """One plain line on stderr (it shows in the snakemake output) and in the log."""
    log.info(message)
    print(message, file=sys.stderr, flush=True)
