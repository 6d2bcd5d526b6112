#!/usr/bin/env bash
# Berkeley's BFCL (bfcl-eval) for the bfcl: task kind, in its own folder (.cache/bfcl-eval, see
# bench/bfcl_requirements.txt): it pins numpy 1.26.4 and API clients the virtualenv must not get.
# evalpipe finds the folder itself (docs/bfcl.md).
exec bash "$(dirname "$0")/install-apart.sh" .cache/bfcl-eval bench/bfcl_requirements.txt
