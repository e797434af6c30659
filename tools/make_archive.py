"""Source archive of one commit, with a SHA-256 checksum of every file in it.

    python tools/make_archive.py                 # HEAD -> dist/pcast-fp8-<version>.tar.gz
    python tools/make_archive.py --rev v0.1.0 --out /tmp/release

Writes, for the commit ``--rev`` (git-tracked files only, never the working tree's edits):

* ``<name>.tar.gz``: every file of the commit under the folder ``<name>/``, with ``<name>/SHA256SUMS``
  (``sha256sum -c SHA256SUMS`` checks an unpacked copy; symbolic links are listed by their target
  text, as ``sha256sum`` does not follow them, under ``# link``);
* ``<name>.SHA256SUMS``: the same list beside the archive, and ``<name>.tar.gz.sha256`` the
  archive's own checksum.

The archive is byte-identical for the same commit: entries sorted, owner 0, times the commit's,
gzip header without a time stamp. ``<name>`` is ``pcast-fp8-<version>`` (version from the commit's
pyproject.toml) unless ``--name`` says otherwise.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _git(repo: Path, *args: str, data: bytes | None = None) -> bytes:
    return subprocess.run(["git", *args], cwd=repo, input=data, check=True, capture_output=True).stdout


def tracked(repo: Path, rev: str) -> list[tuple[str, str, bytes]]:
    """(path, git mode, bytes) of every file of commit ``rev``, sorted by path."""
    listing = _git(repo, "ls-tree", "-r", "-z", "--full-tree", rev).decode().split("\0")
    entries = []
    for line in filter(None, listing):
        meta, path = line.split("\t", 1)
        mode, kind, obj = meta.split()
        if kind != "blob":  # a submodule's commit holds no files of this repository
            continue
        entries.append((path, mode, _git(repo, "cat-file", "blob", obj)))
    return sorted(entries)


def checksums(entries) -> str:
    """``sha256sum`` lines (two spaces, path) for the files; links apart, after ``# link``."""
    files = [f"{hashlib.sha256(b).hexdigest()}  {p}" for p, mode, b in entries if mode != "120000"]
    links = [f"# link {p} -> {b.decode()}" for p, mode, b in entries if mode == "120000"]
    return "\n".join(files + links) + "\n"


def _info(name: str, mode: str, size: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "", ""
    info.mode = 0o755 if mode == "100755" else 0o644
    info.size = size
    return info


def archive_bytes(entries, prefix: str, sums: str, mtime: int) -> bytes:
    """A gzipped tar of the entries under ``prefix/`` plus ``prefix/SHA256SUMS``, reproducibly."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, mode, data in [*entries, ("SHA256SUMS", "100644", sums.encode())]:
            info = _info(f"{prefix}/{path}", mode, len(data), mtime)
            if mode == "120000":
                info.type, info.linkname, info.size = tarfile.SYMTYPE, data.decode(), 0
                tar.addfile(info)
            else:
                tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="") as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def make_archive(repo: Path, rev: str, out_dir: Path, name: str | None = None) -> dict[str, Path]:
    """Write the archive and its checksum lists; return their paths."""
    repo = Path(repo)
    entries = tracked(repo, rev)
    if name is None:
        version = tomllib.loads(_git(repo, "show", f"{rev}:pyproject.toml").decode())["project"]["version"]
        name = f"pcast-fp8-{version}"
    mtime = int(_git(repo, "show", "-s", "--format=%ct", rev).decode())
    sums = checksums(entries)
    data = archive_bytes(entries, name, sums, mtime)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"archive": out_dir / f"{name}.tar.gz", "sums": out_dir / f"{name}.SHA256SUMS",
             "archive_sum": out_dir / f"{name}.tar.gz.sha256"}
    paths["archive"].write_bytes(data)
    paths["sums"].write_text(sums)
    paths["archive_sum"].write_text(f"{hashlib.sha256(data).hexdigest()}  {paths['archive'].name}\n")
    return paths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", default="HEAD", help="the commit to archive (default HEAD)")
    ap.add_argument("--out", default=str(ROOT / "dist"), help="output folder (default dist/)")
    ap.add_argument("--name", default=None, help="archive and folder name (default pcast-fp8-<version>)")
    ap.add_argument("--repo", default=str(ROOT), help="the git checkout (default this one)")
    args = ap.parse_args(argv)
    try:
        paths = make_archive(Path(args.repo), args.rev, Path(args.out), args.name)
    except subprocess.CalledProcessError as e:
        print(f"make_archive: git {' '.join(e.cmd[1:])} failed: {e.stderr.decode().strip()}", file=sys.stderr)
        return 2
    dirty = _git(Path(args.repo), "status", "--porcelain", "--untracked-files=no").strip()
    if dirty and args.rev == "HEAD":
        print("make_archive: uncommitted changes are not in the archive (it holds the commit)", file=sys.stderr)
    for p in paths.values():
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
