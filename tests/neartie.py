"""Model text from two runs, compared modulo near-ties (docs/engine.md, "Tests that compare
model text").

Another layout (tensor parallel, batch, process) or another CPU sums in another order. Where the
model's two likeliest next tokens are nearly tied, that rounding can pick the other one, and the
texts part from there on. So two greedy completions count as equal when they are equal up to the
first token where they differ and, at that token, the reference run's two likeliest tokens were
within EPSILON nats of each other and the other run took the runner-up. The reference is
recorded with its top-2 log-probabilities (`Request.top_logprobs`) in the same test run, on the
same machine.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evalpipe.engine.protocol import Engine
from evalpipe.records.completion import Completion, Generation, TokenStep
from evalpipe.records.prompt import Prompt
from evalpipe.records.request import Request

# tiny_random's logits are ~1, where bf16 steps by 2^-8: its top-2 gaps come in steps of 0.004
# (median 0.05, none above 0.3), and where a batch of 8 and a batch of 1 part here the gap is one
# step. 0.1 nats leaves room for other kernels and summation orders; the other run must also have
# taken the runner-up, so a broken run does not pass as a near-tie. A model with larger logits
# (coarser steps) needs a larger epsilon.
EPSILON = 0.1

Decode = Callable[[Sequence[int]], str]

# Half a multi-byte character: a tokenizer decodes it to U+FFFD, and so does vLLM, except at the
# end of a completion, where it holds it back. Texts are compared without it.
_PARTIAL = "\ufffd"


def _clean(text: str) -> str:
    return text.replace(_PARTIAL, "")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Divergence:
    """Where another completion parts from the reference's."""

    position: int  # index of the reference's token at which the texts part
    step: TokenStep  # the reference's token there, with its likeliest alternatives
    before: str  # the text both share, up to that token
    other: str  # the other text

    @property
    def runner_up(self) -> tuple[int, float]:
        """The likeliest token the reference did not take there: (id, log-probability)."""
        others = [entry for entry in self.step.top if entry[0] != self.step.token]
        if len(self.step.top) < 2 or not others:
            raise AssertionError(
                f"the reference was recorded with top_logprobs={len(self.step.top)}; the "
                "near-tie rule needs 2"
            )
        return others[0]

    @property
    def gap(self) -> float:
        """How much likelier the reference found its token than the runner-up."""
        return self.step.logprob - self.runner_up[1]


def divergence(
    text: str, steps: Sequence[TokenStep], other: str, decode: Decode
) -> Divergence | None:
    """Where `other` first departs from the reference completion `text` (generated as `steps`);
    None when the texts are equal. When every reference token's text is also the other's, the
    reference ended (end of sequence or a stop string) where the other went on: its last token."""
    if other == text:
        return None
    if not steps:
        raise AssertionError(f"the reference {text!r} was recorded without its tokens")
    ids = [step.token for step in steps]
    position = len(steps) - 1
    for k in range(len(steps)):
        if not _clean(other).startswith(_clean(decode(ids[: k + 1]))):
            position = k
            break
    while position and decode(ids[:position]).endswith(_PARTIAL):
        position -= 1  # the character the texts part at starts at an earlier token
    before = _clean(decode(ids[:position]))
    return Divergence(position=position, step=steps[position], before=before, other=other)


def _runner_up(found: Divergence, decode: Decode, ids: Sequence[int]) -> bool:
    """Whether the other text took the reference's runner-up at the divergence: it goes on with
    that token's text, or ends within it (end of sequence, or a stop string in it)."""
    alternative = _clean(decode([*ids[: found.position], found.runner_up[0]]))
    other = _clean(found.other)
    return other.startswith(alternative) or alternative.startswith(other)


def assert_near_tie_equal(
    reference: Generation,
    others: Sequence[str],
    decode: Decode,
    *,
    epsilon: float = EPSILON,
    what: str = "",
) -> None:
    """Each of `others` equals the reference's completion of the same index, or parts from it
    at a token the reference found nearly tied with its runner-up (gap below `epsilon`)."""
    if len(others) != len(reference.texts):
        raise AssertionError(f"{what}: {len(others)} completion(s), the reference has "
                             f"{len(reference.texts)}")  # fmt: skip
    if len(reference.steps) != len(reference.texts):
        raise AssertionError(f"{what}: the reference was recorded without top_logprobs")
    for text, steps, other in zip(reference.texts, reference.steps, others, strict=True):
        found = divergence(text, steps, other, decode)
        if found is None:
            continue
        at = f"{what}: the completions part at token {found.position} (after {found.before!r})"
        if found.step.logprob != found.step.top[0][1]:
            raise AssertionError(
                f"{at}, where the reference did not take its likeliest token; the near-tie "
                "rule compares greedy completions only"
            )
        assert found.gap < epsilon, (
            f"{at}, where the reference's two likeliest tokens are {found.gap:.3f} nats apart "
            f"(a near-tie is under {epsilon}): reference {text!r}, other {other!r}"
        )
        assert _runner_up(found, decode, [step.token for step in steps]), (
            f"{at}, a near-tie ({found.gap:.3f} nats), but the other did not take the "
            f"reference's runner-up there: reference {text!r}, other {other!r}"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Tally:
    """One side's completions against the reference's under the near-tie rule: what a benchmark
    reports and fails on, where a test would assert."""

    equal: int = 0
    tied: int = 0  # part from the reference at a near-tie
    beyond: tuple[str, ...] = ()  # why each of the others is no near-tie

    @property
    def agrees(self) -> bool:
        return not self.beyond

    def lines(self, shown: int = 2) -> list[str]:
        """'E equal, T part at a near-tie, B part elsewhere', then the first reasons."""
        return [f"{self.equal} equal, {self.tied} part at a near-tie, "
                f"{len(self.beyond)} part elsewhere",
                *(f"    {why[:300]}" for why in self.beyond[:shown])]  # fmt: skip


def tally(compared: Iterable[tuple[str, Generation, Sequence[str]]], decode: Decode) -> Tally:
    """Each (label, the reference's generation, the other side's completions of that prompt):
    equal, parting at a near-tie (assert_near_tie_equal), or parting elsewhere."""
    equal, tied, beyond = 0, 0, []
    for label, generation, texts in compared:
        if list(texts) == list(generation.texts):
            equal += 1
            continue
        try:
            assert_near_tie_equal(generation, texts, decode, what=label)
        except AssertionError as exc:
            beyond.append(str(exc))
        else:
            tied += 1
    return Tally(equal=equal, tied=tied, beyond=tuple(beyond))


def prompt_key(prompt: Prompt) -> str:
    """A prompt as a dictionary key, as samples.jsonl records it."""
    return json.dumps(prompt, sort_keys=True)


class Recorder(Engine):
    """An engine for a reference run: every generation request also asks for the top-2
    log-probabilities, and each generation is kept by its prompt (`generations`). It hands the
    engine on without letting the runner close it (its owner does)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.generations: dict[str, Generation] = {}
        self._prompts: dict[str, str] = {}

    def __getattr__(self, name: str) -> Any:  # backend, preset, …: the engine's
        return getattr(self.engine, name)

    @property
    def capacity(self) -> int:
        return self.engine.capacity

    @property
    def fallback_steps(self) -> list[str]:
        return self.engine.fallback_steps

    def describe(self) -> dict[str, Any]:
        return self.engine.describe()

    def add(self, requests: Sequence[Request]) -> None:
        for request in requests:
            self._prompts[request.id] = prompt_key(request.prompt)
        self.engine.add(
            [dataclasses.replace(r, top_logprobs=2) if r.sampling else r for r in requests]
        )

    def step(self) -> list[Completion]:
        done = self.engine.step()
        for completion in done:
            key = self._prompts.pop(completion.id)
            if completion.generation is not None:
                self.generations[key] = completion.generation
        return done

    def in_flight(self) -> int:
        return self.engine.in_flight()

    def abort(self) -> list[str]:
        self._prompts.clear()
        return self.engine.abort()

    def close(self) -> None:
        pass


def assert_records_near_tie_equal(
    got: Mapping[Any, dict],
    want: Mapping[Any, dict],
    reference: Mapping[str, Generation],
    decode: Decode,
) -> bool:
    """Two runs' samples.jsonl records (by key) hold the same samples and completions modulo
    near-ties (`reference`: the generations `want` was made from, by prompt); a sample whose
    completions are equal has an equal record. Returns whether every completion was equal."""
    assert got.keys() == want.keys()
    equal = True
    for key, record in got.items():
        expected = want[key]
        if record["completions"] == expected["completions"]:
            assert record == expected, key
            continue
        equal = False
        generation = reference[prompt_key(record["prompt"])]
        assert list(generation.texts) == expected["completions"], key  # the reference run's
        assert_near_tie_equal(generation, record["completions"], decode, what=str(key))
        same = ("task", "category", "sample_id", "prompt", "prompt_tokens")
        assert {k: record[k] for k in same} == {k: expected[k] for k in same}, key
    return equal


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordedRun:
    """A reference run made in this process, its generations recorded with log-probabilities."""

    out: Path
    generations: Mapping[str, Generation]  # by prompt_key
    decode: Decode

    def assert_matches(self, out: Path) -> bool:
        """The run in `out` holds the same samples with the same completions modulo near-ties
        (see assert_records_near_tie_equal); whether every completion was equal."""
        return assert_records_near_tie_equal(
            samples_by_key(out), samples_by_key(self.out), self.generations, self.decode
        )


def record_run(
    preset_name: str, tasks: Sequence[Any], out: Path, *, limit: int, decode: Decode
) -> RecordedRun:
    """Run `tasks` through the runner into `out` on a vLLM engine of its own, recording.

    Its own engine, built here and closed after: closing an in-process vLLM engine tears down
    vLLM's process-wide parallel groups, and a shared engine used after another engine closed
    would find them gone."""
    from evalpipe.catalog.preset import load_preset
    from evalpipe.engine.protocol import EngineSettings
    from evalpipe.engine.vllm import VllmEngine
    from evalpipe.run.runner import RunOptions, run_evaluation

    preset = load_preset(preset_name)
    engine = VllmEngine.open(preset, EngineSettings())
    try:
        recorder = Recorder(engine)
        result = run_evaluation(
            lambda settings: recorder,
            tasks,
            out,
            preset=preset,
            options=RunOptions(backend=engine.backend, limit=limit),
        )
    finally:
        engine.close()
    assert result.status == "complete"
    return RecordedRun(out=out, generations=recorder.generations, decode=decode)


def samples_by_key(out: Path) -> dict[tuple[str, str], dict]:
    """A run's samples.jsonl records by (task, sample_id); fails on a sample written twice."""
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    found = {(r["task"], r["sample_id"]): r for r in records}
    assert len(found) == len(records), f"a sample was written twice in {out}"
    return found


def tokenizer_decode(path: Any) -> Decode:
    """Decoding as vLLM does for a completion's text (special tokens dropped)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    return lambda ids: tokenizer.decode(list(ids), skip_special_tokens=True)
