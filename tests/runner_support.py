"""In-test tasks for the runner tests, and a driver that runs them in a child process.

`python tests/runner_support.py OUT_DIR [--delay S] [--window N]` runs the toy tasks with
the fake engine under the real signal handling, and exits with the runner's exit status, so
tests can signal or kill -9 a real process.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.catalog.preset import Preset, load_preset
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.records.sampling import SamplingSettings
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.rundir.checkpoint import StopOnSignal
from evalpipe.rundir.shard import Shard
from evalpipe.tasks.base import Sample, Scored

ANSWER = re.compile(r"The answer is (\d+)")


@dataclass(frozen=True, kw_only=True)
class ToyTask:
    """Question i asks for 10 + i; accuracy is 1 when the completion says so.

    The fake engine's hash-derived answers are single digits, so only scripted answers score.
    """

    name: str
    category: str
    size: int
    sampling: SamplingSettings = field(default_factory=SamplingSettings)

    def samples(self, limit: int | None = None) -> list[Sample]:
        n = self.size if limit is None else min(limit, self.size)
        return [
            Sample(
                id=f"{self.name}-{i}",
                prompt=f"Question {i} of {self.name}: what is 10 + {i}?",
                target=str(10 + i),
            )
            for i in range(n)
        ]

    def definition(self) -> dict[str, Any]:
        # `size` stands for the dataset's contents, not for how the task is defined.
        return {"question": "10 + i", "sampling": self.sampling.to_dict()}

    def score(self, sample: Sample, texts: Sequence[str]) -> Scored:
        extracted = tuple((m.group(1) if (m := ANSWER.search(t)) else None) for t in texts)
        return Scored(
            extracted=extracted,
            scores={"accuracy": float(extracted[0] == sample.target)},
        )

    def score_many(self, items: Sequence[tuple[Sample, Sequence[str]]]) -> list[Scored]:
        return [self.score(sample, texts) for sample, texts in items]


@dataclass(frozen=True, kw_only=True)
class ChatTask(ToyTask):
    """Multi-turn samples: a question and `follow_ups` later user turns each."""

    follow_ups: int = 1

    def samples(self, limit: int | None = None) -> list[Sample]:
        return [
            Sample(
                id=f"{self.name}-{i}",
                prompt=f"Question {i}: name a colour.",
                target="",
                turns=tuple(f"Follow-up {k} to {i}." for k in range(self.follow_ups)),
            )
            for i in range(self.size if limit is None else min(limit, self.size))
        ]


def toy_tasks() -> list[ToyTask]:
    return [
        ToyTask(name="alpha", category="math", size=9),
        ToyTask(name="beta", category="math", size=4),
        ToyTask(name="gamma", category="reasoning", size=7),
    ]


# The fake engine answers these questions right; every other answer comes from a hash.
SCRIPT = {
    "Question 0 of alpha:": "The answer is 10.",
    "Question 1 of alpha:": "The answer is 11.",
    "Question 2 of alpha:": "The answer is 12.",
    "Question 3 of beta:": "The answer is 13.",
    "Question 5 of gamma:": "The answer is 15.",
}


def preset() -> Preset:
    return load_preset("tiny_random")


def fake_engine(delay_s: float = 0.0) -> FakeEngine:
    return FakeEngine(preset(), EngineSettings(), script=SCRIPT, delay_s=delay_s)


def lines(out: Path) -> list[dict[str, Any]]:
    """The records of a run directory's samples.jsonl, in file order."""
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--window", type=int, default=2)
    parser.add_argument("--shard", type=Shard.parse, default=None)
    args = parser.parse_args(argv)
    with StopOnSignal() as stop:
        result = run_evaluation(
            lambda settings: fake_engine(args.delay),
            toy_tasks(),
            args.out,
            preset=preset(),
            options=RunOptions(backend="fake", window=args.window, shard=args.shard),
            stop=stop,
        )
    return result.exit_status


if __name__ == "__main__":
    sys.exit(main())
