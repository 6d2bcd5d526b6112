"""Scorers: completions + reference → per-sample metric values.

- multiple_choice: the option letter extracted from each completion (extract.py, or a reference
  protocol's extraction in mcq.py) against the answer; metric `accuracy` = the fraction of the
  n completions that pick it (and `no_answer` for the reference protocols).
- math: the final answer extracted (GSM8K `#### N`, then math-verify's LaTeX/expression
  extraction, then the last number) and checked for mathematical equivalence with math-verify;
  metric `accuracy` as above. With n > 1 completions the mean is named `avg@n` (AIME's avg@16),
  and each configured k > 1 adds `pass@k` (unbiased, as for code) and `maj@k` (math_metrics.py).
- code: each completion run in the sandbox, the benchmark's tests in a process of their own that
  calls it (docs/sandbox.md, "The verdict"); metrics `pass@k` for each configured k, the
  unbiased estimator of Chen et al. (2021) over the n completions.
- ifeval: IFEval's verifiable instructions checked on each completion (tasks/ifeval.py);
  prompt- and instruction-level accuracy, strict and loose.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from evalpipe.sandbox.program import Program
from evalpipe.tasks.base import Scored
from evalpipe.tasks.extract import extract_code, extract_hashes, extract_last_number, extract_letter
from evalpipe.tasks.math_metrics import pass_at_k, sampled_scores, vote_key
from evalpipe.tasks.mcq import extract_answer_line, extract_answer_stages

Target = dict[str, Any]
# evalpipe.sandbox.pool.run_programs, or a stand-in with the same signature.
RunPrograms = Callable[..., Sequence[Any]]


class Scorer(Protocol):
    def score_many(self, items: Sequence[tuple[Target, Sequence[str]]]) -> list[Scored]:
        """One Scored per (reference, completions) pair, in order."""
        ...


def best_option(continuations: Sequence[str], logprobs: Sequence[float]) -> int:
    """The index of the most likely option, ranked as lm-eval's `acc_norm`: log-probability per
    character of the option's text, without the space that joins it to the prompt, so longer
    option texts are not penalised for their length. Letters all have one length, so they rank
    by log-probability (lm-eval's `acc`). Ties go to the first option, as numpy's argmax."""
    per_char = [
        lp / max(1, len(c.removeprefix(" "))) for c, lp in zip(continuations, logprobs, strict=True)
    ]
    return max(range(len(per_char)), key=per_char.__getitem__)


def _mean(values: Sequence[bool]) -> float:
    return sum(values) / len(values) if values else 0.0


# Multiple-choice extractors: (completion, option texts) -> the letter picked, or None.
LETTER_EXTRACTORS: dict[str, Callable[[str, Sequence[str]], str | None]] = {
    "letter": extract_letter,
    "answer_line": extract_answer_line,
    "answer_stages": extract_answer_stages,
}
# Reference protocols score an answer nothing can be extracted from as wrong; these extractors
# also report how often that happened (`no_answer`: the fraction of a sample's completions).
COUNTS_NO_ANSWER = ("answer_line", "answer_stages")


class MultipleChoiceScorer:
    def __init__(self, extractor: str = "letter") -> None:
        self._extract = LETTER_EXTRACTORS[extractor]
        self._no_answer = extractor in COUNTS_NO_ANSWER

    def score_many(self, items: Sequence[tuple[Target, Sequence[str]]]) -> list[Scored]:
        out = []
        for target, texts in items:
            letters = [self._extract(t, target["choices"]) for t in texts]
            scores = {"accuracy": _mean([x == target["answer"] for x in letters])}
            if self._no_answer:
                scores["no_answer"] = _mean([x is None for x in letters])
            out.append(Scored(extracted=tuple(letters), scores=scores))
        return out


class MathScorer:
    """Equivalence by math-verify: 1/2 = 0.5 = \\frac{1}{2}, "1,000" = 1000, -3 = −3."""

    def __init__(self, extractor: str, ks: Sequence[int] = (1,)) -> None:
        self._extractor = extractor
        self._ks = tuple(ks)

    def score_many(self, items: Sequence[tuple[Target, Sequence[str]]]) -> list[Scored]:
        from math_verify import verify

        timeout = _timeout()
        out = []
        for target, texts in items:
            gold = parse_reference(target["answer"])
            found = [extract_math(t, self._extractor) for t in texts]
            correct = [
                bool(gold and parsed and verify(gold, parsed, timeout_seconds=timeout))
                for _, parsed in found
            ]
            extracted = tuple(text for text, _ in found)
            scores = sampled_scores(correct, [vote_key(parsed) for _, parsed in found], self._ks)
            out.append(Scored(extracted=extracted, scores=scores))
        return out


def _timeout() -> int | None:
    # math-verify times out with SIGALRM, which only the main thread may set.
    return 5 if threading.current_thread() is threading.main_thread() else None


def parse_reference(answer: str) -> list[Any]:
    """A reference answer parsed by math-verify: GSM8K solutions by their `#### N` line,
    others (MATH's LaTeX answers) as one LaTeX expression, else as a plain expression."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    hashes = extract_hashes(answer)
    if hashes is not None:
        return parse(hashes, [ExprExtractionConfig()], parsing_timeout=_timeout())
    configs = [LatexExtractionConfig(), ExprExtractionConfig()]
    return parse(f"${answer}$", configs, parsing_timeout=_timeout()) or parse(
        answer, configs, parsing_timeout=_timeout()
    )


def extract_math(text: str, extractor: str) -> tuple[str | None, list[Any]]:
    """(the answer as written, math-verify's parse of it); (None, []) when nothing is found.

    `answer`: `#### N`, else math-verify (\\boxed{}, "the final answer is", LaTeX or a plain
    expression), else the last number. `boxed`: only \\boxed{} or an anchored final answer.
    `last_number`: the last number in the text.
    """
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    timeout = _timeout()
    if extractor == "boxed":
        found = parse(
            text,
            [LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=False)],
            parsing_timeout=timeout,
        )
        return (str(found[-1]), found) if found else (None, [])
    number = extract_last_number(text) if extractor == "last_number" else extract_hashes(text)
    if number is None and extractor == "answer":
        found = parse(text, parsing_timeout=timeout)
        if found:
            return str(found[-1]), found
        number = extract_last_number(text)
    if number is None:
        return None, []
    return number, parse(number, [ExprExtractionConfig()], parsing_timeout=timeout)


class CodeScorer:
    """Runs every completion's test program in the sandbox, all items' programs in one pool."""

    def __init__(
        self, harness: str, ks: Sequence[int], timeout_s: float, run: RunPrograms | None
    ) -> None:
        self._build = PROGRAMS[harness]
        self._ks = tuple(ks)
        self._timeout_s = timeout_s
        self._run = run

    def score_many(self, items: Sequence[tuple[Target, Sequence[str]]]) -> list[Scored]:
        run = self._run
        if run is None:
            from evalpipe.sandbox.pool import run_programs as run
        codes = [[self._build(target, text) for text in texts] for target, texts in items]
        programs = [program for item in codes for _, program in item]
        results = iter(run(programs, timeout_s=self._timeout_s))
        out = []
        for item in codes:
            n = len(item)
            passed = sum(bool(next(results).passed) for _ in item)
            scores = {f"pass@{k}": pass_at_k(n, passed, k) for k in self._ks if k <= n}
            out.append(Scored(extracted=tuple(code for code, _ in item), scores=scores))
        return out


def humaneval_program(target: Target, completion: str) -> tuple[str, Program]:
    """(extracted code, sandbox program) for a HumanEval-format problem.

    A completion that defines the entry point replaces the prompt's stub (the prompt stays
    first for its imports and helpers); anything else continues the prompt's function body.
    The problem's `check` runs apart from the solution (the sandbox's `tests`).
    """
    entry = target["entry_point"]
    code = extract_code(completion, entry)
    defines = re.search(rf"^def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE)
    solution = target["prompt"] + ("\n" if defines else "") + code
    return code, Program(source=solution + "\n", tests=f"{target['test']}\n\ncheck({entry})\n")


def mbpp_program(target: Target, completion: str) -> tuple[str, Program]:
    """(extracted code, sandbox program) for an MBPP problem: the imports and the code, then,
    apart from it, the imports, the setup and the asserts."""
    code = extract_code(completion)
    imports = "\n".join(target["imports"])
    tests = [imports, target["setup"], "\n".join(target["tests"])]
    return code, Program(
        source="\n\n".join(p for p in (imports, code) if p) + "\n",
        tests="\n\n".join(p for p in tests if p) + "\n",
    )


PROGRAMS: dict[str, Callable[[Target, str], tuple[str, Program]]] = {
    "humaneval": humaneval_program,
    "mbpp": mbpp_program,
}
