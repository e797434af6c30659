"""Copy this checkout for tests that run Snakemake, so the working tree is never touched."""

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def copy_repo(dest: Path) -> Path:
    """Copy the working tree's tracked and untracked-but-not-ignored files (what a commit would
    hold), symbolic links kept as links. Returns ``dest``."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         check=True, capture_output=True).stdout.decode()
    for rel in sorted(set(filter(None, out.split("\0")))):
        src, dst = REPO / rel, dest / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(src.readlink())
        elif src.is_file():
            shutil.copy2(src, dst)
    return dest
