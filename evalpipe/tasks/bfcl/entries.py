"""BFCL's single-turn entries, read by bfcl-eval's own code in a child process
(entries_program.py): the prompts its handler for the mode builds (or the question and tools,
native mode), the checker's function docs and the possible answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalpipe.catalog.preset import BfclMode
from evalpipe.core.errors import ConfigError, DatasetError
from evalpipe.tasks.bfcl.install import bfcl_dir

PROGRAM = Path(__file__).with_name("entries_program.py")
LOAD_TIMEOUT_S = 600.0  # importing every model handler on a loaded node; normally ~5 s


def project_env(root: str) -> dict[str, str]:
    """A child's environment: bfcl-eval's import side effects write under `root` only."""
    return {**os.environ, "BFCL_PROJECT_ROOT": root}


def read_entries(
    categories: Sequence[str], mode: BfclMode = "prompting", model: str | None = None
) -> tuple[str, Mapping[str, list[dict[str, Any]]]]:
    """The handler's class name and each category's entries for `mode`, in the package's order
    (`model`: the registered model of the handler mode). ConfigError when BFCL does not register
    `model` or serves it by a handler evalpipe cannot use; DatasetError when the package does
    not know a category or its loading fails (its output's end quoted)."""
    folder = bfcl_dir()
    given = {"path": str(folder), "categories": list(categories), "mode": mode, "model": model}
    with tempfile.TemporaryDirectory(prefix="evalpipe-bfcl-") as root:
        done = subprocess.run(
            [sys.executable, str(PROGRAM)], input=json.dumps(given),
            capture_output=True, text=True, env=project_env(root), timeout=LOAD_TIMEOUT_S,
        )  # fmt: skip
    if done.returncode != 0:
        raise DatasetError(
            f"Reading BFCL's entries from {folder} failed (exit {done.returncode}); "
            f"reinstall with `bash scripts/bfcl.sh`. Its output ended:\n{done.stderr[-2000:]}"
        )
    found = json.loads(done.stdout.rstrip("\n").rpartition("\n")[2])
    if "refused" in found:
        raise ConfigError(
            f"bfcl_model {model!r}: {found['refused']}. Name a local model BFCL registers "
            "(bfcl_eval/constants/model_config.py's local_inference_model_map, e.g. "
            "Qwen/Qwen3-8B-FC or Qwen/Qwen3-8B), or set bfcl_mode prompting or native."
        )
    missing = [c for c in categories if c not in found["entries"]]
    if missing:
        raise DatasetError(
            f"bfcl-eval in {folder} has no single-turn category {', '.join(missing)}; "
            f"it has {', '.join(found['known'])}."
        )
    return found["handler"], found["entries"]
