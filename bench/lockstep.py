"""Sides that take turns about a second of engine steps at a time, so a slow spell of the
machine falls on every side alike.

On a shared VM the same side of a comparison varies by a third between repetitions a few
minutes apart, more than a reordering gains. Here each side runs in a process of its own with
its own engine, and the processes take turns: a side runs engine steps until its turn has lasted
`quantum_s` (the step that crosses it ends the turn, with the side's work after it), then waits
while the others take theirs. Only one side runs at any moment, so no side slows another; each
side's time is its wall less the time it waited for turns. The sides then meet the machine's
slow and fast spells in the same proportion, seconds apart, instead of minutes.

A turn of many steps rather than one: a step that follows an idle gap runs slower here (up to
14 ms more at batch 1; BENCHMARKS §14), so with one step a turn every step would pay that, and a
side that needs more, smaller steps (the given order's tail) would pay more. With turns of equal
length every side pays it about equally often per second of its own.

    results = run_sides(side_function, {"raw": spec_a, "evalpipe": spec_b})

`side_function(name, spec, turns)` runs in a fresh (spawned) process: it builds its engine,
calls `turns.attach(llm_engine)` (every `llm_engine.step()` of that engine then runs in the
side's turns), and returns a JSON-able result; `turns.clock()` measures the side's own time
(its wall less its waits). The processes hold an engine each, so their memory adds up.
"""

from __future__ import annotations

import multiprocessing
import random
import time
import traceback
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any

READY, GO, RESULT, FAILED, EXIT = "ready", "go", "result", "failed", "exit"
# After its work, a process's idle OpenMP threads spin for a while before they sleep (libgomp's
# default: about 10 ms here, with torch's 2 threads): the next side starts once they have
# stopped, so no side computes beside another's spinning threads.
GRACE_S = 0.03
QUANTUM_S = 1.0  # a turn's length: a few steps at a full batch, tens at batch 1


class Turns:
    """A side's end of the turn-taking: before an engine step, wait for a new turn once the
    current one has lasted the quantum."""

    def __init__(self, conn: Connection, quantum_s: float) -> None:
        self._conn = conn
        self._quantum_s = quantum_s
        self._waited = 0.0
        self._turn_began: float | None = None

    def take(self) -> None:
        """Go on if this side's turn has lasted less than the quantum, else end the turn and
        wait for the next."""
        t0 = time.perf_counter()
        if self._turn_began is not None and t0 - self._turn_began < self._quantum_s:
            return
        self._conn.send((READY, None))
        if self._conn.recv() != GO:
            raise RuntimeError("lockstep: the coordinator sent something other than a turn")
        self._turn_began = time.perf_counter()
        self._waited += self._turn_began - t0

    def waited(self) -> float:
        return self._waited

    def clock(self) -> SideClock:
        """A clock that stands still while this side waits for its turn."""
        return SideClock(self)

    def attach(self, llm_engine: Any) -> None:
        """Every `llm_engine.step()` waits for a turn first (the raw `LLM.chat` loop and
        evalpipe's engine both step through it)."""
        step = llm_engine.step

        def stepped(*args: Any, **kwargs: Any) -> Any:
            self.take()
            return step(*args, **kwargs)

        llm_engine.step = stepped


class SideClock:
    """`time`'s clocks less the time a side waited for turns: put in place of a module's `time`
    (evalpipe's streaming loop times its engine steps with it), every duration it measures is
    the side's own, as in a run alone."""

    sleep = staticmethod(time.sleep)

    def __init__(self, turns: Turns) -> None:
        self._turns = turns

    def monotonic(self) -> float:
        return time.monotonic() - self._turns.waited()

    def perf_counter(self) -> float:
        return time.perf_counter() - self._turns.waited()


def _side(
    function: Callable[[str, Any, Turns], Any],
    name: str,
    spec: Any,
    conn: Connection,
    quantum_s: float,
) -> None:
    turns = Turns(conn, quantum_s)
    try:
        result = function(name, spec, turns)
    except BaseException:
        conn.send((FAILED, traceback.format_exc()))
        raise
    conn.send((RESULT, result))
    # A process's exit (its engine torn down, the interpreter finalised) takes CPU: it waits
    # until every side has its result, so it never runs beside another side's turn.
    conn.recv()


def run_sides(
    function: Callable[[str, Any, Turns], Any],
    specs: Mapping[str, Any],
    quantum_s: float = QUANTUM_S,
    seed: int = 0,
) -> dict[str, Any]:
    """Run `function(name, spec, turns)` for every side in a spawned process of its own, the
    sides taking turns of `quantum_s` (one at a time; 0: one engine step a turn), every side
    once a round, in an order shuffled each round; each side's result by name.

    Why shuffled: what a side leaves running after its turn (its scoring thread, the kernel
    writing back its files) runs in the next side's turn. In a fixed order each side always
    follows the same one, and the side after the raw call (which writes nothing) would be
    the only one never to pay for it."""
    context = multiprocessing.get_context("spawn")  # no vLLM state is inherited
    conns: dict[str, Connection] = {}
    processes = []
    for name, spec in specs.items():
        ours, theirs = context.Pipe()
        process = context.Process(target=_side, args=(function, name, spec, theirs, quantum_s),
                                  daemon=True)  # fmt: skip
        process.start()
        theirs.close()
        conns[name] = ours
        processes.append(process)
    results: dict[str, Any] = {}
    try:
        # Each side's next message: a request for a turn, or its result.
        waiting = {name: _receive(name, conn) for name, conn in conns.items()}
        shuffler = random.Random(seed)
        while waiting:
            for name in shuffler.sample(list(waiting), len(waiting)):
                kind, payload = waiting[name]
                if kind == RESULT:
                    results[name] = payload
                    del waiting[name]
                    continue
                conns[name].send(GO)
                waiting[name] = _receive(name, conns[name])  # after its step and what follows
                time.sleep(GRACE_S)
        for conn in conns.values():
            conn.send(EXIT)
    except BaseException:
        for process in processes:  # the others wait for turns that will not come
            process.kill()
        raise
    finally:
        for process in processes:
            process.join(timeout=60)
    return results


def _receive(name: str, conn: Connection) -> tuple[str, Any]:
    try:
        kind, payload = conn.recv()
    except EOFError:
        raise RuntimeError(f"lockstep: side {name!r} ended without a result") from None
    if kind == FAILED:
        raise RuntimeError(f"lockstep: side {name!r} failed:\n{payload}")
    return kind, payload
