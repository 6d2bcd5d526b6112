"""Multi-turn samples in the streaming loop: the next turn follows its answer in the same loop,
every answered turn is checkpointed, and a resume generates only the missing turns."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from runner_support import ChatTask, preset

from evalpipe.core.errors import ConfigError
from evalpipe.engine.fake import FakeEngine, prompt_text
from evalpipe.engine.protocol import EngineSettings
from evalpipe.records.completion import Completion
from evalpipe.records.request import Request
from evalpipe.records.sampling import SamplingSettings
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.run.stream import Item, run_stream
from evalpipe.rundir.samplelog import SampleRecord
from evalpipe.rundir.turns import TurnRecord
from evalpipe.tasks.base import conversation


class LoggingEngine(FakeEngine):
    """One request at a time; logs every admission and finish by (sample, turn)."""

    def __init__(self) -> None:
        super().__init__(preset(), EngineSettings(), delay_s=0.0, max_num_seqs=1)
        self.events: list[tuple[str, str, int]] = []

    @staticmethod
    def _turn(request: Request) -> tuple[str, int]:
        text = prompt_text(request.prompt)
        return text.split("Question ")[1][0], text.count("assistant: ")

    def add(self, requests: Sequence[Request]) -> None:
        self.events += [("add", *self._turn(r)) for r in requests]
        super().add(requests)

    def _answer(self, request: Request) -> Completion:
        self.events.append(("done", *self._turn(request)))
        return super()._answer(request)


def test_conversation_carries_every_earlier_turn() -> None:
    sample = ChatTask(name="chat", category="chat", size=1, follow_ups=2).samples()[0]
    assert conversation(sample, ()) == sample.prompt
    assert conversation(sample, ("Red.", "Blue.")) == [
        {"role": "user", "content": "Question 0: name a colour."},
        {"role": "assistant", "content": "Red."},
        {"role": "user", "content": "Follow-up 0 to 0."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Follow-up 1 to 0."},
    ]
    with pytest.raises(ConfigError, match="3 turn"):
        conversation(sample, ("a", "b", "c"))


def test_a_multi_turn_sample_needs_one_completion() -> None:
    task = ChatTask(name="chat", category="chat", size=1, sampling=SamplingSettings(n=2))
    with pytest.raises(ConfigError, match="n: 1"):
        Item(task=task, sample=task.samples()[0])


def test_next_turn_is_admitted_while_other_samples_generate() -> None:
    task = ChatTask(name="chat", category="chat", size=3, follow_ups=2)
    engine = LoggingEngine()
    records: list[SampleRecord] = []
    turns: list[TurnRecord] = []
    items = [Item(task=task, sample=s) for s in task.samples()]
    assert run_stream(engine, items, records.extend, window=2, write_turn=turns.extend)
    events = engine.events
    # Sample 0's second turn goes in while sample 1's first is still waiting to finish.
    assert events.index(("add", "0", 1)) < events.index(("done", "1", 0))
    assert len(turns) == 6 and {t.turn for t in turns} == {0, 1}
    by_id = {r.sample_id: r for r in records}
    for t in turns:
        assert by_id[t.sample_id].turns[t.turn] == t.text  # the record holds every answer
    assert all(len(r.turns) == 3 and r.completions == r.turns[-1:] for r in records)


class StopAfter:
    """A stop flag raised once the engine has answered `n` requests."""

    def __init__(self, engine: FakeEngine, n: int) -> None:
        self.engine, self.n = engine, n

    @property
    def requested(self) -> str | None:
        return "test" if len(self.engine.served) >= self.n else None


def _run(out: Path, engine: FakeEngine, stop: StopAfter | None = None):
    return run_evaluation(
        lambda settings: engine,
        [ChatTask(name="chat", category="chat", size=4, follow_ups=2)],
        out,
        preset=preset(),
        options=RunOptions(backend="fake", window=3),
        stop=stop,
    )


def test_resume_generates_only_the_missing_turns(tmp_path: Path) -> None:
    whole = FakeEngine(preset(), EngineSettings(), delay_s=0.0, max_num_seqs=2)
    assert _run(tmp_path / "whole", whole).status == "complete"

    first = FakeEngine(preset(), EngineSettings(), delay_s=0.0, max_num_seqs=2)
    assert _run(tmp_path / "cut", first, StopAfter(first, 5)).status == "interrupted"
    stored = (tmp_path / "cut" / "turns.jsonl").read_text().splitlines()
    assert stored  # turns answered before the stop are on disk
    second = FakeEngine(preset(), EngineSettings(), delay_s=0.0, max_num_seqs=2)
    assert _run(tmp_path / "cut", second).status == "complete"

    # Nothing answered before the stop is asked again, and nothing is missing.
    assert not set(first.served) & set(second.served)
    assert sorted(first.served + second.served) == sorted(whole.served)

    def records(out: Path) -> list[dict]:
        rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
        return sorted(rows, key=lambda r: r["sample_id"])

    assert records(tmp_path / "cut") == records(tmp_path / "whole")


def test_single_turn_runs_write_no_turn_log(tmp_path: Path) -> None:
    from runner_support import fake_engine, toy_tasks

    run_evaluation(
        lambda settings: fake_engine(),
        toy_tasks(),
        tmp_path,
        preset=preset(),
        options=RunOptions(backend="fake"),
    )
    assert not (tmp_path / "turns.jsonl").exists()
