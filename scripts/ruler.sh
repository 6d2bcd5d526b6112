#!/usr/bin/env bash
# NVIDIA's RULER (nvidia-long-context-eval) for the ruler task kind, in its own folder
# (.cache/long-context-eval, see bench/ruler_requirements.txt). evalpipe finds the folder itself
# (docs/ruler.md).
exec bash "$(dirname "$0")/install-apart.sh" .cache/long-context-eval bench/ruler_requirements.txt
