"""Which tasks a run evaluates and how many samples: the selection options record, below the
estimate that sizes a job from it and the runner that loads it (evalpipe/core/options.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evalpipe.catalog.pilot import AUTO, check_pilot, pilot_text
from evalpipe.catalog.taskfiles import MC_METHODS, check_day, day_text
from evalpipe.core.options import (
    check_options,
    count,
    count_option,
    counts_option,
    names_option,
    option,
    switch,
)

SELECTION = "selection"  # the option group: every command that selects tasks adds it


def day_option(*, flag: str, help: str) -> Any:
    """A selection option holding a day, YYYY-MM-DD (an end of the tasks' date windows)."""
    return option(
        flag=flag, group=SELECTION, parse=day_text, check=check_day, metavar="YYYY-MM-DD", help=help
    )


@dataclass(frozen=True, kw_only=True)
class Selection:
    """The tasks and samples a run evaluates; None: the preset's categories, each task file's
    value."""

    categories: tuple[str, ...] | None = names_option(
        flag="--categories",
        group=SELECTION,
        help="comma list (default: the preset's)",
    )
    tasks: tuple[str, ...] | None = names_option(
        flag="--tasks",
        group=SELECTION,
        help="comma list of task references: task names, task files, suites (suite:NAME, "
        "suite:FILE) and the other task kinds `evalpipe tasks list` shows (lm-eval's tasks, "
        "judged benchmarks)",
    )
    limit: int | None = count_option(
        flag="--limit",
        group=SELECTION,
        help="at most N samples per task",
    )
    max_tokens: int | None = count_option(
        flag="--max-tokens",
        group=SELECTION,
        help="cap every task's token budget at N, for smoke runs (default: each task's)",
    )
    mc_method: str | None = option(
        flag="--mc-method",
        group=SELECTION,
        choices=MC_METHODS,
        help="how multiple-choice tasks answer: generate a completion and extract the letter, "
        "or rank the option letters by log-probability (default: each task file's)",
    )
    since: str | None = day_option(
        flag="--since",
        help="tasks with a date window (LiveCodeBench's contest dates) keep only problems dated "
        "on or after this day (default: each task file's window)",
    )
    until: str | None = day_option(
        flag="--until", help="… and on or before this day (default: each task file's window)"
    )
    tau2_trials: int | None = count_option(
        flag="--tau2-trials",
        group=SELECTION,
        help="episodes per τ²-bench task (τ²'s num_trials), for its pass^k (default: 1)",
    )
    tau2_max_steps: int | None = count_option(
        flag="--tau2-max-steps",
        group=SELECTION,
        help="end each τ²-bench episode after N steps, as τ²'s --max-steps (default: τ²'s, 200)",
    )
    allow_unsafe_code: bool = switch(
        flag="--allow-unsafe-code",
        group=SELECTION,
        help="run lm-eval tasks marked unsafe_code (their metric executes the programs the model "
        "writes, as humaneval's and mbpp's), scored inside evalpipe's sandbox; without it they "
        "are refused (docs/lmeval.md)",
    )
    pilot: str | None = option(
        flag="--pilot",
        group=SELECTION,
        parse=pilot_text,
        check=check_pilot,
        const=AUTO,
        metavar="FRACTION|N",
        help="run a pilot: a seeded sample of each task, stratified by prompt length (a "
        "fraction, N samples, or alone: enough for the mean answer length within ±10 percent "
        "at 90 percent confidence, 20-200 a task), then print the full run's estimate from what "
        "it measured; the full run resumes its samples (docs/planner.md, Pilot)",
    )
    pilot_seed: int | None = option(
        flag="--pilot-seed",
        group=SELECTION,
        parse=count,
        help="the seed of the pilot's draw (default: 0)",
    )
    ruler_lengths: tuple[int, ...] | None = counts_option(
        flag="--ruler-lengths",
        group=SELECTION,
        metavar="N,...",
        help="the context lengths in tokens RULER's samples are generated for, e.g. 4096,8192 "
        "(default: powers of two from 4096 up to the model's context; docs/ruler.md)",
    )

    def __post_init__(self) -> None:
        check_options(self)

    def categories_for(self, preset_categories: tuple[str, ...]) -> tuple[str, ...] | None:
        """The categories a run loads: the given ones, else the preset's unless tasks are named."""
        return self.categories or (None if self.tasks else preset_categories)
