"""Packaging: pins agree across pyproject.toml and environment.yml; the distribution name is ours."""

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _conda_pip_lines():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pips = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pips) == 1
    return pips[0]


def test_environment_yml_pins_equal_pyproject():
    proj = _pyproject()["project"]
    extras = proj["optional-dependencies"]
    want = sorted(proj["dependencies"] + extras["test"] + extras["slurm"])
    got = sorted(x for x in _conda_pip_lines() if not x.startswith("-e"))
    assert got == want


def test_environment_yml_installs_the_checkout():
    assert "-e ." in _conda_pip_lines()


def test_torch_is_pinned_to_the_cpu_build_version():
    assert "torch==2.13.0" in _pyproject()["project"]["dependencies"]


def test_distribution_name_differs_from_pypi_kernels():
    assert _pyproject()["project"]["name"] != "kernels"


def test_kernels_and_every_subpackage_are_packaged_and_nothing_else():
    from setuptools import find_packages

    find = _pyproject()["tool"]["setuptools"]["packages"]["find"]
    packaged = set(find_packages(str(ROOT), include=find["include"], exclude=find.get("exclude", ())))
    # every folder of kernels/ that holds Python code must be a package that is installed
    on_disk = {".".join(f.parent.relative_to(ROOT).parts) for f in (ROOT / "kernels").rglob("*.py")}
    assert on_disk <= packaged
    assert {"kernels", "kernels.cli", "kernels.pipeline", "kernels.analysis"} <= packaged
    assert all(p == "kernels" or p.startswith("kernels.") for p in packaged)


def test_console_scripts_name_callable_entry_points():
    import importlib

    scripts = _pyproject()["project"]["scripts"]
    assert set(scripts) == {"pcast-audit", "pcast-bench", "pcast-fingerprint", "pcast-gpu-check"}
    for name, target in scripts.items():
        module, func = target.split(":")
        assert module.startswith("kernels.cli."), name
        assert callable(getattr(importlib.import_module(module), func)), name


def test_tabulate_is_declared_for_to_markdown():
    assert any(d.split(">")[0].split("=")[0].strip() == "tabulate" for d in _pyproject()["project"]["dependencies"])


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    marker = "<!-- test-command -->"
    block = readme.split(marker)[1].split("```")[1]
    cmd = [ln for ln in block.splitlines()[1:] if ln.strip()]
    ci_cmd = [ln for ln in ci.splitlines() if ln.strip() and not ln.startswith("#") and not ln.startswith("set ")]
    # the service start-up its tests need (a single-node SLURM for tests/cluster/test_cluster.py), then the command
    services = ["tests/cluster/start-slurm.sh"]
    # then the docs build, the README's command for it
    docs = [ln for ln in readme.split("<!-- docs-command -->")[1].split("```")[1].splitlines()[1:] if ln.strip()]
    assert ci_cmd == services + cmd + docs
