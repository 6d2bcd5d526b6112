"""The task-kind base: what a kind of `--tasks` reference declares (how its tasks load, are
listed, shown, fetched and budgeted, and the results document of its own a completed run keeps),
as hooks with defaults a kind overrides. The catalog half
of a kind (its reference syntax, needs, budgets from files alone) is its `KindSpec`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.catalog.budgets import Ask
from evalpipe.catalog.preset import Preset
from evalpipe.catalog.selection import Selection
from evalpipe.catalog.suites import SuiteEntry
from evalpipe.catalog.taskrefs import KINDS, KindSpec, TaskRef
from evalpipe.records.prompt import messages
from evalpipe.tasks.base import Task
from evalpipe.tasks.gradings import Grading
from evalpipe.tasks.pairwise import Baseline
from evalpipe.tasks.scorers import RunPrograms

# Per task name, each finished sample's id and metric values: what a kind's results document is
# made from (the run directory's sample records, which this layer does not read).
FinishedScores = Mapping[str, Sequence[tuple[str, Mapping[str, float]]]]


@dataclass(frozen=True, kw_only=True)
class LoadOptions:
    """What a run tells the kinds as they load; each reads the fields it has use for."""

    preset: Preset | None = None  # the model the tasks are rendered for (None: plain text)
    backend: str = "vllm"
    categories: tuple[str, ...] | None = None  # task files' categories (their default tasks)
    mc_method: str | None = None
    since: str | None = None
    until: str | None = None
    run_programs: RunPrograms | None = None  # code tasks' sandbox (None: the real one)
    reasoning_parser: str | None = None  # separates reasoning from the scored answer
    judge_data: Path | None = None  # --judge-data
    baseline: Baseline | None = None  # --judge-baseline, read
    allow_unsafe_code: bool = False  # lm-eval tasks that execute the model's code, sandboxed
    tau2_trials: int = 1  # episodes per τ² task (--tau2-trials)
    tau2_max_steps: int | None = None  # steps per τ² episode (--tau2-max-steps; None: τ²'s)
    ruler_lengths: tuple[int, ...] | None = None  # --ruler-lengths (None: RULER's default)

    @classmethod
    def selected(cls, selection: Selection, preset: Preset, **given: object) -> LoadOptions:
        """What a run's selection record tells the kinds on `preset` (the one place a
        selection option reaches the loaders), with the run's other fields `given`."""
        categories = selection.categories_for(preset.categories)
        return cls(
            preset=preset,
            categories=tuple(categories) if categories else None,
            mc_method=selection.mc_method,
            since=selection.since,
            until=selection.until,
            allow_unsafe_code=selection.allow_unsafe_code,
            tau2_trials=selection.tau2_trials or 1,
            tau2_max_steps=selection.tau2_max_steps,
            ruler_lengths=selection.ruler_lengths,
            **given,  # type: ignore[arg-type]
        )


@dataclass(frozen=True, kw_only=True)
class Loaded:
    """A kind's tasks, the gradings of those a judge scores, and the benchmark's judge."""

    tasks: tuple[Task, ...] = ()
    gradings: Mapping[str, Grading] = field(default_factory=dict)
    published: str | None = None  # the judge the benchmark publishes with (MT-Bench: gpt-4)


@dataclass(frozen=True, kw_only=True)
class Listed:
    """One row of `evalpipe tasks list`'s table of kinds."""

    reference: str  # as written on --tasks
    kind: str
    needs: str
    about: str


class TaskKind:
    """A kind of task reference. `load` is the one hook every kind implements."""

    name: str  # its KINDS key
    # Whether `ask` measures the loaded task's prompts (longest_prompt_bytes), for kinds whose
    # prompts no task file records a size of.
    measures_prompts = False

    @property
    def spec(self) -> KindSpec:
        return KINDS[self.name]

    def load(
        self, refs: Sequence[tuple[TaskRef, SuiteEntry | None]], options: LoadOptions
    ) -> Loaded:
        raise NotImplementedError

    def listing(self) -> list[Listed]:
        """The rows `tasks list` shows for this kind: by default, how it is written."""
        spec = self.spec
        return [Listed(reference=spec.written, kind=spec.name, needs=spec.needs,
                       about=spec.summary)]  # fmt: skip

    def ask(self, task: Task) -> Ask:
        """What one loaded task asks of the context (its prompts' size unknown unless the kind
        measures them)."""
        measured = longest_prompt_bytes(task) if self.measures_prompts else None
        return Ask(name=task.name, max_tokens=task.sampling.max_tokens, n=task.sampling.n,
                   prompt_bytes=measured)  # fmt: skip

    def with_max_tokens(self, task: Task, max_tokens: int) -> Task:
        """`task` generating at most `max_tokens` per answer."""
        sampling = dataclasses.replace(task.sampling, max_tokens=max_tokens)
        return dataclasses.replace(task, sampling=sampling)  # type: ignore[type-var]

    def notes(self, tasks: Sequence[Task]) -> list[str]:
        """What a run of these tasks should be told once (printed with its other notes)."""
        return []

    def results(self, tasks: Sequence[Task], scores: FinishedScores) -> dict[str, Any] | None:
        """The kind's own results document for a completed run (kept in the run directory as
        this kind's results file): made from `tasks`, every task of the run (the kind picks its
        own), and their finished samples' `scores`. None, the default: the kind keeps none, or
        the run has none of its tasks. A kind that keeps one also overrides `merged_results`."""
        return None

    def merged_results(
        self, shards: Mapping[Path, Mapping[str, Any]], scores: FinishedScores
    ) -> dict[str, Any] | None:
        """The document of a merged array job: from the shards' own (one or more, each by the
        file it was read from, to name in a refusal) and every shard's finished samples'
        `scores`. A merge loads no tasks, so the kind finds them in its shards' documents."""
        return None


def longest_prompt_bytes(task: Task) -> int | None:
    """The most bytes one of `task`'s samples sends: its messages' text and its tools, as JSON
    (a kind's Ask.prompt_bytes, measured on what the run sends)."""
    return max(
        (len(json.dumps([*(m["content"] for m in messages(s.prompt)), *s.tools],
                        ensure_ascii=False).encode()) for s in task.samples()),
        default=None,
    )  # fmt: skip
