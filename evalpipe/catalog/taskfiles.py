"""The task files as names, without loading the tasks: which task and category names a command
line may use (so `evalpipe render` checks them without importing evalpipe.tasks), and the
multiple-choice methods a task file or `--mc-method` may name, and the days a task's date
window or `--since`/`--until` may name."""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path
from typing import Any

from evalpipe.catalog.budgets import Ask, template_bytes
from evalpipe.catalog.configpath import find_file, names
from evalpipe.catalog.suites import SuiteEntry
from evalpipe.core.configio import read_yaml
from evalpipe.records.sampling import DEFAULT_MAX_TOKENS, DEFAULT_N

# How a multiple-choice answer is obtained: extracted from a generated completion, or the
# option letter the model finds most likely after the prompt (one scoring pass per option).
MC_METHODS = ("generate", "logprobs")


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


def file_ask(
    path: Path, entry: SuiteEntry | None, *, max_tokens: int | None, mc_method: str | None
) -> Ask:
    """What the task file at `path` asks of the context (its suite entry's n and max_tokens
    applied, --max-tokens capping), read from the file without loading the task."""
    data = read_yaml(path)
    sampling, source = data.get("sampling") or {}, data.get("source") or {}
    scorer, prompt = data.get("scorer") or {}, data.get("prompt") or {}
    method = scorer.get("method", "generate")
    if mc_method and scorer.get("kind") == "multiple_choice":
        method = mc_method
    budget = (entry and entry.max_tokens) or sampling.get("max_tokens", DEFAULT_MAX_TOKENS)
    return Ask(
        name=str(data.get("name", path.stem)),
        max_tokens=min(budget, max_tokens or budget),
        n=(entry and entry.n) or sampling.get("n", DEFAULT_N),
        prompt_bytes=source.get("prompt_bytes"),
        template_bytes=template_bytes(prompt.get("template"), prompt.get("system")),
        generates=method != "logprobs",
    )


# A task file's scorer kind in a few words for `render`'s table (its extractor or harness added).
_SCORING = {
    "math": "math-verify",
    "code": "tests",
    "multiple_choice": "choice letter",
    "ifeval": "IFEval checks",
}


def file_protocol(path: Path, entry: SuiteEntry | None, *, mc_method: str | None) -> str:
    """The task file's protocol in a few words ("avg@16, math-verify (boxed)"), its suite
    entry's n applied, read without loading the task."""
    data = read_yaml(path)
    sampling, scorer = data.get("sampling") or {}, data.get("scorer") or {}
    n = (entry and entry.n) or sampling.get("n", DEFAULT_N)
    kind = str(scorer.get("kind", "-"))
    detail = scorer.get("harness") or scorer.get("extractor")
    scoring = _SCORING.get(kind, kind) + (f" ({detail})" if detail else "")
    if kind == "multiple_choice" and (mc_method or scorer.get("method")) == "logprobs":
        scoring = "choice log-likelihood"
    return f"avg@{n}, {scoring}" if n > 1 else scoring
