"""A trusted child process over bfcl-eval's own data code (no model text: not the sandbox), with
BFCL_PROJECT_ROOT a fresh folder so the package's import side effects write nothing beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalpipe.core.errors import DatasetError
from evalpipe.tasks.bfcl.install import bfcl_dir

LOAD_TIMEOUT_S = 600.0  # importing every model handler on a loaded node; normally ~5 s


def project_env(root: str) -> dict[str, str]:
    """A child's environment: bfcl-eval's import side effects write under `root` only, and
    the hub is never asked (memory_vector's encoder comes from the user's cache)."""
    return {**os.environ, "BFCL_PROJECT_ROOT": root, "HF_HUB_OFFLINE": "1"}


def run_program(program: Path, categories: Sequence[str], what: str, **given: Any) -> Any:
    """`program`'s answer (its stdout's last line) for `categories` (and the `given` fields);
    DatasetError naming `what` it was reading, the reinstall and its output's end when it
    fails."""
    folder = bfcl_dir()
    with tempfile.TemporaryDirectory(prefix="evalpipe-bfcl-") as root:
        done = subprocess.run(
            [sys.executable, str(program)],
            input=json.dumps({"path": str(folder), "categories": list(categories), **given}),
            capture_output=True, text=True, env=project_env(root), timeout=LOAD_TIMEOUT_S,
        )  # fmt: skip
    if done.returncode != 0:
        raise DatasetError(
            f"Reading BFCL's {what} from {folder} failed (exit {done.returncode}); "
            f"reinstall with `bash scripts/bfcl.sh`. Its output ended:\n{done.stderr[-2000:]}"
        )
    return json.loads(done.stdout.rstrip("\n").rpartition("\n")[2])
