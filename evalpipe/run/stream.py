"""The streaming loop: keep the engine's queue full, score each sample as it finishes, write it.

Samples are admitted in run order, across task boundaries, up to the engine's window; after
every engine step the window is topped up again, so the batch never drains between tasks or
chunks. Finished samples are scored on a worker thread (code tasks run their programs in the
sandbox meanwhile) and appended to samples.jsonl by this thread alone, as soon as they are
scored; the owner's hooks run on this thread alone too. A stop request aborts whatever is in
flight.

A multi-turn sample goes through the engine once per turn: when turn k comes back, its answer
is handed to `write_turn` (the per-turn checkpoint) and turn k+1, with the whole history, is
admitted ahead of new samples, while other samples' turns keep generating. Only the last turn
is scored and written as the sample's record.

An episode (a task with the methods of episodes.Episodic: BFCL's multi-turn categories) goes
the same way, one request per step, its next request given by its task from the recorded steps
once its environment has resolved the last one (run/episodes.py). An episode that may not
start yet (Blocked: it waits for others to end) is parked and asked again each round.

A request the engine refuses (a prompt longer than its context, or any other per-request
refusal) fails its sample, not the run: the sample is written with the refusal, its
conversation ends at that turn, and it scores what its task gives an empty answer, every
score made 0 (a judge's judgment: no verdict). A written sample is finished: resume never asks
it again. Only a refusal for another reason than the context, before the engine has answered
any request, fails the run: then it is what every request asks (a setting the server does not
know), not one sample.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from evalpipe.core.errors import ConfigError, EngineError
from evalpipe.engine.protocol import Engine, Slots
from evalpipe.records.completion import Completion, Generation, Loglikelihood
from evalpipe.records.episode import Blocked, Ended, Step, StepRequest
from evalpipe.records.request import Request
from evalpipe.run import episodes
from evalpipe.rundir.samplelog import SampleRecord
from evalpipe.rundir.steps import StepRecord
from evalpipe.rundir.turns import TurnRecord
from evalpipe.tasks.base import (
    Sample,
    Scored,
    ScoresResponses,
    Task,
    conversation,
    output_schema,
)
from evalpipe.tasks.reasoning import reasoning_tokens
from evalpipe.tasks.scorers import best_option


@dataclass(frozen=True, kw_only=True)
class Item:
    """One sample of one task on its way through the engine."""

    task: Task
    sample: Sample
    # A multi-turn sample's answers to its first turns (stored, or just generated): this item
    # generates the turn after them.
    answers: tuple[str, ...] = ()
    # An episode's recorded steps, its next request once its task gave it, or its end.
    steps: tuple[Step, ...] = ()
    ask: StepRequest | None = None
    ended: Ended | None = None

    def __post_init__(self) -> None:
        several = self.sample.turns or episodes.is_episode(self)
        if several and (self.sample.options or self.task.sampling.n != 1):
            raise ConfigError(
                f"Sample {self.sample.id!r} of task {self.task.name!r} has several turns, so "
                f"each turn continues one answer: it needs n: 1 (got {self.task.sampling.n}) "
                "and no options."
            )

    @property
    def last_turn(self) -> bool:
        return len(self.answers) >= len(self.sample.turns)

    def request(self, request_id: str) -> Request:
        if self.sample.options:
            return Request(
                id=request_id,
                prompt=self.sample.prompt,
                continuations=tuple(o.continuation for o in self.sample.options),
            )
        if self.ask is not None:
            return Request(
                id=request_id,
                prompt=self.ask.prompt,
                sampling=self.ask.sampling or self.task.sampling,
                json_schema=output_schema(self.task),
                tools=self.ask.tools,
                tool_choice=self.ask.tool_choice,
            )
        return Request(
            id=request_id,
            prompt=conversation(self.sample, self.answers),
            sampling=self.task.sampling,
            json_schema=output_schema(self.task),
            tools=self.sample.tools,
            tool_choice=self.sample.tool_choice,
        )


class Wait:
    """What an item iterator yields when it has no item yet but may have more later (the judge
    following a run's answers as they are written): the loop admits nothing this round."""


WAIT = Wait()
WAIT_S = 0.05  # the loop's pause when it waits with nothing in flight


class Hooks:
    """What the loop reports to its owner; every method is optional.

    Every method is called on the loop's thread (the one that called run_stream), one call at a
    time, so an owner may change its state (a manifest, a progress bar) without a lock. Samples
    are scored on a worker thread, but their scoring times travel back with their records and
    are reported from the loop's thread. The one hand-over is `write_scored` (see `streaming`).
    """

    def stopping(self) -> bool:
        """On the loop's thread, before each round: True once the loop should abort what is
        in flight and return."""
        return False

    def admitted(self, item: Item) -> None:
        """On the loop's thread: `item` is about to be added to the engine."""

    def stepped(self, seconds: float, categories: Sequence[str]) -> None:
        """On the loop's thread: one engine step took `seconds` while samples of `categories`
        were in flight."""

    def occupied(self, seconds: float, slots: Slots, admitted: bool) -> None:
        """On the loop's thread, after `stepped`, where the engine reports its slots: how many
        sequence slots were busy in the step of `seconds`; `admitted`: requests were added
        just before it (so it prefilled their prompts)."""

    def scored(self, category: str, seconds: float) -> None:
        """On the loop's thread, just before `written` for the same batch: the scoring thread
        took `seconds` to score the batch's samples of `category`."""

    def written(self, records: Sequence[SampleRecord]) -> None:
        """On the loop's thread: `records` were handed to `write`."""

    def streaming(self, write_scored: Callable[[], None]) -> None:
        """On the loop's thread, once, as the loop starts. `write_scored()` writes the batches
        already scored but not yet written, calling `scored` and `written` for them on its
        caller's thread: for a watchdog whose loop is stuck in the engine for good (so the hooks
        still run on one thread at a time), never while the loop's own thread can still run."""


@dataclass(frozen=True, kw_only=True)
class _Scored:
    """One batch back from the scoring thread: its records, and how long each task's samples
    took to score, for the loop's thread to report."""

    records: list[SampleRecord]
    seconds: list[tuple[str, float]]  # (category, seconds), one per task in the batch


def run_stream(
    engine: Engine,
    items: Iterable[Item | Wait],
    write: Callable[[Sequence[SampleRecord]], None],
    *,
    shard: int | None = None,
    window: int | None = None,
    hooks: Hooks | None = None,
    write_turn: Callable[[Sequence[TurnRecord]], None] | None = None,
    write_step: Callable[[Sequence[StepRecord]], None] | None = None,
) -> bool:
    """Stream `items` through `engine`, handing each scored record to `write` (on this thread).

    Returns True when every item was written, False when `hooks.stopping()` cut it short (what
    was in flight is aborted; what finished is written). `window` caps the requests in flight
    (default: the engine's capacity). `write_turn` gets every answered turn of a multi-turn
    sample but its last, before the next turn is admitted; `write_step` every resolved step of
    an episode, before its next step is admitted. `items` may yield WAIT: nothing to
    admit yet; the loop goes on with what is in flight and asks again next round."""
    hooks = hooks or Hooks()
    limit = window or engine.capacity
    queue: Iterator[Item | Wait] = iter(items)
    in_flight: dict[str, Item] = {}
    next_turns: deque[Item] = deque()  # admitted before new samples: a conversation goes on
    # Episodes waiting for others to end, with what they wait for; asked again each round.
    parked: list[tuple[Item, Blocked]] = []
    stalled = False  # the last round ended with parked episodes and nothing else to run
    scoring: deque[Future[_Scored]] = deque()
    # Finished while the scoring thread was busy: scored as one batch once it is free, so a task
    # that starts a process per batch (BFCL's checker: seconds of imports) pays that once per
    # batch it is given, not once per engine step.
    unscored: list[tuple[Item, Completion]] = []
    exhausted = False
    counter = 0
    answered = False  # the engine has answered a request (see _check_refusals)
    resolver = episodes.Resolver(write_step)

    def deliver(batch: _Scored) -> None:
        for category, seconds in batch.seconds:
            hooks.scored(category, seconds)
        write(batch.records)
        hooks.written(batch.records)

    def write_scored() -> None:
        while scoring and scoring[0].done():
            deliver(scoring.popleft().result())

    hooks.streaming(write_scored)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalpipe-score") as pool:
        while True:
            if hooks.stopping():
                engine.abort()
                in_flight.clear()
                break
            batch: list[Request] = []
            waiting = False
            next_turns.extend(item for item, _ in parked)
            parked.clear()
            while len(in_flight) < limit and (next_turns or not exhausted):
                item = next_turns.popleft() if next_turns else next(queue, None)
                if item is None:
                    exhausted = True
                    break
                if isinstance(item, Wait):
                    waiting = True
                    break
                if episodes.is_episode(item) and item.ask is None:
                    opened = episodes.open_step(item)
                    if isinstance(opened, Blocked):
                        parked.append((item, opened))
                        continue
                    item = opened
                    if item.ended is not None:  # no next step: it goes to scoring
                        unscored.append((item, episodes.ended_completion(item)))
                        continue
                request_id = str(counter)
                if item.ask is not None and item.ask.by == "user_sim":
                    request_id = episodes.USER_SIM_ID + request_id
                counter += 1
                in_flight[request_id] = item
                batch.append(item.request(request_id))
                hooks.admitted(item)
            if batch:
                engine.add(batch)
            if in_flight:
                categories = sorted({i.task.category for i in in_flight.values()})
                t0 = time.monotonic()
                done = engine.step()
                seconds = time.monotonic() - t0
                hooks.stepped(seconds, categories)
                slots = engine.slots()
                if slots is not None:
                    hooks.occupied(seconds, slots, admitted=bool(batch))
                if done:
                    answered = answered or _check_refusals(done)
                    finished = [(in_flight.pop(c.id), c) for c in done]
                    finished = _continue(resolver.submit(finished), next_turns, write_turn)
                    unscored += finished
            next_turns.extend(resolver.collect(block=not in_flight and not next_turns))
            idle = not scoring or scoring[-1].done()
            if unscored and (idle or not in_flight):
                scoring.append(pool.submit(_score, list(unscored), shard))
                unscored.clear()
            while scoring and (scoring[0].done() or not (in_flight or resolver.pending)):
                deliver(scoring.popleft().result())
            busy = next_turns or in_flight or unscored or scoring or resolver.pending
            if exhausted and not busy and parked:
                # Nothing else left to run. The first such round may have ended what they wait
                # for (they are asked again next round); a second one in a row ended nothing.
                if stalled:
                    resolver.close()
                    raise _waiting_for_ever(parked)
                stalled = True
                continue
            stalled = False
            if exhausted and not busy:
                resolver.close()
                return True
            if waiting and not in_flight:
                time.sleep(WAIT_S)
        resolver.close()  # steps sent to their environments are recorded, for a resume
        if unscored:
            scoring.append(pool.submit(_score, unscored, shard))
        while scoring:  # what finished before the stop is kept
            deliver(scoring.popleft().result())
    return False


def _waiting_for_ever(parked: Sequence[tuple[Item, Blocked]]) -> ConfigError:
    """The error for parked episodes whose awaited episodes this run does not hold (a run
    given the questions without their conversations), naming them."""
    item, blocked = parked[0]
    after = ", ".join(blocked.after)
    return ConfigError(
        f"{len(parked)} episode(s) of task {item.task.name!r} (e.g. {item.sample.id!r}) wait for "
        f"{after}, which this run neither holds nor finished before: run them in the same "
        "run as the episodes that wait for them."
    )


def _check_refusals(done: Sequence[Completion]) -> bool:
    """True once a request is answered (or refused for its length only). Refusals for other
    reasons before that fail the run: nothing was answered, so the engine refuses what every
    request asks, not one sample."""
    if any(c.refusal is None or c.refusal.reason == "context_overflow" for c in done):
        return True
    refusal = done[0].refusal
    detail = refusal.detail if refusal is not None else ""
    raise EngineError(
        f"The engine refused the run's first request(s) ({detail}) and has answered none, so "
        "it refuses what every request asks, not one sample: fix the setting it names (or the "
        "server's), then rerun the same command to resume."
    )


def _continue(
    finished: list[tuple[Item, Completion]],
    next_turns: deque[Item],
    write_turn: Callable[[Sequence[TurnRecord]], None] | None,
) -> list[tuple[Item, Completion]]:
    """Checkpoint the answered turns that are not their sample's last and queue the turn after
    each; the rest (samples' last turns) go on to scoring."""
    last = []
    turns = []
    for item, completion in finished:
        if item.last_turn or completion.refusal is not None:  # a refusal ends the conversation
            last.append((item, completion))
            continue
        generation = _answer(item, completion)
        turns.append(
            TurnRecord(
                task=item.task.name,
                sample_id=item.sample.id,
                turn=len(item.answers),
                text=generation.texts[0],
                prompt_tokens=generation.prompt_tokens,
                completion_tokens=generation.completion_tokens[0],
            )
        )
        next_turns.append(
            Item(task=item.task, sample=item.sample, answers=(*item.answers, generation.texts[0]))
        )
    if turns and write_turn is not None:
        write_turn(turns)
    return last


def _score(finished: Sequence[tuple[Item, Completion]], shard: int | None) -> _Scored:
    """On the scoring thread: records for finished samples, scored per task in one batch (code:
    one sandbox pool), and each task's scoring time. Touches nothing the loop's thread owns."""
    by_task: dict[str, list[tuple[Item, Completion, Generation]]] = {}
    for item, refused in finished:
        completion = _stand_in(item, refused)
        by_task.setdefault(item.task.name, []).append((item, completion, _answer(item, completion)))
    records = []
    seconds = []
    for group in by_task.values():
        task = group[0][0].task
        t0 = time.monotonic()
        if isinstance(task, episodes.Episodic):
            scores = episodes.score(task, [(item, c) for item, c, _ in group])
        elif isinstance(task, ScoresResponses):
            scores = task.score_responses([(item.sample, c) for item, c, _ in group])
        else:
            scores = task.score_many([(item.sample, g.texts) for item, _, g in group])
        seconds.append((task.category, time.monotonic() - t0))
        for (item, completion, generation), scored in zip(group, scores, strict=True):
            refusal = completion.refusal
            records.append(
                SampleRecord(
                    task=task.name,
                    category=task.category,
                    sample_id=item.sample.id,
                    prompt=item.sample.prompt,
                    completions=("",) * len(generation.texts) if refusal else generation.texts,
                    extracted=(None,) * len(scored.extracted) if refusal else scored.extracted,
                    scores={k: 0.0 for k in scored.scores} if refusal else scored.scores,
                    prompt_tokens=generation.prompt_tokens,
                    completion_tokens=generation.completion_tokens,
                    option_logprobs=()
                    if refusal
                    else tuple(x.logprob for x in completion.loglikelihoods),
                    shard=shard,
                    reasoning=scored.reasoning,
                    reasoning_tokens=_reasoning_tokens(generation, scored),
                    cut_off=scored.cut_off,
                    turns=_turns(item, generation, refused=refusal is not None),
                    refusal=refusal,
                    tool_calls=() if refusal else generation.tool_calls,
                )
            )
    return _Scored(records=records, seconds=seconds)


def _reasoning_tokens(generation: Generation, scored: Scored) -> tuple[int, ...]:
    """Each completion's tokens spent reasoning; none when the task split no reasoning."""
    if not scored.reasoning:
        return ()
    parts = zip(generation.completion_tokens, generation.texts, scored.reasoning, strict=True)
    return tuple(reasoning_tokens(n, text, thought) for n, text, thought in parts)


def _turns(item: Item, generation: Generation, *, refused: bool) -> tuple[str, ...]:
    """A multi-turn sample's answers: every turn's, or those before the turn refused; an
    episode's: every step's text."""
    if episodes.is_episode(item):
        return tuple(step.text for step in item.steps)
    if not item.sample.turns:
        return ()
    return item.answers if refused else (*item.answers, generation.texts[0])


def _stand_in(item: Item, completion: Completion) -> Completion:
    """A refused request's completion as its task scores it (for the names of its scores):
    empty texts, or every option equally unlikely; it keeps the refusal, and the record shows
    nothing extracted and every score 0."""
    refusal = completion.refusal
    if refusal is None:
        return completion
    tokens = refusal.prompt_tokens or 0
    if item.sample.options:
        lowest = Loglikelihood(logprob=-sys.float_info.max, tokens=0, prompt_tokens=tokens)
        return Completion(
            id=completion.id,
            loglikelihoods=(lowest,) * len(item.sample.options),
            refusal=refusal,
        )
    n = item.task.sampling.n
    return Completion(
        id=completion.id,
        generation=Generation(texts=("",) * n, prompt_tokens=tokens, completion_tokens=(0,) * n),
        refusal=refusal,
    )


def _answer(item: Item, completion: Completion) -> Generation:
    """The generated completions, or for a sample with options the most likely option."""
    options = item.sample.options
    if not options:
        if completion.generation is None:
            raise EngineError(f"Sample {item.sample.id!r} came back without a generation.")
        return completion.generation
    scored = completion.loglikelihoods
    if len(scored) != len(options):
        raise EngineError(
            f"The engine returned {len(scored)} log-likelihoods for the {len(options)} options "
            f"of sample {item.sample.id!r} of task {item.task.name!r}; it must return one per "
            "option, in order."
        )
    best = best_option([o.continuation for o in options], [x.logprob for x in scored])
    return Generation(
        texts=(options[best].answer,),
        prompt_tokens=scored[0].prompt_tokens,
        completion_tokens=(0,),  # nothing generated
    )
