"""The Task protocol and the values a task hands to the runner."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from evalpipe.core.errors import ConfigError
from evalpipe.core.options import positive
from evalpipe.records.completion import Completion
from evalpipe.records.prompt import Prompt
from evalpipe.records.sampling import SamplingSettings
from evalpipe.records.tools import ToolChoice


def check_limit(limit: object) -> None:
    """--limit: a positive number of samples per task, or None for all of them."""
    try:
        if limit is not None:
            positive(limit)
    except ValueError as exc:
        raise ConfigError(f"limit {exc}.") from None


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One evaluation item; `id` is stable across runs so resume and comparison can key on it."""

    id: str
    prompt: Prompt
    target: Any  # JSON-serialisable reference the scorer needs
    meta: dict[str, Any] = field(default_factory=dict)
    # Options to rank by log-probability instead of generating (multiple choice by logprobs),
    # in option order; the best one's `answer` becomes the completion. Empty: generate.
    options: tuple[Option, ...] = ()
    # A multi-turn sample: the user's later messages, each sent after the model's answer to
    # the one before (the prompt is the first). Empty: one turn.
    turns: tuple[str, ...] = ()
    # OpenAI function tools the model is shown with the prompt, and whether it must call one
    # (records/request.py); its completion's calls are parsed with the preset's tool_parser.
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: ToolChoice = "auto"


def conversation(sample: Sample, answers: Sequence[str]) -> Prompt:
    """The prompt for the turn after `answers` (the model's answers to the sample's first
    turns): the whole history as chat messages, so the chat template sees every turn."""
    if not answers:
        return sample.prompt
    if len(answers) > len(sample.turns):
        raise ConfigError(
            f"Sample {sample.id!r} has {len(sample.turns) + 1} turn(s) but {len(answers)} "
            "answers were given for the turns before the next."
        )
    prompt = sample.prompt
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    for answer, question in zip(answers, sample.turns, strict=False):
        messages += [
            {"role": "assistant", "content": answer},
            {"role": "user", "content": question},
        ]
    return messages


@dataclass(frozen=True, kw_only=True)
class Option:
    """One multiple-choice option, for ranking by log-probability."""

    answer: str  # recorded as the completion when this option ranks first (its letter)
    continuation: str  # the text scored after the prompt: " B", or " Paris"


@dataclass(frozen=True, kw_only=True)
class Scored:
    """A sample's answer(s) as extracted from the completions, and its metric values."""

    extracted: tuple[str | None, ...]
    scores: dict[str, float]
    # Reasoning models (a preset's reasoning_parser): per completion, the reasoning kept apart
    # from the scored answer, and whether it ended inside its reasoning (unanswered).
    reasoning: tuple[str | None, ...] = ()
    cut_off: tuple[bool, ...] = ()


class Task(Protocol):
    name: str
    category: str
    sampling: SamplingSettings

    def definition(self) -> dict[str, Any]:
        """What the task asks and how it scores, JSON-serialisable. Part of a run's fingerprint:
        resuming a run whose task definition changed is refused."""
        ...

    def samples(self, limit: int | None = None) -> list[Sample]:
        """The task's samples in a deterministic order; `limit` takes a deterministic subset."""
        ...

    def score(self, sample: Sample, texts: Sequence[str]) -> Scored: ...

    def score_many(self, items: Sequence[tuple[Sample, Sequence[str]]]) -> list[Scored]:
        """Score a chunk at once, in order (code tasks run its programs in one parallel pool)."""
        ...


def runs_code(task: Task) -> bool:
    """Whether scoring `task` runs model-written code in the sandbox: a task says so with a
    true `runs_code` attribute (none: it runs no code), and a run then checks the sandbox's
    isolation before it generates anything."""
    return getattr(task, "runs_code", False) is True


def output_schema(task: object) -> dict[str, Any] | None:
    """The JSON schema `task`'s completions must follow (structured outputs): a task, or a
    judge's grading, says so with a `json_schema` attribute (none: free text)."""
    schema = getattr(task, "json_schema", None)
    return schema if isinstance(schema, dict) else None


def gives_tools(task: Task) -> bool:
    """Whether `task`'s samples carry tools, so the preset's tool_parser shapes its results: a
    task says so with a true `gives_tools` attribute (none: it gives no tools)."""
    return getattr(task, "gives_tools", False) is True


def kept_whole(task: Task) -> str | None:
    """Why `task`'s samples may not be split by a pilot's draw or a shard's slice (some wait
    for others of the run: BFCL's memory questions for their prerequisite conversations): a
    task says so with a `kept_whole` text (none: its samples stand alone)."""
    why = getattr(task, "kept_whole", None)
    return why if isinstance(why, str) else None


@runtime_checkable
class ScoresResponses(Protocol):
    """A task that scores the engine's responses as they came (every option's log-likelihood
    and is_greedy, not only the likeliest option): lm-eval's tasks. The streaming loop calls
    this instead of `score_many`."""

    def score_responses(self, items: Sequence[tuple[Sample, Completion]]) -> list[Scored]: ...
