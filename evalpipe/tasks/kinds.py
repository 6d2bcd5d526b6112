"""The task kinds' registry and the run's selection through it: `--tasks` references parsed once
(evalpipe/catalog/taskrefs.py), each kind loading its own, then every task fitted to
--max-tokens and to the context (the rule: evalpipe/catalog/budgets.py) as its kind declares;
and, when the run completes, the results documents the kinds keep of their own.

A kind's loader is imported when a reference of it is loaded: `KindSpec.loader` names the module,
whose `KIND` is the kind (evalpipe/tasks/kindbase.py)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.catalog.budgets import Ask, Context, fit_context
from evalpipe.catalog.preset import Preset
from evalpipe.catalog.suites import SuiteEntry
from evalpipe.catalog.taskrefs import FILE, KINDS, TaskRef, expand_refs
from evalpipe.core.errors import ConfigError
from evalpipe.tasks.base import Task
from evalpipe.tasks.generation import with_generation_config
from evalpipe.tasks.gradings import Grading
from evalpipe.tasks.kindbase import FinishedScores, Listed, Loaded, LoadOptions, TaskKind


def get_kind(name: str) -> TaskKind:
    """The kind `name` (a KINDS key with a loader), its module imported now."""
    loader = KINDS[name].loader
    if loader is None:
        raise ConfigError(f"Task kind {name!r} loads no tasks of its own (it expands into others).")
    return importlib.import_module(loader).KIND


def loadable() -> list[str]:
    """The kinds that load tasks of their own (not expanded into others), in the registry's
    order."""
    return [name for name, spec in KINDS.items() if spec.loader]


def listing() -> list[Listed]:
    """Every loadable kind's rows for `tasks list`, in the registry's order."""
    return [row for name in loadable() for row in get_kind(name).listing()]


def kind_results(tasks: Sequence[Task], scores: FinishedScores) -> dict[str, dict[str, Any]]:
    """The results documents of a completed run of `tasks`, by kind: every kind is asked, and
    one that keeps a document of its own answers when some of `tasks` are its."""
    made = {name: get_kind(name).results(tasks, scores) for name in loadable()}
    return {name: document for name, document in made.items() if document is not None}


def merged_kind_results(
    shards: Mapping[str, Mapping[Path, Mapping[str, Any]]], scores: FinishedScores
) -> dict[str, dict[str, Any]]:
    """The results documents of a merged array job, by kind, from the shards' documents of each
    kind that kept one (by kind, then by the file each was read from)."""
    made = {name: get_kind(name).merged_results(found, scores) for name, found in shards.items()}
    return {name: document for name, document in made.items() if document is not None}


@dataclass(frozen=True, kw_only=True)
class FittedTasks:
    """What a run's `--categories` and `--tasks` select, fitted: the tasks with the budgets they
    generate with, the gradings of the judged ones, the context, and what the run is told."""

    tasks: tuple[Task, ...]
    gradings: Mapping[str, Grading] = field(default_factory=dict)
    published: str | None = None  # the judged benchmark's published judge
    context: Context
    notes: tuple[str, ...] = ()
    origin: Mapping[str, str] = field(default_factory=dict)  # task → the kind it came from

    def ask(self, task: Task) -> Ask:
        """What the task asks of the context and the engines, as its kind says."""
        return get_kind(self.origin[task.name]).ask(task)


def load_refs(tasks: Sequence[str] | None, options: LoadOptions) -> tuple[Loaded, dict[str, str]]:
    """Every task `tasks` names (and the default ones of `options.categories`), each by its kind,
    and which kind each task name came from; ConfigError when two kinds name one task."""
    grouped: dict[str, list[tuple[TaskRef, SuiteEntry | None]]] = {}
    for ref, entry in expand_refs(tasks or ()):
        grouped.setdefault(ref.kind, []).append((ref, entry))
    if options.categories or not grouped:  # neither: every category's default task files
        grouped.setdefault(FILE, [])
    found: list[Task] = []
    gradings: dict[str, Grading] = {}
    published = None
    origin: dict[str, str] = {}
    for name in (name for name in KINDS if name in grouped):
        loaded = get_kind(name).load(grouped[name], options)
        for task in loaded.tasks:
            if task.name in origin:
                raise ConfigError(
                    f"Task {task.name!r} comes from both {origin[task.name]} and {name} "
                    "references; results are keyed by task name, so run them apart."
                )
            origin[task.name] = name
        found += loaded.tasks
        gradings.update(loaded.gradings)
        published = loaded.published or published
    return Loaded(tasks=tuple(found), gradings=gradings, published=published), origin


def fit(
    preset: Preset,
    tasks: Sequence[Task],
    origin: Mapping[str, str],
    *,
    max_tokens: int | None,
    given: int | None,
) -> tuple[list[Task], Context]:
    """`tasks` capped at `max_tokens` (--max-tokens; every kind honours it), then at the context
    chosen for them with `given` (--max-model-len), and that context."""
    if max_tokens is not None:
        tasks = _capped(tasks, origin, {t.name: max_tokens for t in tasks})
    context = fit_context(preset, [get_kind(origin[t.name]).ask(t) for t in tasks], given)
    return _capped(tasks, origin, context.budgets), context


def _capped(
    tasks: Sequence[Task], origin: Mapping[str, str], budgets: Mapping[str, int]
) -> list[Task]:
    """`tasks` generating at most their budget in `budgets`, each capped as its kind says."""
    return [
        get_kind(origin[t.name]).with_max_tokens(t, budgets[t.name])
        if budgets.get(t.name, t.sampling.max_tokens) < t.sampling.max_tokens
        else t
        for t in tasks
    ]


def load_selection(
    tasks: Sequence[str] | None,
    options: LoadOptions,
    *,
    max_tokens: int | None = None,
    max_model_len: int | None = None,
    generation_model: str | None = None,
) -> FittedTasks:
    """The run's selection on `options.preset`: loaded by kind, the task files set to their
    effective generation settings (`generation_model`: where the model's generation_config.json
    is; None: not read), fitted to `max_tokens` and the context (`max_model_len`: given or
    chosen), with the kinds' notes."""
    preset = options.preset
    if preset is None:
        raise ValueError("load_selection needs options.preset: the context is fitted to it")
    loaded, origin = load_refs(tasks, options)
    chosen, generation_notes = with_generation_config(preset, loaded.tasks, generation_model)
    fitted, context = fit(preset, chosen, origin, max_tokens=max_tokens, given=max_model_len)
    kind_notes = [
        note
        for name in dict.fromkeys(origin.values())
        for note in get_kind(name).notes([t for t in fitted if origin[t.name] == name])
    ]
    return FittedTasks(
        tasks=tuple(fitted),
        gradings=loaded.gradings,
        published=loaded.published,
        context=context,
        notes=(*generation_notes, *kind_notes, *context.notes),
        origin=origin,
    )
