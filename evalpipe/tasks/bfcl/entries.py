"""BFCL's entries, read by bfcl-eval's own code in a child process: single-turn ones
(entries_program.py: the chats its prompting handler builds, the checker's function docs and
the possible answers) and multi-turn ones (episode_entries_program.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalpipe.core.errors import DatasetError
from evalpipe.tasks.bfcl.install import bfcl_dir

PROGRAM = Path(__file__).with_name("entries_program.py")
EPISODES = Path(__file__).with_name("episode_entries_program.py")
LOAD_TIMEOUT_S = 600.0  # importing every model handler on a loaded node; normally ~5 s


def project_env(root: str) -> dict[str, str]:
    """A child's environment: bfcl-eval's import side effects write under `root` only."""
    return {**os.environ, "BFCL_PROJECT_ROOT": root}


def read_entries(
    categories: Sequence[str], program: Path = PROGRAM
) -> Mapping[str, list[dict[str, Any]]]:
    """Each category's entries as `program` reads them (PROGRAM: single-turn, EPISODES:
    multi-turn), in the package's order; DatasetError when the package does not know a category
    or its loading fails (its output's end quoted)."""
    folder = bfcl_dir()
    with tempfile.TemporaryDirectory(prefix="evalpipe-bfcl-") as root:
        done = subprocess.run(
            [sys.executable, str(program)],
            input=json.dumps({"path": str(folder), "categories": list(categories)}),
            capture_output=True, text=True, env=project_env(root), timeout=LOAD_TIMEOUT_S,
        )  # fmt: skip
    if done.returncode != 0:
        raise DatasetError(
            f"Reading BFCL's entries from {folder} failed (exit {done.returncode}); "
            f"reinstall with `bash scripts/bfcl.sh`. Its output ended:\n{done.stderr[-2000:]}"
        )
    found = json.loads(done.stdout.rstrip("\n").rpartition("\n")[2])
    missing = [c for c in categories if c not in found["entries"]]
    if missing:
        raise DatasetError(
            f"bfcl-eval in {folder} has no category {', '.join(missing)} of this kind; "
            f"it has {', '.join(found['known'])}."
        )
    return found["entries"]
