#!/usr/bin/env bash
# EleutherAI lm-eval for the lm_eval: tests and bench/peer_lm_eval.py, in its own folder
# (.cache/bench-lm-eval, `pip install --no-deps --target`, see bench/lm_eval_requirements.txt):
# installed into the virtualenv it would downgrade python-dateutil 4 -> 2.9. Callers put the
# folder on PYTHONPATH (docs/lmeval.md). Idempotent: reinstalls only when the list changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${EVALPIPE_VENV:-.venv}/bin/python"
LM_EVAL=.cache/bench-lm-eval
if ! cmp -s bench/lm_eval_requirements.txt "$LM_EVAL/requirements.txt"; then
    rm -rf "$LM_EVAL"
    "$PY" -m pip install -q --no-deps --target "$LM_EVAL" -r bench/lm_eval_requirements.txt
    cp bench/lm_eval_requirements.txt "$LM_EVAL/requirements.txt"
fi
