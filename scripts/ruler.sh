#!/usr/bin/env bash
# NVIDIA's RULER (nvidia-long-context-eval) for the ruler task kind, in its own folder
# (.cache/long-context-eval, `pip install --no-deps --target`, see bench/ruler_requirements.txt).
# evalpipe finds the folder itself (docs/ruler.md). Idempotent: reinstalls only when the list
# changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${EVALPIPE_VENV:-.venv}/bin/python"
RULER=.cache/long-context-eval
if ! cmp -s bench/ruler_requirements.txt "$RULER/requirements.txt"; then
    rm -rf "$RULER"
    "$PY" -m pip install -q --no-deps --target "$RULER" -r bench/ruler_requirements.txt
    cp bench/ruler_requirements.txt "$RULER/requirements.txt"
fi
