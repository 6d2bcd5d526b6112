"""SimpleQA: the grader prompt byte-equal to simple-evals' GRADER_TEMPLATE filled, the grades
as its grade_sample reads them, and the F-score and accuracy given attempted equal to what
SimpleQAEval.__call__ computes and prints when driven with the same grades, on 300+ fixtures."""

from __future__ import annotations

import ast
import asyncio
import random
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from judged_refs import reference

from evalpipe.tasks.kindbase import LoadOptions
from evalpipe.tasks.simpleqa import KIND, SimpleQaGrading, grade, simpleqa_metrics

# Judge replies of every shape: a bare letter, the letter after some words (a capital A in
# "A" or "As" counts first, as in simple-evals), lower case only (no grade: C), empty.
REPLIES = ["A", "B", "C", "B\n", "The grade is B", "As I see it: C", "correct", "", "b",
           "CORRECT", "INCORRECT: B", "(C) NOT_ATTEMPTED", "Grade: A", "xyz",
           "Because it is wrong, B"]  # fmt: skip


def fixtures(count: int, seed: int) -> list[tuple[str, str, str, str]]:
    """(question, gold target, predicted answer, judge reply) rows written here."""
    rng = random.Random(seed)
    return [
        (f"Who wrote book {i}?", f"Author {i % 7}", f"Maybe author {rng.randint(0, 9)}",
         rng.choice(REPLIES))
        for i in range(count)
    ]  # fmt: skip


QUESTION = re.compile(r"Question: (Who wrote book \d+\?)\nGold")


def scripted(reply: Callable[[str], str], asked: list[Any] | None = None) -> Any:
    """A grader model for simple-evals: the reply for the prompt it is sent, each prompt kept."""

    async def grader(messages: list[dict[str, str]]) -> str:
        if asked is not None:
            asked.append(messages)
        return reply(messages[0]["content"])

    return grader


class Sampler:
    """The answering model simple-evals drives: each question's predicted answer."""

    def __init__(self, predicted: dict[str, str]) -> None:
        self.predicted = predicted

    def _pack_message(self, content: str, role: str) -> dict[str, str]:
        return {"role": role, "content": content}

    async def __call__(self, messages: list[dict[str, str]], seed: int = 0) -> str:
        return self.predicted[messages[0]["content"]]


@pytest.fixture
def simple_evals(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    reference("simple_evals", monkeypatch, importable=True)
    try:
        try:
            from simple_evals.evals import simpleqa_eval
        except ImportError as exc:  # the --no-deps install: its imports do not resolve
            pytest.skip(f"simple-evals' SimpleQA does not import here ({exc}): make bench")
        yield simpleqa_eval
    finally:  # imported from the reference's folder: later tests must not find it in sys.modules
        for name in [m for m in sys.modules if m.partition(".")[0] == "simple_evals"]:
            del sys.modules[name]


def test_grader_prompt_and_grades_are_simple_evals(simple_evals: Any) -> None:
    grading = SimpleQaGrading(template=simple_evals.GRADER_TEMPLATE)
    evaluation = object.__new__(simple_evals.SimpleQAEval)
    rows = fixtures(320, seed=1)
    for question, target, predicted, reply in rows:
        asked: list[Any] = []
        evaluation.grader_model = scripted(lambda _: reply, asked)  # noqa: B023 (used at once)
        letter = asyncio.run(evaluation.grade_sample(question, target, predicted))
        from evalpipe.tasks.base import Sample

        sample = Sample(id="x", prompt=question, target={"question": question, "answer": target})
        (ask,) = grading.asks(sample, [predicted])
        assert ask.prompt == asked[0]  # byte-equal, one user message
        assert grading.read(reply, None) == (letter, float(letter == "A"))


def test_f_score_equals_what_simpleqa_eval_computes_and_prints(
    simple_evals: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simple_evals.seed_generator import SeedGenerator

    for seed, count in ((2, 100), (3, 17), (4, 1)):
        rows = fixtures(count, seed)
        evaluation = object.__new__(simple_evals.SimpleQAEval)
        evaluation.seed_generator = SeedGenerator()
        evaluation.custom_eval_config = None
        evaluation.examples = [{"problem": q, "answer": t, "predicted": p, "reply": r}
                               for q, t, p, r in rows]  # fmt: skip
        evaluation.n_repeats, evaluation.num_threads = 1, 4
        evaluation.cache_dir = str(tmp_path / f"cache{seed}")
        replies = {q: r for q, _, _, r in rows}
        evaluation.grader_model = scripted(lambda text, r=replies: r[QUESTION.search(text)[1]])
        # __call__ computes the F-score beside the aggregate it prints; both come from the grades
        # its loop made, which are what the printed rates count.
        asyncio.run(evaluation(Sampler({q: p for q, _, p, _ in rows})))
        printed = capsys.readouterr().out
        aggregate = ast.literal_eval(printed.split("AGGREGATE METRICS\n")[1].splitlines()[0])
        ours = simpleqa_metrics([grade(r) for *_, r in rows])
        for key, value in aggregate.items():
            assert ours[key] == value, key
        given, correct = aggregate["accuracy_given_attempted"], aggregate["is_correct"]
        f1 = 2 * given * correct / (given + correct) if given + correct > 0 else 0
        assert ours["f1"] == f1


def test_a_local_copy_is_read_in_order_with_ids(tmp_path: Path, simple_evals: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"metadata": "{}", "problem": f"Q{i}?", "answer": f"A{i}"} for i in range(3)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "test.parquet")
    loaded = KIND.load([], LoadOptions(judge_data=tmp_path / "test.parquet"))
    (task,) = loaded.tasks
    assert [(s.id, s.prompt) for s in task.samples()] == [
        (str(i), [{"role": "user", "content": f"Q{i}?"}]) for i in range(3)
    ]
    assert loaded.published == "gpt-4o"
