#!/usr/bin/env bash
# Run repo-builder's whole test suite on a fresh machine: sets up the environment, then runs pytest
# (unit tests and the real-tritonserver tests), then, when run without arguments (as CI does), builds the wheel and
# smoke-tests it in a fresh virtual environment (scripts/smoke_wheel.sh). Extra arguments go to pytest only.
set -euo pipefail
PROJECT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=setup_env.sh
source "$PROJECT_DIR/scripts/setup_env.sh"
cd "$PROJECT_DIR"
if [ ! -d "${REPO_BUILDER_SHARED:-$PROJECT_DIR/../shared}/assets" ]; then
  echo "[test] ../shared/assets (test data) is missing beside the project" >&2
  exit 1
fi
python -m pytest -q -p no:cacheprovider "$@"
if [ "$#" -eq 0 ]; then
  bash "$PROJECT_DIR/scripts/smoke_wheel.sh"
fi
