"""BFCL's entries, read by bfcl-eval's own code in a child process: single-turn ones
(entries_program.py: the chats its prompting handler builds, the checker's function docs and
the possible answers) and multi-turn ones (episode_entries_program.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalpipe.core.errors import DatasetError
from evalpipe.tasks.bfcl.child import run_program
from evalpipe.tasks.bfcl.install import bfcl_dir

PROGRAM = Path(__file__).with_name("entries_program.py")
EPISODES = Path(__file__).with_name("episode_entries_program.py")


def read_entries(
    categories: Sequence[str], program: Path = PROGRAM
) -> Mapping[str, list[dict[str, Any]]]:
    """Each category's entries as `program` reads them (PROGRAM: single-turn, EPISODES:
    multi-turn), in the package's order; DatasetError when the package does not know a category
    or its loading fails (its output's end quoted)."""
    found = run_program(program, categories, "entries")
    missing = [c for c in categories if c not in found["entries"]]
    if missing:
        raise DatasetError(
            f"bfcl-eval in {bfcl_dir()} has no category {', '.join(missing)} of this kind; "
            f"it has {', '.join(found['known'])}."
        )
    return found["entries"]
