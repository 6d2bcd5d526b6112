"""Loaded tasks' token budgets: --max-tokens caps, and the context the run gets for them
(the rule and its notes: evalpipe/catalog/budgets.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from evalpipe.catalog.budgets import Ask, Context, fit_context, template_bytes
from evalpipe.catalog.registry import Preset
from evalpipe.tasks.task import ConfiguredTask


def ask(task: ConfiguredTask) -> Ask:
    return Ask(
        name=task.name,
        max_tokens=task.sampling.max_tokens,
        n=task.sampling.n,
        prompt_bytes=task.config.source.prompt_bytes,
        template_bytes=template_bytes(task.config.prompt.template, task.config.prompt.system),
        generates=task.config.scorer.method != "logprobs",
    )


def with_budgets(tasks: Sequence[ConfiguredTask], budgets: dict[str, int]) -> list[ConfiguredTask]:
    """`tasks` generating at most their budget in `budgets` (others unchanged)."""
    return [
        t.with_sampling(dataclasses.replace(t.sampling, max_tokens=budgets[t.name]))
        if budgets.get(t.name, t.sampling.max_tokens) < t.sampling.max_tokens
        else t
        for t in tasks
    ]


def fit_tasks(
    preset: Preset, tasks: Sequence[ConfiguredTask], *, max_tokens: int | None, given: int | None
) -> tuple[list[ConfiguredTask], Context]:
    """`tasks` capped at `max_tokens` (--max-tokens) and at the context chosen for them with
    `given` (--max-model-len), and that context."""
    if max_tokens is not None:
        tasks = with_budgets(tasks, {t.name: max_tokens for t in tasks})
    context = fit_context(preset, [ask(t) for t in tasks], given)
    return with_budgets(tasks, context.budgets), context
