"""A judge's folder in a run directory: judge.json (who judged, with which prompts and
sampling), judgments.jsonl (one judgment per line, kept in full) and summary.json (scores and
the judge's reliability), with their readers beside their writers.

A judgment is a sample record of the judge: `sample_id` is the judged sample's id and turn
("81@2"), `prompt` the judge's chat, `completions` its whole output, `extracted` the score as
read (None: a parse failure) and `scores` {"judge_score": value} when one was read. So
judgments.jsonl has the checkpoint rules of samples.jsonl (results.py): appended as they
finish, a line cut short repaired, never asked twice.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.core.errors import DamagedFileError
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.results import SampleRecord, read_json, write_json
from evalpipe.tasks.pairwise import (
    BASELINE_FIRST,
    MODEL_FIRST,
    arena_scores,
    consistency,
    pair_battles,
)

JUDGE = "judge.json"
JUDGMENTS = "judgments.jsonl"
SUMMARY = "summary.json"
SCORE = "judge_score"  # the metric a judgment's record carries


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


def judge_fingerprint(judge: Mapping[str, Any]) -> str:
    """The name of a judge's folder: a hash of everything that shapes its judgments (the judge
    model and endpoint, its prompts and parsers, its sampling), never of the answers."""
    canonical = json.dumps(judge, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


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


def write_judge(folder: JudgeDir, judge: Mapping[str, Any], answers: str) -> None:
    """judge.json: the judge's definition and the fingerprint of the answers it judges."""
    folder.path.mkdir(parents=True, exist_ok=True)
    write_json(folder.judge, {"fingerprint": folder.fingerprint, "answers": answers, **judge})


def score_of(record: SampleRecord) -> float | None:
    return record.scores.get(SCORE)


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def summarize_judgments(
    records: Sequence[SampleRecord],
    *,
    judge: Mapping[str, Any],
    published_judge: str | None,
) -> dict[str, Any]:
    """Scores (parse failures left out, as FastChat's MT-Bench results do) per task, per turn
    and overall, and the judge's reliability: parse failures, the score distribution, who
    judged, and whether its scores compare with the benchmark's published ones."""
    scored = [(r, s) for r in records if (s := score_of(r)) is not None]
    by_task: dict[str, list[float]] = {}
    by_turn: dict[str, list[float]] = {}
    for record, score in scored:
        by_task.setdefault(record.task, []).append(score)
        by_turn.setdefault(str(judged_turn(record)), []).append(score)
    name = str(judge.get("model") or judge.get("preset") or "")
    comparable = published_judge is not None and name == published_judge
    failures = len(records) - len(scored)
    pairwise = _pairwise(records, judge.get("gradings", {}))
    return {
        "judge": dict(judge),
        "judgments": len(records),
        "parse_failures": failures,
        "parse_failure_rate": failures / len(records) if records else None,
        "overall": _mean([s for _, s in scored]),
        "tasks": {t: {"mean": _mean(v), "n": len(v)} for t, v in sorted(by_task.items())},
        "turns": {t: {"mean": _mean(v), "n": len(v)} for t, v in sorted(by_turn.items())},
        "distribution": {
            _label(score): n for score, n in sorted(Counter(s for _, s in scored).items())
        },
        **({"pairwise": pairwise} if pairwise else {}),
        "published_judge": published_judge,
        "comparable": comparable,
        "note": None
        if comparable
        else f"Scores from judge {name!r} are not comparable to the benchmark's published "
        f"numbers, which come from {published_judge or 'another judge'}.",
    }


def _pairwise(
    records: Sequence[SampleRecord], gradings: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
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
        score = arena_scores({task: [x for b in battles for x in b]}).get(task)
        out[task] = {
            "baseline": grading.get("baseline"),
            "pairs": len(pairs),
            "pairs_scored": len(battles),
            **(score.to_dict() if score is not None else dict.fromkeys(SCORE_KEYS)),
            "position": consistency(pairs).to_dict(),
            "verdicts": dict(sorted(verdicts.items())),
        }
    return out


SCORE_KEYS = ("battles", "win_rate", "score", "lower", "upper")


def _label(score: float) -> str:
    return str(int(score)) if score.is_integer() else str(score)


def write_judge_summary(folder: JudgeDir, summary: Mapping[str, Any]) -> None:
    write_json(folder.summary, dict(summary))


def read_judge_summary(folder: JudgeDir) -> dict[str, Any]:
    summary = read_json(folder.summary)
    if "judgments" not in summary:
        raise DamagedFileError(f"{folder.summary} is not a judge summary (no 'judgments').")
    return summary


def format_pairwise(pair: Mapping[str, Any]) -> str:
    """A pairwise task's score, interval and position inconsistency in one phrase."""
    position = pair["position"]
    if pair["score"] is None:
        score = f"no pair scored ({pair['pairs']} judged in both orders)"
    else:
        score = (
            f"score {100 * pair['score']:.1f}% (-{100 * (pair['score'] - pair['lower']):.1f} / "
            f"+{100 * (pair['upper'] - pair['score']):.1f}), win rate "
            f"{100 * pair['win_rate']:.1f}% over {pair['pairs_scored']} pair(s)"
        )
    rate = position["rate"]
    return score + (
        f"; position inconsistency {position['inconsistent']}/{position['pairs']}"
        + ("" if rate is None else f" ({rate:.0%})")
    )


def judge_dirs(run: RunDir) -> list[JudgeDir]:
    """Every judge's folder in a run directory, by fingerprint."""
    root = run.judgments("")
    if not root.is_dir():
        return []
    return [JudgeDir(run, p.name) for p in sorted(root.iterdir()) if (p / JUDGE).is_file()]


def format_judge_summary(summary: Mapping[str, Any]) -> str:
    """The judge's scores and reliability as `evalpipe run` prints them."""

    def score(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    judge = summary["judge"]
    lines = [
        f"Judge {judge.get('model')!r} ({judge.get('backend')}): {summary['judgments']} "
        f"judgment(s), {summary['parse_failures']} without a readable score",
        f"  overall  {score(summary['overall'])}",
    ]
    lines += [f"  {t:<24} {score(v['mean'])}  (n={v['n']})" for t, v in summary["tasks"].items()]
    lines += [
        f"  turn {t:<19} {score(v['mean'])}  (n={v['n']})" for t, v in summary["turns"].items()
    ]
    shown = ", ".join(f"{k}: {n}" for k, n in summary["distribution"].items())
    lines.append(f"  scores   {shown or '-'}")
    for task, pair in summary.get("pairwise", {}).items():
        lines.append(f"  {task} against {pair['baseline']}: {format_pairwise(pair)}")
    if summary.get("note"):
        lines.append(f"  note: {summary['note']}")
    return "\n".join(lines)
