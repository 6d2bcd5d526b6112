"""The scorer kinds' registry: for each `scorer.kind` a task file may name, the reference a record
gives its scorer, the metrics it reports, the scorer itself and how `tasks list` describes it —
one entry per kind instead of a branch per kind in records, task, scorers and the CLI. What a
task file may say of a kind (its extractors, the fields it reads) is checked with the config:
tasks/config.py `SCORERS`; a new kind is an entry there and one here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evalpipe.core.errors import DatasetError
from evalpipe.tasks.config import ScorerConfig
from evalpipe.tasks.ifeval import METRICS as IFEVAL_METRICS
from evalpipe.tasks.ifeval import InstructionScorer, ifeval_target
from evalpipe.tasks.math_metrics import sampled_metrics
from evalpipe.tasks.packages import Source
from evalpipe.tasks.punkt_data import SOURCE as PUNKT
from evalpipe.tasks.records import Record
from evalpipe.tasks.scorers import (
    COUNTS_NO_ANSWER,
    CodeScorer,
    MathScorer,
    MultipleChoiceScorer,
    RunPrograms,
    Scorer,
)


@dataclass(frozen=True, kw_only=True)
class ScorerKind:
    """How one kind of scorer is fed, what it reports and what it is."""

    target: Callable[[Record, ScorerConfig], dict[str, Any]]  # the JSON-serialisable reference
    metrics: Callable[[ScorerConfig, int], tuple[str, ...]]  # (config, n completions)
    build: Callable[[ScorerConfig, RunPrograms | None], Scorer]
    describe: Callable[[ScorerConfig], str]  # a few words for `tasks list`
    packages: tuple[Source, ...] = ()  # installed packages it reads data from (their versions
    # are part of a run's fingerprint)


def _choice_metrics(config: ScorerConfig, n: int) -> tuple[str, ...]:
    counted = config.extractor_name in COUNTS_NO_ANSWER
    return ("accuracy", "no_answer") if counted else ("accuracy",)


def _choice_description(config: ScorerConfig) -> str:
    if config.method == "logprobs":
        return f"logprobs ({config.continuation or 'letter'})"
    return f"generate ({config.extractor_name})"


def _code_target(record: Record, config: ScorerConfig) -> dict[str, Any]:
    if config.harness == "humaneval":
        return {k: record[k] for k in ("prompt", "test", "entry_point")}
    if config.harness == "livecodebench":
        from evalpipe.tasks.livecodebench import problem

        return problem(record)
    tests = record["tests"]
    if not isinstance(tests, list) or not all(isinstance(t, str) for t in tests):
        raise DatasetError(f"field 'tests' must be a list of assert statements, got {tests!r}")
    imports = record.get("imports") or []
    return {
        "tests": tests,
        "setup": record.get("setup") or "",
        "imports": [imports] if isinstance(imports, str) else list(imports),
    }


def _code_scorer(config: ScorerConfig, run_programs: RunPrograms | None) -> Scorer:
    if config.harness == "livecodebench":
        from evalpipe.tasks.livecodebench import LiveCodeBenchScorer

        return LiveCodeBenchScorer(config.k, config.timeout_s)
    return CodeScorer(str(config.harness), config.k, config.timeout_s, run_programs)


SCORER_KINDS: dict[str, ScorerKind] = {
    "multiple_choice": ScorerKind(
        target=lambda record, _: {"answer": record["answer_letter"], "choices": record["choices"]},
        metrics=_choice_metrics,
        build=lambda config, _: MultipleChoiceScorer(config.extractor_name),
        describe=_choice_description,
    ),
    "math": ScorerKind(
        target=lambda record, _: {"answer": str(record["answer"])},
        metrics=lambda config, n: sampled_metrics(n, config.k),
        build=lambda config, _: MathScorer(config.extractor_name, config.k),
        describe=lambda config: f"math ({config.extractor_name})",
    ),
    "code": ScorerKind(
        target=_code_target,
        metrics=lambda config, _: tuple(f"pass@{k}" for k in config.k),
        build=_code_scorer,
        describe=lambda config: f"code ({config.harness})",
    ),
    "ifeval": ScorerKind(
        target=lambda record, _: ifeval_target(record),
        metrics=lambda config, _: IFEVAL_METRICS,
        build=lambda config, _: InstructionScorer(),
        describe=lambda config: f"generate ({config.extractor_name})",
        packages=(PUNKT,),
    ),
}


def scorer_kind(config: ScorerConfig) -> ScorerKind:
    return SCORER_KINDS[config.kind]  # ScorerConfig admits only the kinds of config.SCORERS


def build_scorer(config: ScorerConfig, *, run_programs: RunPrograms | None = None) -> Scorer:
    """The scorer a task file asks for; `run_programs` defaults to evalpipe.sandbox.pool's."""
    return scorer_kind(config).build(config, run_programs)
