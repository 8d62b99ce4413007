"""Where repo-builder's own data lives: the templates and the runtime it vendors into rendered models.

Both ship inside the installed package (a wheel, an sdist or an editable checkout alike) and are found
with :mod:`importlib.resources`, never relative to a source checkout:

* ``repo_builder.model_templates``: the top-level ``model_templates/`` folder of the project, installed
  under that name (``pyproject.toml`` ``[tool.setuptools.package-dir]``);
* ``repo_builder.runtime``: the code copied into every Python model as ``repo_builder_runtime/``.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path


def _package_path(package: str) -> Path:
    """The directory of an installed package (wheels and editable installs unpack to the file system)."""
    return Path(str(resources.files(package)))


def templates_dir() -> Path:
    """The installed ``model_templates`` data; ``REPO_BUILDER_TEMPLATES`` overrides it (tests)."""
    override = os.environ.get("REPO_BUILDER_TEMPLATES")
    return Path(override) if override else _package_path("repo_builder.model_templates")


def runtime_dir() -> Path:
    """The ``repo_builder/runtime`` package that render vendors into Python model folders."""
    return _package_path("repo_builder.runtime")
