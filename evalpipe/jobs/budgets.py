"""A job's context length from its named tasks' budgets, and the table `evalpipe render` shows
of them; both from the task files alone (evalpipe/catalog/budgets.py), so a login-node command
loads no task code. Tasks chosen by category are the shipped defaults, with short budgets: only
named tasks and suites raise the context."""

from __future__ import annotations

from evalpipe.catalog.budgets import fit_context
from evalpipe.catalog.preset import Preset
from evalpipe.catalog.taskrefs import named_asks
from evalpipe.core.textable import format_table
from evalpipe.run.options import RunnerOptions


def _asks(run: RunnerOptions) -> list:
    return named_asks(run.tasks or (), max_tokens=run.max_tokens, mc_method=run.mc_method)


def task_model_len(preset: Preset, run: RunnerOptions) -> int | None:
    """The max_model_len to plan with: --max-model-len, else what the named tasks' budgets
    need, else None (the preset's)."""
    if run.max_model_len is not None or not run.tasks:
        return run.max_model_len
    return fit_context(preset, _asks(run), None).max_model_len


def budget_table(preset: Preset, run: RunnerOptions, max_model_len: int) -> str:
    """Each named task with its n and token budget at `max_model_len`, and the notes of what
    is capped; '' when the job names no tasks."""
    asks = _asks(run)
    if not asks:
        return ""
    context = fit_context(preset, asks, max_model_len)
    rows = [(a.name, a.n, context.budgets.get(a.name, "-")) for a in asks]
    table = format_table(("task", "n", "max_tokens"), rows)
    notes = "".join(f"\nnote: {n}" for n in context.notes)
    ceiling = preset.architecture.max_position_embeddings
    return (
        f"{table}\nmax_model_len {max_model_len} (preset: {preset.max_model_len}; the model's "
        f"max_position_embeddings: {ceiling}){notes}\n"
    )
