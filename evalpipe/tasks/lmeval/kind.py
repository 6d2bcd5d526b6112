"""The lm-eval kind: `--tasks lm_eval:NAME` (a task or group), `lm_eval:PATH.yaml` or
`lm_eval:FOLDER`, loaded together so their groups are whole; it honours --max-tokens as
lm-eval's `--gen_kwargs max_gen_toks=N` does."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence

from evalpipe.catalog.budgets import Ask
from evalpipe.catalog.suites import SuiteEntry
from evalpipe.catalog.taskrefs import TaskRef
from evalpipe.tasks.base import Task
from evalpipe.tasks.kind import Loaded, LoadOptions, TaskKind
from evalpipe.tasks.lmeval import LmEvalTask, lm_eval_prompting, load_lmeval_tasks
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
        )
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


KIND = LmEvalKind()
