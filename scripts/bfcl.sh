#!/usr/bin/env bash
# Berkeley's BFCL (bfcl-eval) for the bfcl: task kind, in its own folder (.cache/bfcl-eval,
# `pip install --no-deps --target`, see bench/bfcl_requirements.txt): it pins numpy 1.26.4 and
# API clients the virtualenv must not get. evalpipe finds the folder itself (docs/bfcl.md).
# Idempotent: reinstalls only when the list changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${EVALPIPE_VENV:-.venv}/bin/python"
BFCL=.cache/bfcl-eval
if ! cmp -s bench/bfcl_requirements.txt "$BFCL/requirements.txt"; then
    rm -rf "$BFCL"
    "$PY" -m pip install -q --no-deps --target "$BFCL" -r bench/bfcl_requirements.txt
    cp bench/bfcl_requirements.txt "$BFCL/requirements.txt"
fi
