"""Loaded tasks' token budgets: --max-tokens caps, and the context the run gets for them
(the rule and its notes: evalpipe/catalog/budgets.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from evalpipe.catalog.budgets import Ask, Context, fit_context, template_bytes
from evalpipe.catalog.preset import Preset
from evalpipe.tasks.base import Task
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
    preset: Preset, tasks: Sequence[Task], *, max_tokens: int | None, given: int | None
) -> tuple[list[Task], Context]:
    """`tasks` capped at `max_tokens` (--max-tokens) and at the context chosen for them with
    `given` (--max-model-len), and that context. Only task files' tasks are fitted: lm-eval's
    keep the generation settings lm-eval gives them."""
    own = [t for t in tasks if isinstance(t, ConfiguredTask)]
    if max_tokens is not None:
        own = with_budgets(own, {t.name: max_tokens for t in own})
    context = fit_context(preset, [ask(t) for t in own], given)
    fitted = {t.name: t for t in with_budgets(own, context.budgets)}
    return [fitted.get(t.name, t) for t in tasks], context
