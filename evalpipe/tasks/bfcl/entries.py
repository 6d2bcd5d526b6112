"""BFCL's entries, read by bfcl-eval's own code in a child process: single-turn ones
(entries_program.py: the prompts its handler for the mode builds (or the question and tools,
native mode), the checker's function docs and the possible answers) and multi-turn ones
(episode_entries_program.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalpipe.catalog.preset import BfclMode
from evalpipe.core.errors import ConfigError, DatasetError
from evalpipe.tasks.bfcl.child import run_program
from evalpipe.tasks.bfcl.install import bfcl_dir

PROGRAM = Path(__file__).with_name("entries_program.py")
EPISODES = Path(__file__).with_name("episode_entries_program.py")


def read_entries(
    categories: Sequence[str], mode: BfclMode = "prompting", model: str | None = None
) -> tuple[str, Mapping[str, list[dict[str, Any]]]]:
    """The handler's class name and each single-turn category's entries for `mode`, in the
    package's order (`model`: the registered model of the handler mode). ConfigError when BFCL
    does not register `model` or serves it by a handler evalpipe cannot use; DatasetError when
    the package does not know a category or its loading fails (its output's end quoted)."""
    found = run_program(PROGRAM, categories, "entries", mode=mode, model=model)
    if "refused" in found:
        raise ConfigError(
            f"bfcl_model {model!r}: {found['refused']}. Name a local model BFCL registers "
            "(bfcl_eval/constants/model_config.py's local_inference_model_map, e.g. "
            "Qwen/Qwen3-8B-FC or Qwen/Qwen3-8B), or set bfcl_mode prompting or native."
        )
    return found["handler"], _known(found, categories)


def read_episodes(categories: Sequence[str]) -> Mapping[str, list[dict[str, Any]]]:
    """Each multi-turn category's entries (episode_entries_program.py), in the package's order;
    DatasetError as read_entries."""
    return _known(run_program(EPISODES, categories, "multi-turn entries"), categories)


def _known(found: Mapping[str, Any], categories: Sequence[str]) -> Mapping[str, Any]:
    missing = [c for c in categories if c not in found["entries"]]
    if missing:
        raise DatasetError(
            f"bfcl-eval in {bfcl_dir()} has no category {', '.join(missing)} of this kind; "
            f"it has {', '.join(found['known'])}."
        )
    return found["entries"]
