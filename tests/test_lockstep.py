"""bench/lockstep.py: sides in processes of their own take turns (one engine step, or steps for a
quantum of time), never two at once, and each side's clock counts only its own time."""

from __future__ import annotations

import atexit
import itertools
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from lockstep import Turns, run_sides

STEP_S = 0.1


class SleepingEngine:
    """An engine whose every step sleeps STEP_S: the time a side would spend computing."""

    def step(self) -> float:
        t0 = time.time()
        time.sleep(STEP_S)
        return t0


def stepping_side(name: str, steps: int, turns: Turns) -> dict[str, Any]:
    engine = SleepingEngine()
    turns.attach(engine)
    clock = turns.clock()
    turns.take()
    t0 = clock.monotonic()
    spans, turn_starts = [], [0]
    for k in range(steps):
        waited = turns.waited()
        start = engine.step()
        spans.append((start, time.time()))
        if k and turns.waited() > waited:  # this step began a turn
            turn_starts.append(k)
    return {"own_s": clock.monotonic() - t0, "spans": spans, "turn_starts": turn_starts}


def exit_noting_side(name: str, spec: tuple[int, str], turns: Turns) -> dict[str, Any]:
    """A stepping side whose process notes the moment it exits."""
    steps, note = spec
    atexit.register(lambda: Path(note, name).write_text(str(time.time())))
    return stepping_side(name, steps, turns)


def failing_side(name: str, steps: int, turns: Turns) -> dict[str, Any]:
    if name == "bad":
        turns.take()
        raise ValueError(f"side {name} broke")
    return stepping_side(name, steps, turns)


def test_sides_step_one_at_a_time_and_count_only_their_own_time() -> None:
    results = run_sides(stepping_side, {"a": 6, "b": 6, "c": 3}, quantum_s=0)
    spans = sorted(span for r in results.values() for span in r["spans"])
    assert len(spans) == 15
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end  # no two sides' steps overlap
    # Each side waited for the others' steps, yet its own time is its own steps'.
    for name, steps in {"a": 6, "b": 6, "c": 3}.items():
        assert steps * STEP_S <= results[name]["own_s"] < steps * STEP_S + 0.8
    order = order_of(results, spans)
    rounds = [tuple(order[k : k + 3]) for k in range(0, 9, 3)]
    assert all(sorted(r) == ["a", "b", "c"] for r in rounds)  # each side once a round
    assert len(set(rounds)) > 1, rounds  # in a shuffled order


def test_a_turn_runs_steps_until_it_has_lasted_the_quantum() -> None:
    results = run_sides(stepping_side, {"a": 9, "b": 9}, quantum_s=2.5 * STEP_S)
    spans = sorted(span for r in results.values() for span in r["spans"])
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end
    for name in "ab":
        starts = [*results[name]["turn_starts"], 9]
        turns = [b - a for a, b in itertools.pairwise(starts)]
        # The step that crosses 2.5 steps' time ends a turn: 3 steps, 2 where steps ran slow.
        assert all(2 <= n <= 3 for n in turns[:-1]) and sum(turns) == 9, turns
        assert 9 * STEP_S <= results[name]["own_s"] < 9 * STEP_S + 0.8


def order_of(results: dict[str, Any], spans: list[tuple[float, float]]) -> list[str]:
    """Which side ran each step, in time order."""
    return [name for span in spans for name, r in results.items() if span in r["spans"]]


def test_a_failing_side_names_itself_and_its_error() -> None:
    with pytest.raises(RuntimeError, match=r"side 'bad' failed:[\s\S]*side bad broke"):
        run_sides(failing_side, {"good": 50, "bad": 1})


def test_a_finished_side_exits_only_once_every_side_is_done(tmp_path: Path) -> None:
    # A process's exit costs CPU (an engine torn down): it must not run beside another's turn.
    results = run_sides(exit_noting_side, {"short": (1, str(tmp_path)), "long": (6, str(tmp_path))})
    last_step_end = max(end for _, end in results["long"]["spans"])
    assert float((tmp_path / "short").read_text()) >= last_step_end
