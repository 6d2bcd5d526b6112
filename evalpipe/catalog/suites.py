"""Suites: named lists of tasks run as one (`--tasks suite:NAME`), each entry with the protocol
settings the suite runs it with. Read here, below the task code, so `render` and `submit` check
and expand a suite without loading any task.

configs/suites/NAME.yaml (any folder of $EVALPIPE_CONFIG_PATH too), or a path:

    description: what the suite measures
    tasks:
      - task: aime2024          # a task name, or a task file (relative to the suite's folder)
        n: 16                   # optional: completions per sample (the task file's otherwise)
        max_tokens: 32768       # optional: the token budget (the task file's otherwise)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evalpipe.catalog.configpath import find_file, given_file, is_path, names
from evalpipe.core.configio import build, first_repeat, read_yaml, unknown_name
from evalpipe.core.errors import ConfigError

PREFIX = "suite:"


@dataclass(frozen=True, kw_only=True)
class SuiteEntry:
    """One task of a suite and the settings the suite overrides (None: the task file's)."""

    task: str
    n: int | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.task, str) or not self.task:
            raise ValueError(f"task must name a task or a task file, got {self.task!r}")
        for key in ("n", "max_tokens"):
            value = getattr(self, key)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 1
            ):
                raise ValueError(f"{key} of task {self.task!r} must be a positive integer")


@dataclass(frozen=True, kw_only=True)
class Suite:
    name: str
    description: str = ""
    tasks: tuple[SuiteEntry, ...]
    path: Path | None = None  # where relative task paths are taken from

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError("tasks must list at least one task")
        repeated = first_repeat(entry.task for entry in self.tasks)
        if repeated is not None:
            raise ValueError(f"task {repeated!r} is listed twice")

    def task_refs(self) -> list[str]:
        """Each entry's task as a name or a path usable from any working directory."""
        return [self._ref(entry.task) for entry in self.tasks]

    def _ref(self, task: str) -> str:
        if not is_path(task) or self.path is None:
            return task
        path = Path(task).expanduser()
        return str(path if path.is_absolute() else self.path.parent / path)


def is_suite(name: str) -> bool:
    return name.startswith(PREFIX)


def suite_names() -> list[str]:
    """Names of the suite files in suites/ of every config folder, sorted."""
    return names("suites")


def load_suite(ref: str) -> Suite:
    """A suite by `suite:NAME` (or NAME) or `suite:PATH`; unknown names list the known ones."""
    name = ref.removeprefix(PREFIX)
    if not name:
        raise ConfigError(f"{ref!r} names no suite; write suite:NAME (e.g. suite:reasoning-2026).")
    path = given_file("suite", name) or find_file("suites", name)
    if path is None:
        raise unknown_name("suite", name, suite_names())
    data = read_yaml(path)
    return build(Suite, {"name": path.stem, **data, "path": path}, str(path))


def expand(tasks: Sequence[str]) -> list[tuple[str, SuiteEntry | None]]:
    """Task names and paths with each `suite:` reference replaced by its entries, in order:
    (task name or path, the suite's entry, None for a task named directly)."""
    out: list[tuple[str, SuiteEntry | None]] = []
    for ref in tasks:
        if not is_suite(ref):
            out.append((ref, None))
            continue
        suite = load_suite(ref)
        out += zip(suite.task_refs(), suite.tasks, strict=True)
    return out
