"""Episodes in the streaming loop: a sample whose next request comes from its recorded steps.

A task is episodic when it has the three methods of `Episodic`. Its sample goes through the
engine once per step: when a step's completion comes back, the task's environment resolves it
(BFCL: its calls decoded and executed in the sandbox) on a worker thread, the step is appended
to steps.jsonl, and the task says, from the recorded steps alone, what the next request is or
that the episode ended (with its reason). The next request is admitted ahead of new samples,
beside other episodes' steps, as a multi-turn chat's next turn is. A resumed run starts each
episode from its recorded steps, so nothing resolved before a kill is asked again.

An episode whose task says it is Blocked (it waits for other episodes to end: BFCL's memory
questions after their prerequisite conversations) is parked by the loop and asked again each
round; a task whose episodes wait so is told, before a resumed run streams, which of its
episodes ended before (`Restores`).

A step's request (StepRequest) carries its own tools and says who answers it: the evaluated
model, or an agent task's user simulator, whose requests go to the user simulator's engine
(run/usersim.py) under ids that start with USER_SIM_ID.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from evalpipe.core.errors import EngineError
from evalpipe.records.completion import Completion, Generation
from evalpipe.records.episode import Blocked, Ended, Step, StepRequest
from evalpipe.records.prompt import Prompt
from evalpipe.rundir.steps import StepRecord
from evalpipe.tasks.base import Sample, Scored

if TYPE_CHECKING:
    from evalpipe.run.stream import Item

# Batches of steps resolving at once: each is a worker thread waiting on its task's environment
# (BFCL: a sandboxed process), while the loop keeps the engine busy.
RESOLVERS = 2
# The request ids of steps the user simulator answers start with this (the loop numbers the rest).
USER_SIM_ID = "user-sim:"


@runtime_checkable
class Episodic(Protocol):
    """A task whose samples are episodes."""

    def next_request(
        self, sample: Sample, steps: Sequence[Step]
    ) -> Prompt | StepRequest | Ended | Blocked:
        """The request of the step after `steps` (the history as recorded; a bare prompt: the
        model answers it with the sample's tools), the episode's end and why, or Blocked when
        it may not start yet. Runs on the loop's thread and again on resume, from the record
        (and, for a Blocked one, from what the task was told of the others' ends)."""
        ...

    def resolve(self, items: Sequence[tuple[Sample, Sequence[Step], Step]]) -> list[dict[str, Any]]:
        """Per item (a sample, its recorded steps, its new step: the answer's text, who gave it
        and its parsed calls, no outcome yet): the environment's outcome of the new step, JSON,
        recorded with it. Called on a worker thread."""
        ...

    def score_episodes(self, items: Sequence[tuple[Sample, Sequence[Step], Ended]]) -> list[Scored]:
        """Each finished episode scored on its whole trajectory; `Ended.reason` is the task's
        own, or an engine refusal's reason ("context_overflow") for a step it refused."""
        ...


@runtime_checkable
class Restores(Protocol):
    """An episodic task whose episodes wait for others (Blocked): told what a resumed run
    recorded before its loop starts."""

    def restore(self, steps: Mapping[str, Sequence[Step]], written: AbstractSet[str]) -> None:
        """`steps`: the recorded steps of the task's samples, by sample id; `written`: the ids
        of its samples already written (finished)."""
        ...


def is_episode(item: Item) -> bool:
    return isinstance(item.task, Episodic)


def open_step(item: Item) -> Item | Blocked:
    """The item with its next request, or with `ended` set when there is none; its task's
    Blocked when it may not start yet (the loop parks it and asks again later)."""
    assert isinstance(item.task, Episodic)  # the loop asks is_episode first
    found = item.task.next_request(item.sample, item.steps)
    if isinstance(found, Blocked):
        return found
    if isinstance(found, Ended):
        return dataclasses.replace(item, ended=found)
    if not isinstance(found, StepRequest):
        found = StepRequest(prompt=found, tools=item.sample.tools,
                            tool_choice=item.sample.tool_choice)  # fmt: skip
    return dataclasses.replace(item, ask=found)


def ended_completion(item: Item) -> Completion:
    """A finished episode as one completion for its sample's record: the last step's text, and
    the tokens of every step (prompt tokens counted at each step, as the engine processed them)."""
    steps = item.steps
    return Completion(
        id=f"{item.sample.id}:ended",
        generation=Generation(
            texts=(steps[-1].text if steps else "",),
            prompt_tokens=sum(s.prompt_tokens for s in steps),
            completion_tokens=(sum(s.completion_tokens for s in steps),),
        ),
    )


def score(task: Episodic, items: Sequence[tuple[Item, Completion]]) -> list[Scored]:
    """Finished episodes scored by their task; a refused step ends its episode for the
    refusal's reason."""
    given = []
    for item, completion in items:
        refusal = completion.refusal
        ended = item.ended or Ended(reason=refusal.reason if refusal else "finished")
        given.append((item.sample, item.steps, ended))
    return task.score_episodes(given)


class Resolver:
    """The steps waiting for their environment, resolved on worker threads; `collect` writes
    the resolved ones (on the loop's thread) and hands back their episodes to go on."""

    def __init__(self, write_step: Callable[[Sequence[StepRecord]], None] | None) -> None:
        self._write = write_step
        self._pool = ThreadPoolExecutor(RESOLVERS, thread_name_prefix="evalpipe-episode")
        self._pending: deque[Future[list[Item]]] = deque()
        self._queued: list[tuple[Item, Completion]] = []

    @property
    def pending(self) -> bool:
        return bool(self._pending or self._queued)

    def submit(self, finished: list[tuple[Item, Completion]]) -> list[tuple[Item, Completion]]:
        """Queue the episodes' answered steps for their environments; return the rest (other
        samples, and episodes whose step was refused: they end)."""
        rest = []
        for item, completion in finished:
            if is_episode(item) and completion.refusal is None:
                self._queued.append((item, completion))
            else:
                rest.append((item, completion))
        self._dispatch()
        return rest

    def _dispatch(self) -> None:
        """The queued steps go to their environments, one batch per task, once fewer than
        RESOLVERS batches are running: steps that finish meanwhile wait and go together, so an
        environment that starts a process per batch (BFCL's sandbox) is not started once per
        engine step."""
        if not self._queued or sum(not f.done() for f in self._pending) >= RESOLVERS:
            return
        by_task: dict[str, list[tuple[Item, Completion]]] = {}
        for item, completion in self._queued:
            by_task.setdefault(item.task.name, []).append((item, completion))
        self._queued.clear()
        for batch in by_task.values():
            self._pending.append(self._pool.submit(_resolve, batch))

    def collect(self, *, block: bool) -> list[Item]:
        """The episodes whose steps resolved, each step recorded; with `block`, waits for the
        oldest batch when none is done."""
        self._dispatch()
        out: list[Item] = []
        while self._pending and (self._pending[0].done() or (block and not out)):
            items = self._pending.popleft().result()
            if self._write is not None:
                self._write([StepRecord(task=i.task.name, sample_id=i.sample.id, step=i.steps[-1])
                             for i in items])  # fmt: skip
            out += items
            self._dispatch()
        return out

    def close(self) -> None:
        """Every step already sent is resolved and recorded (work kept for a resume)."""
        while self._pending:
            self.collect(block=True)
        self._pool.shutdown()


def _resolve(batch: Sequence[tuple[Item, Completion]]) -> list[Item]:
    """On a worker thread: each step's outcome from its task, the step appended to its item."""
    task = batch[0][0].task
    assert isinstance(task, Episodic)
    new = [_step(item, c) for item, c in batch]
    outcomes = task.resolve(
        [(item.sample, item.steps, step) for (item, _), step in zip(batch, new, strict=True)]
    )
    out = []
    for (item, _), step, outcome in zip(batch, new, outcomes, strict=True):
        step = dataclasses.replace(step, outcome=outcome)
        out.append(dataclasses.replace(item, steps=(*item.steps, step), ask=None))
    return out


def _step(item: Item, completion: Completion) -> Step:
    """The new step of an answered request: its text, tokens, who answered, its parsed calls."""
    generation = _generation(item, completion)
    return Step(
        index=len(item.steps),
        text=generation.texts[0],
        prompt_tokens=generation.prompt_tokens,
        completion_tokens=generation.completion_tokens[0],
        by=item.ask.by if item.ask is not None else "model",
        calls=generation.tool_calls[0] if generation.tool_calls else None,
    )


def _generation(item: Item, completion: Completion) -> Generation:
    if completion.generation is None:
        raise EngineError(f"Episode {item.sample.id!r} came back without a generation.")
    return completion.generation
