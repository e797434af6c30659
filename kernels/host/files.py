"""Atomic writes: every file the pipeline and the audit write appears complete under its final name, or not at all.

Each writer writes to a temporary file in the destination directory and :func:`os.replace`\\ s it
over the target, so an interrupted job never leaves a partial file under its final name.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import tempfile
from collections.abc import Iterator

__all__ = ["atomic_path", "atomic_write_text", "atomic_write_safetensors", "canonical_safetensors"]

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path next to ``path``; on success rename it over ``path``, else delete it.

    A writer killed outright (SIGKILL) cannot delete its temporary file, so temporaries left by
    an earlier writer of the same ``path`` are removed first: one job owns each output, and the
    rerun of a killed job is what finds them.
    """
    path = os.fspath(path)
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    for stale in glob.glob(os.path.join(glob.escape(d), f".{glob.escape(os.path.basename(path))}.*.tmp")):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stale)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=d)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the usual permissions
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8, newlines as given) to ``path`` through :func:`atomic_path`, fsynced."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())


def canonical_safetensors(data: bytes) -> bytes:
    """The same safetensors file with its JSON header's keys sorted, ``__metadata__``'s included: the
    writer keeps neither a dict's order nor its own from run to run, so the same tensors and metadata
    could give different bytes. The data is untouched and stays 8-byte aligned (the header padded with
    spaces, as the format allows)."""
    n = int.from_bytes(data[:8], "little")
    header = json.dumps(json.loads(data[8:8 + n]), sort_keys=True, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    return len(header).to_bytes(8, "little") + header + data[8 + n:]


def atomic_write_safetensors(path: str | os.PathLike, tensors, metadata: dict[str, str] | None = None) -> None:
    """``tensors`` (name -> torch tensor) and ``metadata`` (str -> str) as a safetensors file whose bytes
    depend only on them (:func:`canonical_safetensors`), written through :func:`atomic_path`."""
    from safetensors.torch import save  # lazy: torch-free at import

    data = canonical_safetensors(save(tensors, metadata=metadata))
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
