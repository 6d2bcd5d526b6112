#!/usr/bin/env bash
# Installs a reference package apart from the virtualenv: `install-apart.sh FOLDER REQUIREMENTS`
# runs `pip install --no-deps --target FOLDER -r REQUIREMENTS` with the virtualenv's pip, for
# packages whose declared dependencies the virtualenv must not get. Idempotent: reinstalls only
# when the requirements file changed (a copy is kept in the folder).
set -euo pipefail
cd "$(dirname "$0")/.."
folder=$1 requirements=$2
PY="${EVALPIPE_VENV:-.venv}/bin/python"
if ! cmp -s "$requirements" "$folder/requirements.txt"; then
    rm -rf "$folder"
    "$PY" -m pip install -q --no-deps --target "$folder" -r "$requirements"
    cp "$requirements" "$folder/requirements.txt"
fi
