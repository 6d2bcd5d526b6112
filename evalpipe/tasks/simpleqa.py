"""SimpleQA: short factual questions (`basicv8vc/SimpleQA` on the hub, as nvidia-simple-evals
loads it, or a local copy given with --judge-data), each asked as the one user message, then
graded by a judge with simple-evals' GRADER_TEMPLATE: A CORRECT, B INCORRECT, C NOT_ATTEMPTED
(the first capital A, B or C in the judge's reply, else C). The template is read from
nvidia-simple-evals' source at run time; the F-score and accuracy given attempted are computed
as simple-evals' SimpleQAEval.__call__ does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from evalpipe.catalog.suites import SuiteEntry
from evalpipe.catalog.taskrefs import SIMPLEQA_MAX_TOKENS, TaskRef
from evalpipe.records.sampling import SamplingSettings
from evalpipe.tasks.base import Sample
from evalpipe.tasks.config import SourceConfig
from evalpipe.tasks.datasets import load_rows, read_copy
from evalpipe.tasks.gradings import BenchmarkCategory, JudgeAsk
from evalpipe.tasks.kindbase import Loaded, LoadOptions, TaskKind
from evalpipe.tasks.packaged import SOURCES, package_constant
from evalpipe.tasks.packages import Source

DATASET = "basicv8vc/SimpleQA"
SOURCE = SOURCES["simple_evals"]
EVAL = "simple_evals/evals/simpleqa_eval.py"
GRADE = re.compile(r"(A|B|C)")  # simpleqa_eval.py grade_sample's pattern
GRADES = {"A": "CORRECT", "B": "INCORRECT", "C": "NOT_ATTEMPTED"}
# simple-evals' SimpleQA grader (simple_evals.py's grading sampler for the published numbers).
PUBLISHED_JUDGE = "gpt-4o"


def grade(text: str) -> str:
    """The grade letter simple-evals reads from the judge's reply: the first A, B or C
    anywhere in it, else C (not attempted)."""
    match = GRADE.search(text)
    return match.group(0) if match else "C"


@dataclass(frozen=True, kw_only=True)
class SimpleQaGrading:
    """One judgment per answer: GRADER_TEMPLATE filled as the single user message; the score
    is 1.0 for A (correct), else 0.0. Every reply reads as a grade (C when none is named)."""

    template: str
    sampling: SamplingSettings | None = None
    scale: ClassVar[None] = None
    kind: ClassVar[str] = "simpleqa"

    def asks(self, sample: Sample, answers: Sequence[str]) -> list[JudgeAsk]:
        prompt = self.template.format(
            question=sample.target["question"],
            target=sample.target["answer"],
            predicted_answer=answers[-1],
        )
        return [JudgeAsk(turn=len(answers), prompt=[{"content": prompt, "role": "user"}])]

    def read(self, text: str, game: int | None) -> tuple[str | None, float | None]:
        letter = grade(text)
        return letter, float(letter == "A")

    def definition(self) -> dict[str, Any]:
        return {"kind": self.kind, "template": self.template}


def simpleqa_metrics(grades: Sequence[str | None]) -> dict[str, Any]:
    """simple-evals' aggregate of one grade per question (None: a judgment that gave none,
    refused or cut off, counted not attempted as simple-evals' default C): the three rates,
    accuracy given attempted and the F-score, in SimpleQAEval.__call__'s order of operations."""
    n = len(grades)
    letters = [g or "C" for g in grades]
    rates = {
        name: sum(x == letter for x in letters) / n if n else 0.0
        for letter, name in (("A", "is_correct"), ("B", "is_incorrect"), ("C", "is_not_attempted"))
    }
    attempted = rates["is_correct"] + rates["is_incorrect"]
    given = rates["is_correct"] / attempted if attempted > 0 else 0
    both = given + rates["is_correct"]
    f1 = 2 * given * rates["is_correct"] / both if both > 0 else 0
    return {"n": n, **rates, "is_given_attempted": attempted,
            "accuracy_given_attempted": given, "f1": f1}  # fmt: skip


def describe(metrics: dict[str, Any]) -> str:
    return (
        f"F-score {metrics['f1']:.3f}, correct {metrics['is_correct']:.3f}, accuracy given "
        f"attempted {metrics['accuracy_given_attempted']:.3f}, not attempted "
        f"{metrics['is_not_attempted']:.3f} (n={metrics['n']})"
    )


@dataclass(frozen=True, kw_only=True)
class SimpleQaTask(BenchmarkCategory):
    """SimpleQA's questions (task `simpleqa`), each the one user message, as simple-evals asks."""

    benchmark = "simpleqa"
    id_key = "id"
    packages: tuple[Source, ...] = (SOURCE,)

    def sample(self, row: dict[str, Any]) -> Sample:
        return Sample(
            id=str(row["id"]),
            prompt=[{"role": "user", "content": str(row["problem"])}],
            target={"question": str(row["problem"]), "answer": str(row["answer"])},
        )


def read_rows(given: Path | None) -> list[dict[str, Any]]:
    """The test split in its order, each row given its index as id (the dataset has none)."""
    rows = (
        read_copy("simpleqa", given)
        if given is not None
        else load_rows("simpleqa", SourceConfig(uri=f"hf:{DATASET}"), split="test", config=None,
                       base_dir=Path.cwd())
    )  # fmt: skip
    return [{"id": i, **row} for i, row in enumerate(rows)]


class SimpleQaKind(TaskKind):
    """`simpleqa`; it honours --max-tokens."""

    name = "simpleqa"
    measures_prompts = True

    def load(
        self, refs: Sequence[tuple[TaskRef, SuiteEntry | None]], options: LoadOptions
    ) -> Loaded:
        grading = SimpleQaGrading(template=package_constant(EVAL, "GRADER_TEMPLATE"))
        task = SimpleQaTask(
            name="simpleqa",
            category="simpleqa",
            topic="simpleqa",
            sampling=SamplingSettings(max_tokens=SIMPLEQA_MAX_TOKENS, temperature=0.0),
            rows=tuple(read_rows(options.judge_data)),
        )
        return Loaded(tasks=(task,), gradings={task.name: grading}, published=PUBLISHED_JUDGE)


KIND = SimpleQaKind()
