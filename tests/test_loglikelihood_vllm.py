"""Log-likelihoods from the real vLLM engine: equal to what its sampler reports for the same
token, plain and chat; they rank true continuations first; multiple choice by logprobs end to end.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from evalpipe.core.errors import ConfigError
from evalpipe.engine.protocol import EngineSettings
from evalpipe.records.sampling import SamplingSettings
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.rundir.samplelog import read_samples
from evalpipe.tasks import load_tasks

pytestmark = pytest.mark.vllm


def greedy_token(engine, prompt: str, *, chat: bool) -> tuple[str, float]:
    """vLLM's own greedy next token for `prompt` and the logprob its sampler gives it."""
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=0)
    llm = engine._llm
    if chat:
        [out] = llm.chat([[{"role": "user", "content": prompt}]], params, use_tqdm=False)
    else:
        [out] = llm.generate([prompt], params, use_tqdm=False)
    completion = out.outputs[0]
    token = completion.token_ids[0]
    return llm.get_tokenizer().decode([token]), completion.logprobs[0][token].logprob


@pytest.fixture(params=[False, True], ids=["plain", "chat"])
def either(request: pytest.FixtureRequest, smollm2, monkeypatch: pytest.MonkeyPatch):
    """The module's engine as a plain-text model, then as a chat model: the same weights, only
    the way prompts are rendered differs."""
    chat_or_not = dataclasses.replace(smollm2.preset, chat=request.param)
    monkeypatch.setattr(smollm2, "preset", chat_or_not)
    return smollm2


def test_loglikelihood_equals_the_samplers_logprob_of_the_same_token(either) -> None:
    prompt = "The capital of France is"
    text, logprob = greedy_token(either, prompt, chat=either.preset.chat)
    [scored] = either.loglikelihoods([(prompt, text)])
    assert scored.tokens == 1
    assert scored.logprob == pytest.approx(logprob, abs=1e-3)
    [generated] = either.generate([prompt], SamplingSettings(max_tokens=1))
    assert scored.prompt_tokens == generated.prompt_tokens  # the same (templated) context


def prompt_logprobs_reference(engine, ids: list[int], start: int) -> float:
    """The continuation ids[start:] scored the long way: vLLM's prompt logprobs of the whole."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
    [out] = engine._llm.generate([TokensPrompt(prompt_token_ids=ids)], params, use_tqdm=False)
    return sum(out.prompt_logprobs[p][ids[p]].logprob for p in range(start, len(ids)))


def test_option_letters_read_from_one_step_equal_their_prompt_logprobs(either) -> None:
    prompt = "Which is a planet?\nA. Mars\nB. Paris\nC. Oak\nD. Rust\nAnswer:"
    letters = [" A", " B", " C", " D"]
    scored = either.loglikelihoods([(prompt, letter) for letter in letters])
    for letter, got in zip(letters, scored, strict=True):
        ids, start = either._encode(prompt, letter)
        assert got.tokens == 1 and got.prompt_tokens == start
        assert got.logprob == pytest.approx(prompt_logprobs_reference(either, ids, start), abs=1e-3)


def test_letters_after_moved_whitespace_are_read_from_two_shared_steps(smollm2) -> None:
    """lm-eval's split: the context's trailing newline opens every option's continuation, so
    each letter is two tokens; the options share the newline's step and the letters' step."""
    from evalpipe.records.prompt import Rendered
    from evalpipe.records.request import Request

    prompt = Rendered("Which is a planet?\nA. Mars\nB. Paris\nC. Oak\nD. Rust\nAnswer:\n")
    letters = (" A", " B", " C", " D")
    parts = smollm2._score_parts(Request(id="q", prompt=prompt, continuations=letters))
    assert len(parts.requests) == 2, "one step after the context, one after the newline"
    assert all(params.prompt_logprobs is None for _, params in parts.requests.values())
    scored = smollm2.loglikelihoods([(prompt, letter) for letter in letters])
    for letter, got in zip(letters, scored, strict=True):
        ids, start = smollm2._encode(prompt, letter)
        assert got.tokens == len(ids) - start == 2
        # The two steps run in one batch, the reference alone: bf16 rounding follows the batch
        # (measured 0.075 nats of 13.8 here, the same as prompt_logprobs over that batch).
        assert got.logprob == pytest.approx(prompt_logprobs_reference(smollm2, ids, start), abs=0.2)
    greedy = [got.is_greedy for got in scored]
    assert greedy.count(True) <= 1  # at most one letter is the greedy continuation


def test_a_longer_continuation_sums_its_tokens_logprobs(smollm2, monkeypatch) -> None:
    monkeypatch.setattr(smollm2, "preset", dataclasses.replace(smollm2.preset, chat=False))
    from vllm import SamplingParams

    prompt = "The capital of France is"
    params = SamplingParams(max_tokens=3, temperature=0.0, logprobs=0)
    [out] = smollm2._llm.generate([prompt], params, use_tqdm=False)
    completion = out.outputs[0]
    steps = zip(completion.logprobs, completion.token_ids, strict=True)
    sampled = sum(step[token].logprob for step, token in steps)
    [scored] = smollm2.loglikelihoods([(prompt, completion.text)])
    assert scored.tokens == 3  # the greedy text tokenises back to its three tokens
    # One bf16 prefill against three decoding steps over a bf16 KV cache: the sums differ in
    # rounding (measured 0.03 of 1.64), not in which tokens were scored (that would be whole nats).
    assert scored.logprob == pytest.approx(sampled, abs=0.1)


@pytest.mark.parametrize(
    ("prompt", "options"),
    [
        ("The capital of France is", [" Paris", " London", " Berlin", " Madrid"]),
        ("Question: What color is the sky on a clear day?\nAnswer:", [" blue", " green", " red"]),
    ],
)
def test_the_true_continuation_is_the_likeliest(smollm2, prompt: str, options: list[str]) -> None:
    scored = smollm2.loglikelihoods([(prompt, option) for option in options])
    logprobs = [s.logprob for s in scored]
    # Measured: Paris -5.7 vs ≤ -10.5 for the others; blue -8.2 vs ≤ -10.1.
    assert max(logprobs) == logprobs[0] and logprobs[0] < 0, logprobs
    assert all(math.isfinite(x) for x in logprobs)


def test_an_empty_continuation_is_refused(smollm2) -> None:
    with pytest.raises(ConfigError, match="must add at least one token"):
        smollm2.loglikelihoods([("The capital of France is", "")])


class KeepOpen:
    """Hands the module's engine to the runner without letting it close it."""

    def __init__(self, engine) -> None:
        self.engine = engine

    def __getattr__(self, name: str):
        return getattr(self.engine, name)

    def close(self) -> None:
        pass


def test_multiple_choice_by_logprobs_runs_end_to_end(smollm2, tmp_path: Path) -> None:
    from evalpipe.catalog.preset import load_preset

    [ordering] = load_tasks(tasks=["ordering"], mc_method="logprobs")
    out = tmp_path / "run"
    result = run_evaluation(
        lambda settings: KeepOpen(smollm2),
        [ordering],
        out,
        preset=load_preset("smollm2_135m"),
        options=RunOptions(backend="vllm", limit=8, engine=EngineSettings()),
    )
    assert result.status == "complete"
    records = read_samples(out / "samples.jsonl").records
    assert len(records) == 8
    for record in records:
        assert len(record.option_logprobs) == 4
        assert all(-50 < x < 0 for x in record.option_logprobs), record.option_logprobs
        best = max(range(4), key=record.option_logprobs.__getitem__)
        assert record.completions == ("ABCD"[best],) == record.extracted
    accuracy = result.summary.tasks["ordering"].metrics["accuracy"]
    assert accuracy.n == 8 and accuracy.mean is not None and 0 <= accuracy.mean <= 1
