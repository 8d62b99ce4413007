"""Where repo-builder's own data lives (templates, vendored runtime)."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PROJECT_DIR = PACKAGE_DIR.parent


def templates_dir() -> Path:
    """The ``model_templates/`` folder; ``REPO_BUILDER_TEMPLATES`` overrides it (tests, packaging)."""
    override = os.environ.get("REPO_BUILDER_TEMPLATES")
    return Path(override) if override else PROJECT_DIR / "model_templates"


def runtime_dir() -> Path:
    """The ``repo_builder/runtime`` package that render vendors into Python model folders."""
    return PACKAGE_DIR / "runtime"
