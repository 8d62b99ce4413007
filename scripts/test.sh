#!/usr/bin/env bash
# Run repo-builder's whole test suite on a fresh machine: sets up the environment, then runs pytest
# (unit tests and the real-tritonserver tests). Extra arguments go to pytest.
set -euo pipefail
PROJECT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=setup_env.sh
source "$PROJECT_DIR/scripts/setup_env.sh"
cd "$PROJECT_DIR"
if [ ! -d "${REPO_BUILDER_SHARED:-$PROJECT_DIR/../shared}/assets" ]; then
  echo "[test] ../shared/assets (test data) is missing beside the project" >&2
  exit 1
fi
exec python -m pytest -q -p no:cacheprovider "$@"
