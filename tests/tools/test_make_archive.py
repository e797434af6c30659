"""tools/make_archive.py: a commit's files in a reproducible tar.gz with a checksum of each."""

import hashlib
import subprocess
import tarfile

import make_archive


def _repo(path):
    path.mkdir()
    run = lambda *a: subprocess.run(["git", *a], cwd=path, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (path / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "1.2.3"\n')
    (path / "sub").mkdir()
    (path / "sub" / "a.py").write_text("print('a')\n")
    (path / "run.sh").write_text("#!/bin/sh\n")
    (path / "run.sh").chmod(0o755)
    (path / "link").symlink_to("sub")
    (path / ".gitignore").write_text("ignored.txt\n")
    run("add", "-A")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    (path / "ignored.txt").write_text("not tracked\n")
    (path / "sub" / "a.py").write_text("print('edited, not committed')\n")
    return path


def test_archive_holds_the_commit_with_checksums(tmp_path):
    repo = _repo(tmp_path / "repo")
    paths = make_archive.make_archive(repo, "HEAD", tmp_path / "out")
    assert paths["archive"].name == "pcast-fp8-1.2.3.tar.gz"
    with tarfile.open(paths["archive"]) as tar:
        members = {m.name: m for m in tar.getmembers()}
        names = sorted(members)
        assert names == sorted(f"pcast-fp8-1.2.3/{p}" for p in
                               [".gitignore", "SHA256SUMS", "link", "pyproject.toml", "run.sh", "sub/a.py"])
        a = tar.extractfile("pcast-fp8-1.2.3/sub/a.py").read()
        assert a == b"print('a')\n"  # the commit's bytes, not the working tree's edit
        assert members["pcast-fp8-1.2.3/run.sh"].mode == 0o755
        assert members["pcast-fp8-1.2.3/link"].issym() and members["pcast-fp8-1.2.3/link"].linkname == "sub"
        inner = tar.extractfile("pcast-fp8-1.2.3/SHA256SUMS").read().decode()
    assert inner == paths["sums"].read_text()
    lines = dict(reversed(ln.split("  ", 1)) for ln in inner.splitlines() if not ln.startswith("#"))
    assert lines["sub/a.py"] == hashlib.sha256(b"print('a')\n").hexdigest()
    assert set(lines) == {".gitignore", "pyproject.toml", "run.sh", "sub/a.py"}
    assert "# link link -> sub" in inner
    own = paths["archive_sum"].read_text().split()
    assert own == [hashlib.sha256(paths["archive"].read_bytes()).hexdigest(), "pcast-fp8-1.2.3.tar.gz"]


def test_archive_is_byte_identical_for_the_same_commit(tmp_path):
    repo = _repo(tmp_path / "repo")
    a = make_archive.make_archive(repo, "HEAD", tmp_path / "a")["archive"].read_bytes()
    b = make_archive.make_archive(repo, "HEAD", tmp_path / "b")["archive"].read_bytes()
    assert a == b


def test_unpacked_archive_passes_sha256sum_check(tmp_path):
    repo = _repo(tmp_path / "repo")
    paths = make_archive.make_archive(repo, "HEAD", tmp_path / "out", name="art")
    with tarfile.open(paths["archive"]) as tar:
        tar.extractall(tmp_path / "x", filter="tar")
    res = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=tmp_path / "x" / "art", capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    (tmp_path / "x" / "art" / "run.sh").write_text("tampered\n")
    res = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=tmp_path / "x" / "art", capture_output=True, text=True)
    assert res.returncode != 0 and "run.sh: FAILED" in res.stdout


def test_a_bad_revision_is_a_one_line_error(tmp_path, capsys):
    repo = _repo(tmp_path / "repo")
    assert make_archive.main(["--repo", str(repo), "--rev", "no-such-rev", "--out", str(tmp_path / "o")]) == 2
    assert "no-such-rev" in capsys.readouterr().err
