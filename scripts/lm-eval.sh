#!/usr/bin/env bash
# EleutherAI lm-eval for the lm_eval: tests and bench/peer_lm_eval.py, in its own folder
# (.cache/bench-lm-eval, see bench/lm_eval_requirements.txt): installed into the virtualenv it
# would downgrade python-dateutil 4 -> 2.9. Callers put the folder on PYTHONPATH (docs/lmeval.md).
exec bash "$(dirname "$0")/install-apart.sh" .cache/bench-lm-eval bench/lm_eval_requirements.txt
