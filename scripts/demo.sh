#!/usr/bin/env bash
# The main job on the embedded default: SmolLM2-135M-Instruct on the CPU build of vLLM, sized by
# the planner, submitted to the local SLURM, waited for, then reported.
# Environment: LIMIT (samples per task, default 20), CATEGORIES (default reasoning,math,coding).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/${EVALPIPE_VENV:-.venv}/bin:$PATH"

bash scripts/local-slurm.sh start
evalpipe models prepare smollm2_135m
out="results/demo-smollm2_135m-$(date -u +%Y%m%d-%H%M%S)"
evalpipe submit --preset smollm2_135m --cluster local \
    --categories "${CATEGORIES:-reasoning,math,coding}" --limit "${LIMIT:-20}" \
    --out "$out" --wait
evalpipe report "$out"
echo "Run directory: $out  (HTML report: evalpipe report $out --format html -o report.html)"
