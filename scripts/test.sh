#!/usr/bin/env bash
# The whole test suite: set-up (idempotent: packages, dockerd, venv, images), then pytest.
# Extra arguments go to pytest. The 25 slowest tests are listed at the end (the suite's time
# is a budget: see which tests spend it).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports --no-cache
exec .venv/bin/pytest --durations=25 "$@"
