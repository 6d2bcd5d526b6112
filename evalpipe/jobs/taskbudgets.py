"""A job's context length from its named tasks' budgets, and the table `evalpipe render` shows
of them; both from the task files alone (evalpipe/catalog/budgets.py), so a login-node command
loads no task code. Tasks chosen by category are the shipped defaults, with short budgets: only
named tasks and suites raise the context."""

from __future__ import annotations

from evalpipe.catalog.budgets import fit_context
from evalpipe.catalog.preset import Preset
from evalpipe.catalog.selection import Selection
from evalpipe.catalog.taskrefs import named_asks
from evalpipe.core.textable import format_table


def _asks(selection: Selection) -> list:
    return named_asks(
        selection.tasks or (), max_tokens=selection.max_tokens, mc_method=selection.mc_method
    )


def task_model_len(preset: Preset, selection: Selection, given: int | None) -> int | None:
    """The max_model_len to plan with: `given` (--max-model-len), else what the named tasks'
    budgets need, else None (the preset's)."""
    if given is not None or not selection.tasks:
        return given
    return fit_context(preset, _asks(selection), None).max_model_len


def budget_table(preset: Preset, selection: Selection, max_model_len: int) -> str:
    """Each named task with its n and token budget at `max_model_len`, and the notes of what
    is capped; '' when the job names no tasks."""
    asks = _asks(selection)
    if not asks:
        return ""
    context = fit_context(preset, asks, max_model_len)
    rows = [(a.name, a.n, context.budgets.get(a.name, "-")) for a in asks]
    table = format_table(("task", "n", "max_tokens"), rows)
    notes = "".join(f"\nnote: {n}" for n in context.notes)
    return (
        f"{table}\nmax_model_len {max_model_len} (preset: {preset.max_model_len}; the model's "
        f"ceiling: {preset.architecture.ceiling_text()}){notes}\n"
    )
