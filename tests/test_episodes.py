"""The episode protocol in the streaming loop, with a toy environment (no BFCL): each step's
outcome comes from the task's environment, is checkpointed before the next step is admitted,
episodes interleave in one engine, and a resume continues each from its recorded steps."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner_support import ToyTask, preset

from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.records.episode import Ended, Step
from evalpipe.records.prompt import Prompt
from evalpipe.run.episodes import Episodic
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.run.stream import Item, run_stream
from evalpipe.rundir.samplelog import SampleRecord
from evalpipe.rundir.steps import StepRecord, stored_steps
from evalpipe.tasks.base import Sample, Scored

STEPS = 3


@dataclass(frozen=True, kw_only=True)
class CountingTask(ToyTask):
    """An episode of STEPS steps: the environment counts each answer's words; the prompt shows
    every count so far; the score is the number of steps."""

    def next_request(self, sample: Sample, steps: Sequence[Step]) -> Prompt | Ended:
        if len(steps) == STEPS:
            return Ended(reason="finished")
        counts = " ".join(str(s.outcome["words"]) for s in steps)
        return f"{sample.prompt} Counts so far: [{counts}]"

    def resolve(self, items: Sequence[tuple[Sample, Sequence[Step], Step]]) -> list[dict[str, Any]]:
        assert threading.current_thread() is not threading.main_thread()  # off the loop
        return [{"words": len(new.text.split()), "after": len(steps)} for _, steps, new in items]

    def score_episodes(self, items: Sequence[tuple[Sample, Sequence[Step], Ended]]) -> list[Scored]:
        return [Scored(extracted=(ended.reason,), scores={"steps": float(len(steps))})
                for _, steps, ended in items]  # fmt: skip


def test_episodes_step_through_their_environment_checkpointed_and_interleaved() -> None:
    task = CountingTask(name="count", category="episodes", size=3)
    assert isinstance(task, Episodic)
    engine = FakeEngine(preset(), EngineSettings(), delay_s=0.0, max_num_seqs=2)
    records: list[SampleRecord] = []
    steps: list[StepRecord] = []
    items = [Item(task=task, sample=s) for s in task.samples()]
    assert run_stream(engine, items, records.extend, window=2, write_step=steps.extend)
    assert sorted((s.sample_id, s.step.index) for s in steps) == [
        (f"count-{i}", k) for i in range(3) for k in range(STEPS)
    ]
    assert all(s.step.outcome == {"words": len(s.step.text.split()), "after": s.step.index}
               for s in steps)  # fmt: skip
    # Two slots: episodes 0 and 1 step side by side, and a next step goes in ahead of a new
    # episode, so episode 2 starts once one of them ended.
    order = [(s.sample_id, s.step.index) for s in steps]
    assert order.index(("count-1", 0)) < order.index(("count-0", 1))
    assert order.index(("count-0", STEPS - 1)) < order.index(("count-2", 0))
    assert all(r.scores == {"steps": STEPS} and r.extracted == ("finished",) for r in records)
    by_id = {r.sample_id: r for r in records}
    for s in steps:  # the record holds every step's text
        assert by_id[s.sample_id].turns[s.step.index] == s.step.text


def test_a_resume_continues_each_episode_after_its_recorded_steps(tmp_path: Path) -> None:
    task = CountingTask(name="count", category="episodes", size=4)

    def run(out: Path, engine: FakeEngine, stop: Any = None) -> Any:
        return run_evaluation(lambda settings: engine, [task], out, preset=preset(),
                              options=RunOptions(backend="fake", window=3), stop=stop)  # fmt: skip

    whole = FakeEngine(preset(), EngineSettings(), delay_s=0.0, max_num_seqs=2)
    assert run(tmp_path / "whole", whole).status == "complete"

    class StopAfter:
        @property
        def requested(self) -> str | None:
            return "test" if len(first.served) >= 5 else None

    first = FakeEngine(preset(), EngineSettings(), delay_s=0.0, max_num_seqs=2)
    assert run(tmp_path / "cut", first, StopAfter()).status == "interrupted"
    assert stored_steps(tmp_path / "cut" / "steps.jsonl")
    second = FakeEngine(preset(), EngineSettings(), delay_s=0.0, max_num_seqs=2)
    assert run(tmp_path / "cut", second).status == "complete"

    # A step recorded before the stop is never asked again, and none is missing.
    assert not set(first.served) & set(second.served)
    assert sorted(first.served + second.served) == sorted(whole.served)

    def lines(out: Path, name: str) -> list[str]:
        return sorted((out / name).read_text().splitlines())

    assert lines(tmp_path / "cut", "steps.jsonl") == lines(tmp_path / "whole", "steps.jsonl")
    rows = [json.loads(x) for x in lines(tmp_path / "cut", "samples.jsonl")]
    assert rows == [json.loads(x) for x in lines(tmp_path / "whole", "samples.jsonl")]
