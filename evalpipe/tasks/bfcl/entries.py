"""BFCL's entries, read by bfcl-eval's own code in a child process: single-turn ones
(entries_program.py: the prompts its handler for the mode builds (or the question and tools,
native mode), the checker's function docs and the possible answers) and multi-turn ones
(episode_entries_program.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.catalog.preset import BfclMode
from evalpipe.core.errors import ConfigError, DatasetError
from evalpipe.tasks.bfcl.child import run_program
from evalpipe.tasks.bfcl.install import bfcl_dir
from evalpipe.tasks.bfcl.memory import MEMORY_CONTENT
from evalpipe.tasks.bfcl.modes import checker_model

PROGRAM = Path(__file__).with_name("entries_program.py")
EPISODES = Path(__file__).with_name("episode_entries_program.py")


@dataclass(frozen=True, kw_only=True)
class Entries:
    """What entries_program.py read: the handler's class name, each category's entries in the
    package's order, and the categories it left out (format_sensitivity for FC handlers)."""

    handler: str
    entries: Mapping[str, list[dict[str, Any]]]
    skipped: tuple[str, ...] = ()
    # The checker model's settings (entries_program.config_of), for the sandboxed programs.
    config: Mapping[str, Any] = field(default_factory=dict)
    # Categories whose simulated API did not import, and why (memory_vector: its packages or
    # its encoder did not load).
    unavailable: Mapping[str, str] = field(default_factory=dict)


def read_entries(
    categories: Sequence[str], mode: BfclMode = "prompting", model: str | None = None
) -> Entries:
    """The single-turn categories' entries for `mode` (`model`: the registered model of the
    handler mode), format_sensitivity left out for an FC handler or native mode. ConfigError
    when BFCL does not register `model` or serves it by a handler evalpipe cannot use;
    DatasetError when the package does not know a category or its loading fails (its output's
    end quoted)."""
    found = run_program(PROGRAM, categories, "entries", mode=mode, model=model,
                        checker=checker_model(mode, model))  # fmt: skip
    found = _accepted(found, model)
    skipped = tuple(found["skipped"])
    kept = [c for c in categories if c not in skipped]
    return Entries(handler=found["handler"], entries=_known(found, kept), skipped=skipped,
                   config=found["config"])  # fmt: skip


def read_episodes(
    categories: Sequence[str], mode: BfclMode = "prompting", model: str | None = None
) -> Entries:
    """The multi-turn categories' entries for `mode` (prompting or handler;
    episode_entries_program.py), and those whose simulated API did not import; ConfigError and
    DatasetError as read_entries."""
    found = run_program(EPISODES, categories, "multi-turn entries", mode=mode, model=model,
                        checker=checker_model(mode, model),
                        memory_content=MEMORY_CONTENT)  # fmt: skip
    found = _accepted(found, model)
    unavailable = found["unavailable"]
    kept = [c for c in categories if c not in unavailable]
    return Entries(handler=found["handler"], entries=_known(found, kept),
                   config=found["config"], unavailable=unavailable)  # fmt: skip


def _accepted(found: Mapping[str, Any], model: str | None) -> Mapping[str, Any]:
    """`found`, or ConfigError when the program refused the handler mode's `model`."""
    if "refused" in found:
        raise ConfigError(
            f"bfcl_model {model!r}: {found['refused']}. Name a local model BFCL registers "
            "(bfcl_eval/constants/model_config.py's local_inference_model_map, e.g. "
            "Qwen/Qwen3-8B-FC or Qwen/Qwen3-8B), or set bfcl_mode prompting or native."
        )
    return found


def _known(found: Mapping[str, Any], categories: Sequence[str]) -> Mapping[str, Any]:
    missing = [c for c in categories if c not in found["entries"]]
    if missing:
        raise DatasetError(
            f"bfcl-eval in {bfcl_dir()} has no category {', '.join(missing)} of this kind; "
            f"it has {', '.join(found['known'])}."
        )
    return found["entries"]
