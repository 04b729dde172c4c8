#!/usr/bin/env bash
# Every benchmark, one after another (docs/performance.md): start-up and teardown against raw
# Docker and docker-compose, the CLI, the API with many stored sessions, the scheduler. They
# print figures and write JSON under bench/results/; none passes or fails on time. Run on an
# otherwise idle machine. Extra arguments go to bench/ready.py (e.g. --rounds 8).
# Scale runs (32 kernels on one node, 64 over the 3-host test bed): bench/ready.py --scale.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash scripts/setup.sh >/dev/null
PY=.venv/bin/python
echo "==> start-up and teardown (bench/ready.py)"
$PY bench/ready.py "$@"
echo "==> the kernel runtime's cost at start-up (bench/runtime.py)"
$PY bench/runtime.py
echo "==> CLI (bench/cli.py)"
$PY bench/cli.py
echo "==> API (bench/api.py)"
$PY bench/api.py
echo "==> scheduler (bench/scheduler.py)"
$PY bench/scheduler.py
echo "==> placing in the manager (bench/placing.py)"
$PY bench/placing.py
echo "==> app proxy (bench/apps.py)"
$PY bench/apps.py
