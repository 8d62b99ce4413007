"""The data packages (PyPI packages whose files the tests and the quickstart read) have one home for their pins,
repo_builder/testing.py ``data_packages()``: scripts/setup_env.sh installs that list, and no other file of the
project writes a pin of them again."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest
from conftest import PROJECT

from repo_builder.testing import data_packages


@pytest.mark.parametrize("pin", data_packages())
def test_each_pin_is_installed_at_its_version(pin: str) -> None:
    """What setup_env.sh installed from the list is what the list says (a pin changed in testing.py alone would
    fail here until the environment is set up again)."""
    name, _, version = pin.partition("==")
    assert version, pin
    assert importlib.metadata.version(name) == version


def test_the_module_prints_the_list_setup_installs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "repo_builder.testing"], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == data_packages()
    assert "-m repo_builder.testing" in (PROJECT / "scripts" / "setup_env.sh").read_text()


@pytest.mark.parametrize("path", ["scripts/setup_env.sh", "scripts/quickstart.sh", "scripts/test.sh"])
def test_no_second_copy_of_a_pin(path: str) -> None:
    text = (PROJECT / path).read_text()
    assert [pin for pin in data_packages() if pin in text] == []


def test_the_readme_does_not_write_the_list_again() -> None:
    """The README may name one package's pin in its prose, but its install line reads the list."""
    lines = (PROJECT / "README.md").read_text().splitlines()
    assert [line for line in lines if sum(pin in line for pin in data_packages()) > 1] == []
    assert any("pip install --no-deps $(.venv/bin/python -m repo_builder.testing)" in line for line in lines)
