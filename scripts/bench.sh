#!/usr/bin/env bash
# The benchmark command: every bench/ script in turn, each printing its figures and ratios
# (BENCHMARKS.md holds the latest ones). About 40 minutes on 2 cores (bench/stream.py alone
# about 30); exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/${EVALPIPE_VENV:-.venv}/bin:$PATH"
# This checkout's evalpipe, whichever one the environment has installed.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

# lm-eval for bench/peer_lm_eval.py, in its own folder: see bench/lm_eval_requirements.txt.
bash scripts/lm-eval.sh
# NLTK's released punkt_tab data for bench/ifeval_agreement.py: bench/punkt_tab_requirements.txt.
PUNKT=.cache/bench-punkt-tab
if ! cmp -s bench/punkt_tab_requirements.txt "$PUNKT/requirements.txt"; then
    rm -rf "$PUNKT"
    python -m pip install -q --no-deps --target "$PUNKT" -r bench/punkt_tab_requirements.txt
    cp bench/punkt_tab_requirements.txt "$PUNKT/requirements.txt"
fi
# nvidia-simple-evals for bench/agree_mcq.py, likewise apart: bench/simple_evals_requirements.txt.
SIMPLE_EVALS=.cache/bench-simple-evals
if ! cmp -s bench/simple_evals_requirements.txt "$SIMPLE_EVALS/requirements.txt"; then
    rm -rf "$SIMPLE_EVALS"
    python -m pip install -q --no-deps --target "$SIMPLE_EVALS" -r bench/simple_evals_requirements.txt
    cp bench/simple_evals_requirements.txt "$SIMPLE_EVALS/requirements.txt"
fi
python -m evalpipe models prepare smollm2_135m

status=0
for script in startup scale sandbox_throughput overhead_vllm peer_lm_eval mc_methods stream estimate \
    ifeval_agreement agree_mcq; do
    echo "== python bench/$script.py"
    start=$SECONDS
    python "bench/$script.py" || status=1
    echo "== bench/$script.py took $((SECONDS - start)) s"
    echo
done
exit $status
