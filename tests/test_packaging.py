"""The package ships everything it reads: every sub-package is listed in pyproject.toml, the templates and
Python model sources are found through importlib.resources (not relative to a checkout), and the version has
one home. The built wheel itself is exercised by scripts/smoke_wheel.sh (run by scripts/test.sh)."""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

import tomllib

import repo_builder
from repo_builder.profile.paths import runtime_dir, templates_dir

PROJECT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    return tomllib.loads((PROJECT / "pyproject.toml").read_text())


def test_every_subpackage_is_listed():
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    found = {
        ".".join(p.parent.relative_to(PROJECT).parts)
        for p in (PROJECT / "repo_builder").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert found - listed == set(), (
        f"sub-packages missing from pyproject.toml [tool.setuptools] packages: {found - listed}"
    )
    assert "repo_builder.model_templates" in listed


def test_templates_come_from_the_installed_package():
    assert templates_dir() == Path(str(resources.files("repo_builder.model_templates")))
    assert (templates_dir() / "parameters.yaml").is_file()
    installed = sorted(p.parent.name for p in templates_dir().glob("*/contract.yaml"))
    in_checkout = sorted(p.parent.name for p in (PROJECT / "model_templates").glob("*/contract.yaml"))
    assert installed == in_checkout and {"trtllm-0.5", "trtllm-1.2", "llmapi-1.2"} <= set(installed)
    assert (runtime_dir() / "__init__.py").is_file()


def test_package_data_globs_cover_every_template_file():
    globs = _pyproject()["tool"]["setuptools"]["package-data"]["repo_builder.model_templates"]
    root = PROJECT / "model_templates"
    files = {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.name != "__init__.py"
    }
    covered = {f for f in files if any(Path(f).match(g) and len(Path(f).parts) == len(Path(g).parts) for g in globs)}
    assert files - covered == set(), f"model_templates files no package-data glob ships: {files - covered}"


def test_version_has_one_home():
    project = _pyproject()["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert _pyproject()["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "repo_builder.__version__"}
    assert repo_builder.__version__.count(".") == 2
    assert sys.modules["repo_builder"].__version__ == repo_builder.__version__
