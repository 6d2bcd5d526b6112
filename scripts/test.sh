#!/usr/bin/env bash
# The test command: lint, the package check (scripts/check-wheel.sh), then every test tier (pure,
# real vLLM on the CPU, real local SLURM).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/${EVALPIPE_VENV:-.venv}/bin:$PATH"
ruff check .
ruff format --check .
lint-imports  # the layer contract in pyproject.toml
# The package as users install it: sdist + wheel, installed outside the checkout (under a minute).
bash scripts/check-wheel.sh
# The SLURM tier runs against the local SLURM; start it (idempotent) where this user can.
if [ "$(id -u)" = 0 ] && command -v slurmctld >/dev/null; then
    bash scripts/local-slurm.sh start
fi
# Two workers: most of a test's wall here is single-threaded (imports, process start-up, waiting
# on SLURM), so a 2-core machine runs two at once; cluster tests stay on one worker (conftest.py).
# The benchmarks' quick modes that start the real engine are `make bench-quick`'s.
# The slowest tests are listed, so the suite's 20-minute budget is watched where it is spent.
pytest -n "${EVALPIPE_TEST_WORKERS:-2}" --dist loadgroup -m "not bench" --durations=30 "$@"
