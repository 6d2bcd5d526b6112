"""The task files as names, without loading the tasks: which task and category names a command
line may use (so `evalpipe render` checks them without importing evalpipe.tasks), and the
multiple-choice methods a task file or `--mc-method` may name, and the days a task's date
window or `--since`/`--until` may name."""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Sequence
from typing import Any

from evalpipe.catalog.configpath import find_file, given_file, names
from evalpipe.catalog.suites import is_suite, load_suite
from evalpipe.core.configio import read_yaml, unknown_name

# How a multiple-choice answer is obtained: extracted from a generated completion, or the
# option letter the model finds most likely after the prompt (one scoring pass per option).
MC_METHODS = ("generate", "logprobs")
# A --tasks entry of EleutherAI lm-eval's (evalpipe/tasks/lmeval): lm-eval checks its names when
# the task loads.
LM_EVAL_PREFIX = "lm_eval:"

# Judged tasks (evalpipe/tasks/judged.py), named on --tasks beside the task files: MT-Bench,
# Arena-Hard-Auto, and a custom judge task file as judge:PATH.
MTBENCH = "mt_bench"
ARENA_HARD = "arena_hard"
JUDGE_PREFIX = "judge:"


def is_judged(task: str) -> bool:
    return task in (MTBENCH, ARENA_HARD) or task.startswith(JUDGE_PREFIX)


def parse_day(value: Any, what: str) -> datetime.date:
    """A day from a YAML date, a `YYYY-MM-DD` text or an ISO date-time; ValueError otherwise."""
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    try:
        return datetime.date.fromisoformat(str(value)[:10])
    except ValueError:
        raise ValueError(
            f"{what} {value!r} is not a date; write it as YYYY-MM-DD (e.g. 2024-08-01)"
        ) from None


def day_text(text: str) -> str:
    """--since/--until: a day, as YYYY-MM-DD."""
    try:
        return parse_day(text, "the day").isoformat()
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def check_day(value: str) -> None:
    if parse_day(value, "the day").isoformat() != value:
        raise ValueError(f"expected a day as YYYY-MM-DD, got {value!r}")


def task_names() -> list[str]:
    """Names of the task files in tasks/ of every config folder, sorted."""
    return names("tasks")


def category_names() -> list[str]:
    """Every category a task file's `category` key names, sorted."""
    found = (find_file("tasks", name) for name in task_names())
    return sorted({str(read_yaml(path).get("category")) for path in found if path is not None})


def check_selection(categories: Sequence[str] | None, tasks: Sequence[str] | None) -> None:
    """Refuse a category no task file names, or a task that is neither a task file's name nor a
    path to a task file, nor `suite:NAME` of a suite whose tasks all exist (UnknownNameError with
    near matches; ConfigError for a missing file)."""
    if categories:
        known = category_names()
        for category in categories:
            if category not in known:
                raise unknown_name("category", category, known)
    for ref in tasks or ():
        if ref.startswith(LM_EVAL_PREFIX) or is_judged(ref):
            continue
        in_suite = is_suite(ref)
        for task in load_suite(ref).task_refs() if in_suite else [ref]:
            if given_file("task", task) or find_file("tasks", task):
                continue
            error = unknown_name("task", task, task_names())
            raise type(error)(f"Suite {ref!r}: {error}") if in_suite else error
