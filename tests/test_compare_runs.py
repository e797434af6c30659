"""tests/compare_runs.py, the byte-identity proof of a refactor, can fail: on two finished runs."""

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("compare_runs", Path(__file__).with_name("compare_runs.py"))
compare_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare_runs)

FILES = {
    "results/tidy/collapse.csv": "a,b\n1,2\n",
    "figures/fig_mse.csv": "x\n0.5\n",
    "figures/table_scales.tex": "\\toprule\n",
    "figures/claims.md": "# verdict\n",
    "figures/fig_mse.pdf": "not compared",
}


def _run(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_identical_runs_pass_and_every_pattern_is_hashed(tmp_path, capsys):
    a, b = _run(tmp_path / "a", FILES), _run(tmp_path / "b", FILES)
    assert set(compare_runs.hashes(a)) == set(FILES) - {"figures/fig_mse.pdf"}
    assert compare_runs.main(["--before-dir", str(a), "--after-dir", str(b)]) == 0
    assert "4 identical, 0 different or missing" in capsys.readouterr().out


@pytest.mark.parametrize("change", ["one byte", "missing"])
def test_a_changed_or_missing_output_fails(tmp_path, capsys, change):
    after = dict(FILES)
    if change == "one byte":
        after["results/tidy/collapse.csv"] = "a,b\n1,3\n"
    else:
        del after["figures/claims.md"]
    a, b = _run(tmp_path / "a", FILES), _run(tmp_path / "b", after)
    assert compare_runs.main(["--before-dir", str(a), "--after-dir", str(b)]) == 1
    out = capsys.readouterr().out
    assert ("DIFFERENT" if change == "one byte" else "missing") in out


def test_nothing_to_compare_fails(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    assert compare_runs.main(["--before-dir", str(tmp_path / "a"), "--after-dir", str(tmp_path / "b")]) == 1
