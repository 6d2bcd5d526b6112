"""The lm-eval kind: `--tasks lm_eval:NAME` (a task or group), `lm_eval:PATH.yaml` or
`lm_eval:FOLDER`, loaded together so their groups are whole; it honours --max-tokens as
lm-eval's `--gen_kwargs max_gen_toks=N` does, and keeps lm-eval's results JSON of a completed run
(evalpipe/tasks/lmeval/results.py) as its results document."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalpipe.catalog.budgets import Ask
from evalpipe.catalog.suites import SuiteEntry
from evalpipe.catalog.taskrefs import TaskRef
from evalpipe.tasks.base import Task
from evalpipe.tasks.kindbase import FinishedScores, Loaded, LoadOptions, TaskKind
from evalpipe.tasks.lmeval import LmEvalTask, lm_eval_prompting, load_lmeval_tasks
from evalpipe.tasks.lmeval.results import check_results, given, lm_eval_results
from evalpipe.tasks.lmeval.sandboxed import check_in_sandbox
from evalpipe.tasks.lmeval.task import GENERATE


class LmEvalKind(TaskKind):
    name = "lm_eval"

    def load(
        self, refs: Sequence[tuple[TaskRef, SuiteEntry | None]], options: LoadOptions
    ) -> Loaded:
        preset = options.preset
        tasks = load_lmeval_tasks(
            [ref.name for ref, _ in refs],
            prompting=lm_eval_prompting(preset, options.backend) if preset else None,
            reasoning_parser=options.reasoning_parser,
            allow_unsafe_code=options.allow_unsafe_code,
        )
        for task in tasks:
            if task.unsafe_code:
                check_in_sandbox(task.lm_task)
        return Loaded(tasks=tuple(tasks))

    def ask(self, task: Task) -> Ask:
        assert isinstance(task, LmEvalTask)  # this kind loads only these
        # lm-eval renders every prompt (few-shot examples included) as it builds the requests,
        # which the run does anyway: the longest bounds the prompt allowance.
        longest = max((len(str(s.prompt).encode()) for s in task.samples()), default=None)
        return Ask(
            name=task.name,
            max_tokens=task.sampling.max_tokens,
            n=task.sampling.n,
            prompt_bytes=longest,
            generates=task.output_type == GENERATE,
        )

    def with_max_tokens(self, task: Task, max_tokens: int) -> Task:
        assert isinstance(task, LmEvalTask)  # this kind loads only these
        capped = copy.copy(task)  # the same lm-eval task and documents, another budget
        capped.sampling = dataclasses.replace(task.sampling, max_tokens=max_tokens)
        return capped

    def results(self, tasks: Sequence[Task], scores: FinishedScores) -> dict[str, Any] | None:
        bridged = [task for task in tasks if isinstance(task, LmEvalTask)]
        return lm_eval_results(bridged, scores) if bridged else None

    def merged_results(
        self, shards: Mapping[Path, Mapping[str, Any]], scores: FinishedScores
    ) -> dict[str, Any] | None:
        """lm-eval's aggregation over every shard's documents (stderrs and group means of the
        whole, not averages of the shards' figures). The tasks are loaded again (their datasets
        too) from what the shards' results name: each task's file and the tasks and groups the
        run was given."""
        for path, document in shards.items():
            check_results(path, document)
        first = next(iter(shards.values()))
        names, folders = given(first)
        separated = set(first.get("evalpipe_reasoning_separated", {}).values())
        # Aggregating runs none of the model's code; the run that scored it was allowed to.
        tasks = load_lmeval_tasks(
            [*folders, *names],
            reasoning_parser=separated.pop() if separated else None,
            allow_unsafe_code=True,
        )
        return self.results(tasks, scores)


KIND = LmEvalKind()
