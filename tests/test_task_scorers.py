"""Scorers against known cases: multiple-choice extraction, math equivalence, pass@k."""

from __future__ import annotations

import itertools
import math

import pytest

from evalpipe.tasks.config import ScorerConfig
from evalpipe.tasks.extract import extract_code, extract_hashes, extract_last_number, extract_letter
from evalpipe.tasks.scorerkinds import build_scorer
from evalpipe.tasks.scorers import extract_math, pass_at_k

CHOICES = ["Paris", "London", "Berlin", "New York City"]


@pytest.mark.parametrize(
    ("completion", "letter"),
    [
        ("The answer is (B).", "B"),
        ("B) London", "B"),
        ("B", "B"),
        ("**C**", "C"),
        ("**Answer:** C", "C"),
        ("c", "C"),
        ("the answer is d", "D"),
        ("Answer:\nB", "B"),
        ("I think the correct option is (A) because it is the capital.", "A"),
        ("Option C", "C"),
        ("I choose C.", "C"),
        ("  (D) New York City", "D"),
        ("A. Paris", "A"),
        ("London", "B"),
        ("It is London.", "B"),
        ("The answer is New York City", "D"),
        ("New York City is the biggest.", "D"),
        ("The capital is Paris (A).", "A"),
    ],
)
def test_letter_is_extracted_from_messy_completions(completion: str, letter: str) -> None:
    assert extract_letter(completion, CHOICES) == letter


@pytest.mark.parametrize(
    "completion",
    [
        "A dog barks at night.",  # an article, not option A
        "The answer is a bit unclear.",
        "I don't know.",
        "",
        "The answer is (E).",  # there is no option E
    ],
)
def test_no_letter_when_the_completion_picks_none(completion: str) -> None:
    assert extract_letter(completion, CHOICES) is None


def test_listing_several_marked_options_picks_none() -> None:
    assert extract_letter("Options: **A**, **B** or **C**?", CHOICES) is None


def _mc(answer: str, texts: list[str]) -> tuple[tuple[str | None, ...], float]:
    scorer = build_scorer(ScorerConfig(kind="multiple_choice"))
    (scored,) = scorer.score_many([({"answer": answer, "choices": CHOICES}, texts)])
    return scored.extracted, scored.scores["accuracy"]


def test_multiple_choice_accuracy_is_the_fraction_of_correct_completions() -> None:
    assert _mc("B", ["The answer is (B)."]) == (("B",), 1.0)
    assert _mc("B", ["A"]) == (("A",), 0.0)
    assert _mc("B", ["B", "C", "nonsense", "London"]) == (("B", "C", None, "B"), 0.5)


@pytest.mark.parametrize(
    ("reference", "completion"),
    [
        ("72", "The answer is 72."),
        ("Natalia sold 48/2 = 24 clips in May.\n#### 72", "48 + 24 = 72\n#### 72"),
        ("1000", "So the total is 1,000 dollars."),
        ("#### 1,000", "#### 1000"),
        ("\\frac{1}{2}", "The answer is $\\boxed{\\frac12}$"),
        ("0.5", "\\boxed{\\frac{1}{2}}"),
        ("\\frac{2}{3}", "It is 2/3"),
        ("0.75", "3/4"),
        ("-3", "x = -3"),
        ("#### -12", "The temperature drops to -12 degrees.\n#### -12"),
        ("18", "He pays $18."),
        ("10", "The answer is 10 cm"),
        ("1250.5", "The cost is \\$1,250.50"),
        ("\\frac{\\sqrt{3}}{2}", "\\boxed{\\frac{\\sqrt3}{2}}"),
        ("(3, \\frac{\\pi}{2})", "\\boxed{\\left(3, \\frac{\\pi}{2}\\right)}"),
        ("5", "#### 5\n\nQuestion: Tom has 17 apples"),  # `####` wins over later numbers
    ],
)
def test_math_equivalent_answers_score_one(reference: str, completion: str) -> None:
    scorer = build_scorer(ScorerConfig(kind="math"))
    (scored,) = scorer.score_many([({"answer": reference}, [completion])])
    assert scored.scores == {"accuracy": 1.0}, scored.extracted


@pytest.mark.parametrize(
    ("reference", "completion"),
    [
        ("72", "The answer is 73."),
        ("#### 42", "#### 24"),
        ("-3", "x = 3"),
        ("\\frac{1}{2}", "\\boxed{\\frac{1}{3}}"),
        ("1000", "no idea"),
        ("5", ""),
    ],
)
def test_math_wrong_answers_score_zero(reference: str, completion: str) -> None:
    scorer = build_scorer(ScorerConfig(kind="math"))
    (scored,) = scorer.score_many([({"answer": reference}, [completion])])
    assert scored.scores == {"accuracy": 0.0}


def test_math_extractors() -> None:
    text = "First 3 + 4 = 7, so the final answer is $\\boxed{7}$. Then 9 more."
    assert extract_math(text, "answer")[0] == "7"
    assert extract_math(text, "boxed")[0] == "7"
    assert extract_math(text, "last_number")[0] == "9"
    assert extract_math("I think it is 9", "boxed") == (None, [])
    assert extract_math("no numbers here", "answer") == (None, [])


def test_number_helpers() -> None:
    assert extract_hashes("so 3+4=7\n#### 1,234\nmore 5") == "1234"
    assert extract_hashes("no hashes 5") is None
    assert extract_last_number("it costs $1,250.50.") == "1250.50"
    assert extract_last_number("x = -3") == "-3"
    assert extract_last_number("none") is None


@pytest.mark.parametrize(
    ("completion", "code"),
    [
        ("Here:\n```python\ndef f(x):\n    return x\n```\nDone", "def f(x):\n    return x\n"),
        ("    return x + 1\n```\nAnd some prose", "    return x + 1\n"),
        ("```python\nimport os\n```\n```python\ndef f():\n    pass\n```", "def f():\n    pass\n"),
        ("```python\ndef f():\n    pass", "def f():\n    pass"),  # cut off by max_tokens
        ("Body:\n```\n    return 1\n```", "    return 1\n"),
        ("    return 1\n", "    return 1\n"),
    ],
)
def test_code_extraction(completion: str, code: str) -> None:
    assert extract_code(completion, "f") == code


def _brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """The definition: the share of k-subsets of the n samples that contain a passing one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(samples, k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 2, 1), (5, 2, 2), (5, 2, 3), (10, 3, 5), (6, 0, 2)])
def test_pass_at_k_matches_the_definition(n: int, c: int, k: int) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(_brute_force_pass_at_k(n, c, k))


def test_pass_at_k_closed_form_cases() -> None:
    assert pass_at_k(1, 1, 1) == 1.0
    assert pass_at_k(1, 0, 1) == 0.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 = c / n
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(5, 4, 2) == 1.0  # fewer than k failures: every pair has a pass
    assert pass_at_k(200, 13, 100) == pytest.approx(1 - math.comb(187, 100) / math.comb(200, 100))
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(3, 1, 4)


def test_options_rank_by_logprob_per_character() -> None:
    from evalpipe.tasks.scorers import best_option

    # "no": -3 over 2 characters = -1.5; "a longer answer": -8 over 15 = -0.53.
    assert best_option([" no", " a longer answer"], [-3.0, -8.0]) == 1
    assert best_option([" A", " B"], [-2.0, -1.0]) == 1  # letters rank by log-probability
    assert best_option([" A", " B"], [-1.0, -1.0]) == 0  # ties go to the first option
    # Per character of the text, the joining space left out (lm-eval's acc_norm): -2/1 < -3.5/2;
    # counting the space would rank them the other way (-2/2 > -3.5/3).
    assert best_option([" A", " BB"], [-2.0, -3.5]) == 1
    assert best_option([" é", " ab"], [-1.1, -2.0]) == 1  # characters, not UTF-8 bytes
