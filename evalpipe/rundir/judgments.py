"""A judge's folder in a run directory: judge.json (`JudgeDefinition`: who judged, with which
prompts and sampling), judgments.jsonl (one judgment per line, kept in full) and summary.json
(`JudgeSummary`: scores and the judge's reliability), with their readers beside their writers.

A judgment is a sample record of the judge: `sample_id` is the judged sample's id and turn
("81@2"), `prompt` the judge's chat, `completions` its whole output, `extracted` the score as
read (None: a parse failure) and `scores` {"judge_score": value} when one was read, with
{"judge_out_of_range": 1.0} beside it when the rating lies outside the grading's scale. A
reasoning judge's record keeps its reasoning in `reasoning`, apart from the answer the score
is read from, and `cut_off` true when it stopped inside its reasoning (unparsed). So
judgments.jsonl has the checkpoint rules of samples.jsonl (results.py): appended as they
finish, a line cut short repaired, never asked twice.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.core.errors import DamagedFileError
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.samplelog import SampleRecord, read_json, refusal_counts, write_json
from evalpipe.tasks.benchmetrics import benchmark_metrics
from evalpipe.tasks.pairwise import (
    BASELINE_FIRST,
    MODEL_FIRST,
    ArenaScore,
    Consistency,
    arena_scores,
    consistency,
    pair_battles,
)

JUDGE = "judge.json"
JUDGMENTS = "judgments.jsonl"
SUMMARY = "summary.json"
SCORE = "judge_score"  # the metric a judgment's record carries
OUT_OF_RANGE = "judge_out_of_range"  # beside it, 1.0: a rating outside the grading's scale


def judgment_id(sample_id: str, turn: int, game: int | None = None) -> str:
    """A judgment's sample id: the judged sample and turn ("81@2"), and for a pairwise judgment
    the game, the order of the two answers ("uid@1/2")."""
    return f"{sample_id}@{turn}" + ("" if game is None else f"/{game}")


def judged_turn(record: SampleRecord) -> int:
    """The turn (from 1) a judgment grades."""
    return int(record.sample_id.rpartition("@")[2].partition("/")[0])


def judged_game(record: SampleRecord) -> tuple[str, int | None]:
    """The judged sample's id and, for a pairwise judgment, its game."""
    sample, _, rest = record.sample_id.rpartition("@")
    game = rest.partition("/")[2]
    return sample, int(game) if game else None


@dataclass(frozen=True, kw_only=True)
class JudgeDefinition:
    """Everything that shapes a judge's judgments, never the answers: the judge model (a
    preset's, or an endpoint's), its sampling and each judged task's grading (prompts,
    parsers). Its hash names the judge's folder; judge.json and the summary's `judge` hold it.
    An identity field that is None is left out of the file (an endpoint judge has no preset)."""

    backend: str | None = None
    preset: str | None = None
    model: str | None = None
    revision: str | None = None
    reasoning_parser: str | None = None  # separates a reasoning judge's thinking from its verdict
    sampling: Mapping[str, Any] = field(default_factory=dict)  # SamplingSettings.to_dict()
    gradings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # task → Grading's

    @property
    def fingerprint(self) -> str:
        """The name of the judge's folder: a hash of the definition as written."""
        canonical = json.dumps(
            self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=True
        )
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    @property
    def name(self) -> str:
        """The judge as its comparability note names it."""
        return self.model or self.preset or ""

    def to_dict(self) -> dict[str, Any]:
        identity = {
            "backend": self.backend,
            "preset": self.preset,
            "model": self.model,
            "revision": self.revision,
            "reasoning_parser": self.reasoning_parser,
        }
        return {k: v for k, v in identity.items() if v is not None} | {
            "sampling": dict(self.sampling),
            "gradings": {t: dict(g) for t, g in self.gradings.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JudgeDefinition:
        def text(key: str) -> str | None:
            return None if data.get(key) is None else str(data[key])

        return cls(
            backend=text("backend"),
            preset=text("preset"),
            model=text("model"),
            revision=text("revision"),
            reasoning_parser=text("reasoning_parser"),
            sampling=dict(data.get("sampling") or {}),
            gradings=dict(data.get("gradings") or {}),
        )


@dataclass(frozen=True)
class JudgeDir:
    """The paths of one judge's folder in run directory `run`."""

    run: RunDir
    fingerprint: str

    @property
    def path(self) -> Path:
        return self.run.judgments(self.fingerprint)

    @property
    def judge(self) -> Path:
        return self.path / JUDGE

    @property
    def judgments(self) -> Path:
        return self.path / JUDGMENTS

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY

    @property
    def damaged(self) -> Path:
        return self.path / "judgments.damaged.jsonl"


def write_judge(folder: JudgeDir, judge: JudgeDefinition, answers: str) -> None:
    """judge.json: the judge's definition and the fingerprint of the answers it judges."""
    folder.path.mkdir(parents=True, exist_ok=True)
    write_json(
        folder.judge, {"fingerprint": folder.fingerprint, "answers": answers, **judge.to_dict()}
    )


def score_of(record: SampleRecord) -> float | None:
    return record.scores.get(SCORE)


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


@dataclass(frozen=True, kw_only=True)
class MeanScore:
    """The mean score of one task's or one turn's judgments (None: none was readable)."""

    mean: float | None
    n: int

    def to_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "n": self.n}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MeanScore:
        return cls(mean=data.get("mean"), n=int(data.get("n") or 0))


@dataclass(frozen=True, kw_only=True)
class PairwiseSummary:
    """A pairwise task's (Arena-Hard's) result: the model's score against the baseline (None
    when no pair was scored), the pairs judged in both orders and how often the orders
    disagree, and how many judgments gave each verdict ("none": unreadable)."""

    baseline: str | None
    pairs: int
    pairs_scored: int
    arena: ArenaScore | None
    position: Consistency
    verdicts: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "pairs": self.pairs,
            "pairs_scored": self.pairs_scored,
            **(self.arena.to_dict() if self.arena is not None else dict.fromkeys(SCORE_KEYS)),
            "position": self.position.to_dict(),
            "verdicts": dict(self.verdicts),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PairwiseSummary:
        position = data["position"]
        return cls(
            baseline=data.get("baseline"),
            pairs=data["pairs"],
            pairs_scored=data["pairs_scored"],
            arena=None
            if data.get("score") is None
            else ArenaScore(**{k: data[k] for k in SCORE_KEYS}),
            position=Consistency(
                pairs=position["pairs"],
                inconsistent=position["inconsistent"],
                favours_first=position["favours_first"],
                favours_second=position["favours_second"],
            ),
            verdicts=dict(data.get("verdicts") or {}),
        )


SCORE_KEYS = ("battles", "win_rate", "score", "lower", "upper")  # ArenaScore's, flat in the file


@dataclass(frozen=True, kw_only=True)
class JudgeSummary:
    """A judge folder's summary.json: scores (parse failures left out) per task, per turn and
    overall, and the judge's reliability: parse failures, the score distribution, who judged,
    and whether its scores compare with the benchmark's published ones."""

    judge: JudgeDefinition
    judgments: int
    parse_failures: int
    overall: float | None
    tasks: dict[str, MeanScore]
    turns: dict[str, MeanScore]  # by turn number, as text ("1", "2")
    distribution: dict[str, int]  # a score as text ("7", "7.5") → judgments that gave it
    pairwise: dict[str, PairwiseSummary] = field(default_factory=dict)
    published_judge: str | None = None
    note: str | None = None  # why the scores do not compare with the published ones
    # Ratings outside the grading's scale (MT-Bench's 1-10), in the means as FastChat has them.
    out_of_range: int = 0
    # Parse failures of a reasoning judge that stopped inside its reasoning (no verdict given).
    cut_off_in_reasoning: int = 0
    # Judgments the judge's engine refused (a prompt longer than its context, …), by reason;
    # counted among the parse failures too (no score).
    refused: dict[str, int] = field(default_factory=dict)
    # Per task of a benchmark with figures of its own (HLE, SimpleQA): those figures.
    benchmarks: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def parse_failure_rate(self) -> float | None:
        return self.parse_failures / self.judgments if self.judgments else None

    @property
    def comparable(self) -> bool:
        return self.published_judge is not None and self.judge.name == self.published_judge

    def to_dict(self) -> dict[str, Any]:
        return {
            "judge": self.judge.to_dict(),
            "judgments": self.judgments,
            "parse_failures": self.parse_failures,
            "parse_failure_rate": self.parse_failure_rate,
            "overall": self.overall,
            "tasks": {t: v.to_dict() for t, v in self.tasks.items()},
            "turns": {t: v.to_dict() for t, v in self.turns.items()},
            "distribution": dict(self.distribution),
            **(
                {"pairwise": {t: p.to_dict() for t, p in self.pairwise.items()}}
                if self.pairwise
                else {}
            ),
            "published_judge": self.published_judge,
            "comparable": self.comparable,
            "note": self.note,
            "out_of_range": self.out_of_range,
            "cut_off_in_reasoning": self.cut_off_in_reasoning,
            **({"refused": dict(self.refused)} if self.refused else {}),
            **({"benchmarks": dict(self.benchmarks)} if self.benchmarks else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JudgeSummary:
        return cls(
            judge=JudgeDefinition.from_dict(data.get("judge") or {}),
            judgments=data["judgments"],
            parse_failures=data["parse_failures"],
            overall=data.get("overall"),
            tasks={t: MeanScore.from_dict(v) for t, v in (data.get("tasks") or {}).items()},
            turns={t: MeanScore.from_dict(v) for t, v in (data.get("turns") or {}).items()},
            distribution=dict(data.get("distribution") or {}),
            pairwise={
                t: PairwiseSummary.from_dict(p) for t, p in (data.get("pairwise") or {}).items()
            },
            published_judge=data.get("published_judge"),
            note=data.get("note"),
            out_of_range=int(data.get("out_of_range") or 0),
            cut_off_in_reasoning=int(data.get("cut_off_in_reasoning") or 0),
            refused=dict(data.get("refused") or {}),
            benchmarks=dict(data.get("benchmarks") or {}),
        )


def summarize_judgments(
    records: Sequence[SampleRecord],
    *,
    judge: JudgeDefinition,
    published_judge: str | None,
) -> JudgeSummary:
    """The judge's summary of its judgments `records` (parse failures left out of the means,
    as FastChat's MT-Bench results do; ratings out of range kept in them, as FastChat's are)."""
    scored = [(r, s) for r in records if (s := score_of(r)) is not None]
    by_task: dict[str, list[float]] = {}
    by_turn: dict[str, list[float]] = {}
    for record, score in scored:
        by_task.setdefault(record.task, []).append(score)
        by_turn.setdefault(str(judged_turn(record)), []).append(score)
    comparable = published_judge is not None and judge.name == published_judge
    return JudgeSummary(
        judge=judge,
        judgments=len(records),
        parse_failures=len(records) - len(scored),
        overall=_mean([s for _, s in scored]),
        tasks={t: MeanScore(mean=_mean(v), n=len(v)) for t, v in sorted(by_task.items())},
        turns={t: MeanScore(mean=_mean(v), n=len(v)) for t, v in sorted(by_turn.items())},
        distribution={
            _label(score): n for score, n in sorted(Counter(s for _, s in scored).items())
        },
        pairwise=_pairwise(records, judge.gradings),
        benchmarks=_benchmarks(records, judge.gradings),
        published_judge=published_judge,
        refused=refusal_counts(records),
        note=None
        if comparable
        else f"Scores from judge {judge.name!r} are not comparable to the benchmark's published "
        f"numbers, which come from {published_judge or 'another judge'}.",
        out_of_range=sum(OUT_OF_RANGE in r.scores for r in records),
        cut_off_in_reasoning=sum(any(r.cut_off) for r in records),
    )


def _pairwise(
    records: Sequence[SampleRecord], gradings: Mapping[str, Mapping[str, Any]]
) -> dict[str, PairwiseSummary]:
    """Per pairwise task (Arena-Hard): the model's score against the baseline with its
    bootstrap interval (tasks/pairwise.py arena_scores), from the questions with both games
    judged, in question-id order so that a resumed run scores the same; the pairs whose games
    both have a verdict, and how often the two orders disagree (position inconsistency)."""
    out = {}
    for task, grading in sorted(gradings.items()):
        if grading.get("kind") != "pairwise":
            continue
        games: dict[str, dict[int | None, str | None]] = {}
        verdicts: Counter[str] = Counter()
        for record in records:
            if record.task == task:
                sample, game = judged_game(record)
                games.setdefault(sample, {})[game] = record.extracted[0]
                verdicts[record.extracted[0] or "none"] += 1
        pairs = [
            (both[BASELINE_FIRST], both[MODEL_FIRST])
            for _, both in sorted(games.items())
            if BASELINE_FIRST in both and MODEL_FIRST in both
        ]
        battles = [b for pair in pairs if (b := pair_battles(*pair)) is not None]
        out[task] = PairwiseSummary(
            baseline=grading.get("baseline"),
            pairs=len(pairs),
            pairs_scored=len(battles),
            arena=arena_scores({task: [x for b in battles for x in b]}).get(task),
            position=consistency(pairs),
            verdicts=dict(sorted(verdicts.items())),
        )
    return out


def _benchmarks(
    records: Sequence[SampleRecord], gradings: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Per task whose grading's benchmark reports figures of its own: those figures, from its
    judgments' kept text in question-id order (None where the judge gave no verdict)."""
    out = {}
    for task, grading in sorted(gradings.items()):
        metrics = benchmark_metrics(grading.get("kind"))
        if metrics is not None:
            mine = sorted((r for r in records if r.task == task), key=lambda r: r.sample_id)
            out[task] = metrics.compute([r.extracted[0] if r.extracted else None for r in mine])
    return out


def _label(score: float) -> str:
    return str(int(score)) if score.is_integer() else str(score)


def write_judge_summary(folder: JudgeDir, summary: JudgeSummary) -> None:
    write_json(folder.summary, summary.to_dict())


def read_judge_summary(folder: JudgeDir) -> JudgeSummary:
    """A judge folder's summary.json; DamagedFileError naming the file when it lacks a figure
    the record needs (the judging phase writes it again when it next runs)."""
    summary = read_json(folder.summary)
    if "judgments" not in summary:
        raise DamagedFileError(f"{folder.summary} is not a judge summary (no 'judgments').")
    try:
        return JudgeSummary.from_dict(summary)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DamagedFileError(
            f"{folder.summary} is not a judge summary evalpipe can read ({exc!r}); run the "
            "judging again (`evalpipe run --phase judge` with the same judge) to rewrite it."
        ) from exc


def format_pairwise(pair: PairwiseSummary) -> str:
    """A pairwise task's score, interval and position inconsistency in one phrase."""
    position, arena = pair.position, pair.arena
    if arena is None:
        score = f"no pair scored ({pair.pairs} judged in both orders)"
    else:
        score = (
            f"score {100 * arena.score:.1f}% (-{100 * (arena.score - arena.lower):.1f} / "
            f"+{100 * (arena.upper - arena.score):.1f}), win rate "
            f"{100 * arena.win_rate:.1f}% over {pair.pairs_scored} pair(s)"
        )
    rate = position.rate
    return score + (
        f"; position inconsistency {position.inconsistent}/{position.pairs}"
        + ("" if rate is None else f" ({rate:.0%})")
    )


def judge_dirs(run: RunDir) -> list[JudgeDir]:
    """Every judge's folder in a run directory, by fingerprint."""
    root = run.judgments("")
    if not root.is_dir():
        return []
    return [JudgeDir(run, p.name) for p in sorted(root.iterdir()) if (p / JUDGE).is_file()]


def _reliability(summary: JudgeSummary) -> str:
    """The judgments cut off inside the judge's reasoning and the ratings out of range, as a
    clause to follow the parse failures ("" when there are none)."""
    parts = []
    if summary.cut_off_in_reasoning:
        parts.append(f"{summary.cut_off_in_reasoning} cut off inside the judge's reasoning")
    if summary.out_of_range:
        parts.append(f"{summary.out_of_range} rating(s) out of range (kept in the means)")
    return "".join(f"; {p}" for p in parts)


def format_judge_summary(summary: JudgeSummary) -> str:
    """The judge's scores and reliability as `evalpipe run` prints them."""

    def score(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    judge = summary.judge
    lines = [
        f"Judge {judge.model!r} ({judge.backend}): {summary.judgments} "
        f"judgment(s), {summary.parse_failures} without a readable score"
        + "".join(f", {n} refused ({reason})" for reason, n in summary.refused.items())
        + _reliability(summary),
        f"  overall  {score(summary.overall)}",
    ]
    lines += [f"  {t:<24} {score(v.mean)}  (n={v.n})" for t, v in summary.tasks.items()]
    lines += [f"  turn {t:<19} {score(v.mean)}  (n={v.n})" for t, v in summary.turns.items()]
    shown = ", ".join(f"{k}: {n}" for k, n in summary.distribution.items())
    lines.append(f"  scores   {shown or '-'}")
    for task, pair in summary.pairwise.items():
        lines.append(f"  {task} against {pair.baseline}: {format_pairwise(pair)}")
    for task, figures in summary.benchmarks.items():
        metrics = benchmark_metrics(summary.judge.gradings.get(task, {}).get("kind"))
        if metrics is not None:
            lines.append(f"  {task}: {metrics.describe(figures)}")
    if summary.note:
        lines.append(f"  note: {summary.note}")
    return "\n".join(lines)
