"""The task-file kind: `--tasks NAME` or `PATH.yaml` (and `--categories`), evalpipe's own task
files; it honours --max-tokens and says when a task's k outnumbers its n."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from evalpipe.catalog.budgets import Ask, template_bytes
from evalpipe.catalog.suites import SuiteEntry
from evalpipe.catalog.taskrefs import FILE, TaskRef
from evalpipe.tasks import load_task_files
from evalpipe.tasks.base import Task
from evalpipe.tasks.configured import ConfiguredTask
from evalpipe.tasks.kindbase import Loaded, LoadOptions, TaskKind


class FileKind(TaskKind):
    name = FILE

    def load(
        self, refs: Sequence[tuple[TaskRef, SuiteEntry | None]], options: LoadOptions
    ) -> Loaded:
        tasks = load_task_files(
            options.categories,
            [(ref.name, entry) for ref, entry in refs],
            mc_method=options.mc_method,
            since=options.since,
            until=options.until,
            run_programs=options.run_programs,
            reasoning_parser=options.reasoning_parser,
        )
        return Loaded(tasks=tuple(tasks))

    def ask(self, task: Task) -> Ask:
        assert isinstance(task, ConfiguredTask)  # this kind loads only these
        config = task.config
        return Ask(
            name=task.name,
            max_tokens=task.sampling.max_tokens,
            n=task.sampling.n,
            prompt_bytes=config.source.prompt_bytes,
            template_bytes=template_bytes(config.prompt.template, config.prompt.system),
            generates=config.scorer.method != "logprobs",
        )

    def with_max_tokens(self, task: Task, max_tokens: int) -> Task:
        assert isinstance(task, ConfiguredTask)
        return task.with_sampling(dataclasses.replace(task.sampling, max_tokens=max_tokens))

    def notes(self, tasks: Sequence[Task]) -> list[str]:
        """A k beyond n: pass@k and maj@k need k of a sample's n completions, so they are not
        reported; said once per task instead of dropped without a word."""
        notes = []
        for task in tasks:
            assert isinstance(task, ConfiguredTask)
            n = task.sampling.n
            dropped = [k for k in task.config.scorer.k if k > n and f"pass@{k}" not in task.metrics]
            if dropped:
                ks = ", ".join(map(str, dropped))
                notes.append(
                    f"{task.name}: k {ks} > n {n}, so pass@k and maj@k for k {ks} are not "
                    f"reported; raise n to {max(dropped)} (a suite's n:) to get them"
                )
        return notes


KIND = FileKind()
