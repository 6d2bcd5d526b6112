"""The streaming loop's threads: scoring runs on a worker, every hook on the loop's thread."""

from __future__ import annotations

import io
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from runner_support import ToyTask, fake_engine, preset, toy_tasks

from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.run import runner
from evalpipe.run.progress import Progress
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.run.stream import Hooks, Item, run_stream
from evalpipe.rundir.samplelog import SampleRecord, read_json
from evalpipe.tasks.base import Sample, Scored


class Recorder(Hooks):
    """Every hook call, with the thread it came on."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.scored_categories: list[str] = []

    def _note(self, name: str) -> None:
        self.calls.append((name, threading.get_ident()))

    def stopping(self) -> bool:
        self._note("stopping")
        return False

    def admitted(self, item: Item) -> None:
        self._note("admitted")

    def stepped(self, seconds: float, categories: Sequence[str]) -> None:
        self._note("stepped")

    def scored(self, category: str, seconds: float) -> None:
        self._note("scored")
        self.scored_categories.append(category)

    def written(self, records: Sequence[SampleRecord]) -> None:
        self._note("written")

    def streaming(self, write_scored: Callable[[], None]) -> None:
        self._note("streaming")


def test_every_hook_runs_on_the_loop_thread() -> None:
    hooks = Recorder()
    written: list[SampleRecord] = []
    items = [Item(task=t, sample=s) for t in toy_tasks() for s in t.samples()]
    assert run_stream(fake_engine(), items, written.extend, window=3, hooks=hooks)
    assert {thread for _, thread in hooks.calls} == {threading.get_ident()}
    assert {name for name, _ in hooks.calls} == {
        "stopping", "admitted", "stepped", "scored", "written", "streaming",
    }  # fmt: skip
    assert len(written) == len(items)
    assert set(hooks.scored_categories) == {"math", "reasoning"}


class SlowToyTask(ToyTask):
    """Scoring takes a while (as a code task's sandbox does), so it overlaps the loop's work."""

    def score_many(self, items: Sequence[tuple[Sample, Sequence[str]]]) -> list[Scored]:
        time.sleep(0.001)
        return super().score_many(items)


@pytest.fixture
def busy_threads() -> Iterator[None]:
    """Switch threads as often as the interpreter allows, so that a change made on the scoring
    thread can land inside a manifest save on the loop's thread."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


@pytest.mark.usefixtures("busy_threads")
def test_manifest_saves_while_scoring_adds_categories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every written batch saves the manifest (json's pure-Python encoder, for its indent) while
    # the next batch is scored: one sample finishes per engine step, the next is in flight, and
    # each task is a category of its own, so each batch scored adds a timing.
    monkeypatch.setattr(runner, "MANIFEST_SECONDS", 0.0)
    tasks = [SlowToyTask(name=f"task{i}", category=f"category{i}", size=2) for i in range(120)]
    engine = FakeEngine(preset(), EngineSettings(), max_num_seqs=1)
    result = run_evaluation(
        lambda settings: engine,
        tasks,
        tmp_path / "run",
        preset=preset(),
        options=RunOptions(backend="fake"),
        progress=lambda total, done: Progress(total, done, stream=io.StringIO()),
    )
    assert result.status == "complete"
    timings = read_json(tmp_path / "run" / "manifest.json")["timings"]
    assert {t.category for t in tasks} == {
        phase.removeprefix("score:") for phase in timings if phase.startswith("score:")
    }
