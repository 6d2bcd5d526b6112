"""A job's context length from its named tasks' budgets, and the table `evalpipe render` shows
of them; both from the task files alone (evalpipe/catalog/budgets.py), so a login-node command
loads no task code. Tasks chosen by category are the shipped defaults, with short budgets: only
named tasks and suites raise the context."""

from __future__ import annotations

from evalpipe.catalog.budgets import fit_context
from evalpipe.catalog.preset import Preset
from evalpipe.catalog.selection import Selection
from evalpipe.catalog.taskrefs import AskGiven, TaskRef, expand_refs, named_asks, protocol
from evalpipe.core.textable import format_table


def ask_given(selection: Selection) -> AskGiven:
    """What of the selection changes the kinds' asks."""
    return AskGiven(max_tokens=selection.max_tokens, mc_method=selection.mc_method,
                    ruler_lengths=selection.ruler_lengths)  # fmt: skip


def _asks(selection: Selection) -> list:
    return named_asks(selection.tasks or (), ask_given(selection))


def task_model_len(preset: Preset, selection: Selection, given: int | None) -> int | None:
    """The max_model_len to plan with: `given` (--max-model-len), else what the named tasks'
    budgets need, else None (the preset's)."""
    if given is not None or not selection.tasks:
        return given
    return fit_context(preset, _asks(selection), None).max_model_len


def budget_table(
    preset: Preset,
    selection: Selection,
    max_model_len: int,
    *,
    judge: str | None = None,
    user_sim: str | None = None,
) -> str:
    """Each named task with its n, token budget at `max_model_len`, protocol and the judge or
    user simulator it needs (`judge`, `user_sim`: the ones given), and the notes of what is
    capped; '' when the job names no tasks. A kind whose budget is set when its tasks load
    (BFCL, τ², RULER: its lengths' rows size the context only) shows '-'."""
    given, mc = ask_given(selection), selection.mc_method
    named = [(ref, entry, ref.spec.asks(ref, entry, given))
             for ref, entry in expand_refs(selection.tasks or ())]  # fmt: skip
    asks = [ask for _, _, got in named for ask in got]
    if not named:
        return ""
    context = fit_context(preset, asks, max_model_len)
    rows = []
    for ref, entry, got in named:
        said = (protocol(ref, entry, mc_method=mc), _helper(ref, judge, user_sim))
        rows += [
            (a.name, "-" if a.sizes_only else a.n, context.budgets.get(a.name, "-"), *said)
            for a in got
        ] or [(str(ref), "-", "-", *said)]
    table = format_table(("task", "n", "max_tokens", "protocol", "judge / user"), rows)
    notes = list(context.notes)
    unsized = [str(ref) for ref, _, got in named if not got or all(a.sizes_only for a in got)]
    if unsized:
        said = "n and max_tokens are their benchmark's, set as they load"
        notes.append(f"{', '.join(unsized)}: {said}")
    shown = "".join(f"\nnote: {n}" for n in notes)
    return (
        f"{table}\nmax_model_len {max_model_len} (preset: {preset.max_model_len}; the model's "
        f"ceiling: {preset.architecture.ceiling_text()}){shown}\n"
    )


def _helper(ref: TaskRef, judge: str | None, user_sim: str | None) -> str:
    """The judge a judged task is graded by, or the user an agent task's episodes talk to."""
    if ref.spec.judged:
        return judge or "needs --judge"
    if ref.spec.agent:
        return f"user: {user_sim}" if user_sim else "needs --user-sim"
    return "-"
