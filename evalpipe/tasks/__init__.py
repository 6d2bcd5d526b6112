"""Evaluation tasks: datasets, prompt building and scorers, grouped into categories.

Selection: a category stands for its *default* tasks (`default: true` in the task file). The
shipped defaults need no network — the generated offline sets and HumanEval, which ships in a
package — so `--categories reasoning,math,coding` runs anywhere. Hub-backed tasks (ARC, MMLU,
BBH, GSM8K, MATH-500, MBPP) run when named (`--tasks gsm8k,mmlu`). They are not added
automatically when their data happens to be cached: a run's task list must not depend on the
state of a cache. Other kinds of `--tasks` reference (lm-eval's, judged tasks) load through the
kinds' registry: evalpipe/tasks/kinds.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalpipe.catalog.configpath import find_file, given_file
from evalpipe.catalog.suites import SuiteEntry, expand
from evalpipe.catalog.taskfiles import task_names
from evalpipe.core.configio import unknown_name
from evalpipe.core.errors import ConfigError
from evalpipe.tasks.config import TaskConfig, load_task_config
from evalpipe.tasks.configured import ConfiguredTask
from evalpipe.tasks.scorers import RunPrograms

__all__ = [
    "ConfiguredTask",
    "category_names",
    "load_task",
    "load_task_files",
    "load_tasks",
    "task_names",
]


def _shipped() -> dict[str, tuple[TaskConfig, Path]]:
    found = {name: find_file("tasks", name) for name in task_names()}
    return {name: _read(path) for name, path in found.items() if path is not None}


def _read(path: Path) -> tuple[TaskConfig, Path]:
    return load_task_config(path), path


def category_names() -> list[str]:
    """Every category some task file names, sorted."""
    return sorted({config.category for config, _ in _shipped().values()})


def load_task(
    name_or_path: str,
    *,
    run_programs: RunPrograms | None = None,
    reasoning_parser: str | None = None,
) -> ConfiguredTask:
    """A task by name (configs/tasks/NAME.yaml) or by the path of a task file."""
    given = given_file("task", name_or_path)
    if given is not None:
        config, path = _read(given)
    else:
        shipped = _shipped()
        if name_or_path not in shipped:
            raise unknown_name("task", name_or_path, shipped)
        config, path = shipped[name_or_path]
    return ConfiguredTask(
        config, path=path, run_programs=run_programs, reasoning_parser=reasoning_parser
    )


def load_tasks(
    categories: Sequence[str] | None = None, tasks: Sequence[str] | None = None, **options: Any
) -> list[ConfiguredTask]:
    """The task files to run: the default tasks of `categories`, then the named `tasks` (task
    names, task-file paths or `suite:NAME`, the suite's tasks with the n and max_tokens it sets,
    evalpipe/catalog/suites.py); with neither, every category's default tasks. `options` are
    `load_task_files`'s."""
    return load_task_files(categories, expand(tasks or ()), **options)


def load_task_files(
    categories: Sequence[str] | None,
    named: Sequence[tuple[str, SuiteEntry | None]],
    *,
    mc_method: str | None = None,
    since: str | None = None,
    until: str | None = None,
    run_programs: RunPrograms | None = None,
    reasoning_parser: str | None = None,
) -> list[ConfiguredTask]:
    """The default tasks of `categories`, then the `named` task files (a name or path, with the
    suite entry whose n and max_tokens it runs with, or None); with neither, every category's
    default tasks.

    `mc_method` overrides the scorer method of every multiple-choice task (None: each file's).
    `since`/`until` move the ends of every date window (None: each file's); ConfigError when no
    chosen task has one.
    `run_programs` replaces the sandbox for code tasks (tests pass a recorder; None = real).
    `reasoning_parser` (the preset's) separates reasoning from the scored answer.
    """
    made = {"run_programs": run_programs, "reasoning_parser": reasoning_parser}
    shipped = _shipped()
    known = sorted({config.category for config, _ in shipped.values()})
    if not categories and not named:
        # every category's defaults; hub-only ones have none
        categories = sorted({c.category for c, _ in shipped.values() if c.default})
    chosen: dict[str, ConfiguredTask] = {}
    for category in categories or ():
        if category not in known:
            raise unknown_name("category", category, known)
        defaults = sorted(
            n for n, (c, _) in shipped.items() if c.category == category and c.default
        )
        if not defaults:
            members = sorted(n for n, (c, _) in shipped.items() if c.category == category)
            raise ConfigError(
                f"Category {category!r} has no default tasks; name the ones to run with "
                f"--tasks (its tasks: {', '.join(members)})."
            )
        for name in defaults:
            config, path = shipped[name]
            chosen[name] = ConfiguredTask(config, path=path, **made)
    for name_or_path, entry in named:
        task = _with_protocol(load_task(name_or_path, **made), entry)
        previous = chosen.get(task.name)
        if previous is not None and previous.path.resolve() != task.path.resolve():
            raise ConfigError(
                f"Two task files are named {task.name!r}: {previous.path} and {task.path}; "
                "rename one (its `name:` key or its file)."
            )
        chosen.setdefault(task.name, task)
    found = list(chosen.values())
    if since is not None or until is not None:
        found = with_window(found, since, until)
    return found if mc_method is None else [_with_method(t, mc_method) for t in found]


def with_window(
    tasks: Sequence[ConfiguredTask], since: str | None, until: str | None
) -> list[ConfiguredTask]:
    """The tasks with the given ends of their date windows replaced (others unchanged)."""
    dated = [t for t in tasks if t.config.dates is not None]
    if not dated:
        raise ConfigError(
            "--since/--until move a task's date window, and none of the chosen tasks "
            f"({', '.join(t.name for t in tasks)}) has one (`dates:` in the task file, as "
            "livecodebench's); drop them or add such a task."
        )
    out = []
    for task in tasks:
        if task.config.dates is not None:
            try:
                window = task.config.dates.moved(since, until)
            except ValueError as exc:
                raise ConfigError(f"--since/--until for task {task.name!r}: {exc}.") from exc
            task = task.with_config(dataclasses.replace(task.config, dates=window))
        out.append(task)
    return out


def _with_protocol(task: ConfiguredTask, entry: SuiteEntry | None) -> ConfiguredTask:
    """`task` with the n and max_tokens its suite entry sets: part of the task's definition,
    as a task file's own settings are."""
    if entry is None:
        return task
    given = {key: value for key in ("n", "max_tokens") if (value := getattr(entry, key))}
    if not given:
        return task
    try:
        sampling = dataclasses.replace(task.config.sampling, **given)
        config = dataclasses.replace(task.config, sampling=sampling)
    except ValueError as exc:
        raise ConfigError(f"Task {task.name!r} with its suite's settings {given}: {exc}.") from exc
    return ConfiguredTask(config, path=task.path, run_programs=task.run_programs,
                          reasoning_parser=task.reasoning_parser)  # fmt: skip


def _with_method(task: ConfiguredTask, method: str) -> ConfiguredTask:
    """`task` with its multiple-choice method replaced (other kinds unchanged)."""
    scorer = task.config.scorer
    if scorer.kind != "multiple_choice" or scorer.method == method:
        return task
    try:
        config = dataclasses.replace(
            task.config,
            scorer=dataclasses.replace(scorer, method=method, continuation=None),
        )
    except ValueError as exc:
        raise ConfigError(f"--mc-method {method} does not fit task {task.name!r}: {exc}") from exc
    return ConfiguredTask(config, path=task.path, run_programs=task.run_programs,
                          reasoning_parser=task.reasoning_parser)  # fmt: skip
