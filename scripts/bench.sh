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
# Other references, each in its own folder that only its benchmark puts on sys.path, installed
# --no-deps from a requirements file (reinstalled when it changes): NLTK's released punkt_tab for
# bench/ifeval_agreement.py (bench/punkt_tab_requirements.txt), nvidia-simple-evals for
# bench/agree_mcq.py (bench/simple_evals_requirements.txt), LiveCodeBench's grader for
# bench/lcb_agreement.py (bench/livecodebench_requirements.txt), what BFCL's CLI imports beyond
# scripts/bfcl.sh's folder for bench/bfcl_speed.py (bench/bfcl_generate_requirements.txt).
bash scripts/install-apart.sh .cache/bench-punkt-tab bench/punkt_tab_requirements.txt
bash scripts/install-apart.sh .cache/bench-simple-evals bench/simple_evals_requirements.txt
bash scripts/install-apart.sh .cache/bench-livecodebench bench/livecodebench_requirements.txt
bash scripts/install-apart.sh .cache/bench-bfcl-generate bench/bfcl_generate_requirements.txt
python -m evalpipe models prepare smollm2_135m

status=0
for script in startup scale sandbox_throughput lcb_agreement overhead_vllm peer_lm_eval mc_methods \
    stream estimate prefill_context ifeval_agreement agree_mcq arena_agreement judge_placement admission_uniform \
    ruler_agreement; do
    echo "== python bench/$script.py"
    start=$SECONDS
    python "bench/$script.py" || status=1
    echo "== bench/$script.py took $((SECONDS - start)) s"
    echo
done
exit $status
