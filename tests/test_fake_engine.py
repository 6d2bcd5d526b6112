"""The fake engine: deterministic, scriptable, and shaped like the real one's output."""

from __future__ import annotations

import pytest

from evalpipe.catalog.preset import load_preset
from evalpipe.core.errors import ConfigError, EngineError
from evalpipe.engine.factory import open_engine
from evalpipe.engine.fake import DELAY_ENV, FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.records.sampling import SamplingSettings


@pytest.fixture
def preset():
    return load_preset("tiny_random")


def test_same_prompt_same_completion_across_instances(preset) -> None:
    prompts = ["What is 2 + 2?", [{"role": "user", "content": "Name a colour."}]]
    a = FakeEngine(preset, EngineSettings()).generate(prompts, SamplingSettings())
    b = open_engine("fake", preset, EngineSettings()).generate(prompts, SamplingSettings())
    assert a == b
    assert a[0].texts[0].startswith("The answer is ")
    assert a[0].texts != a[1].texts or a[0].prompt_tokens != a[1].prompt_tokens


def test_script_answers_and_token_counts(preset) -> None:
    engine = FakeEngine(preset, EngineSettings(), script={"capital": "Paris is the capital."})
    (gen,) = engine.generate(["The capital of France?"], SamplingSettings())
    assert gen.texts == ("Paris is the capital.",)
    assert gen.prompt_tokens == 4
    assert gen.completion_tokens == (4,)
    assert engine.served == ["The capital of France?"]


def test_n_completions_greedy_identical_sampled_vary(preset) -> None:
    engine = FakeEngine(preset, EngineSettings())
    (greedy,) = engine.generate(["q"], SamplingSettings(n=4))
    assert len(set(greedy.texts)) == 1 and len(greedy.completion_tokens) == 4
    (sampled,) = engine.generate(["q"], SamplingSettings(n=8, temperature=0.8))
    assert len(set(sampled.texts)) > 1


def test_stop_strings_and_max_tokens_cut_output(preset) -> None:
    engine = FakeEngine(preset, EngineSettings(), script={"q": "one two three. four five"})
    (stopped,) = engine.generate(["q"], SamplingSettings(stop=("four", ".")))
    assert stopped.texts == ("one two three",)
    (short,) = engine.generate(["q"], SamplingSettings(max_tokens=2))
    assert short.texts == ("one two",) and short.completion_tokens == (2,)


def test_describe_and_close(preset) -> None:
    engine = FakeEngine(preset, EngineSettings())
    assert engine.describe()["backend"] == "fake"
    assert engine.describe()["model"] == preset.model
    assert engine.fallback_steps == []
    engine.close()
    with pytest.raises(EngineError, match="after close"):
        engine.generate(["q"], SamplingSettings())


def test_delay_from_environment(preset, monkeypatch) -> None:
    monkeypatch.setenv(DELAY_ENV, "0.25")
    assert FakeEngine(preset, EngineSettings()).delay_s == 0.25
    monkeypatch.setenv(DELAY_ENV, "soon")
    with pytest.raises(ConfigError, match=DELAY_ENV):
        FakeEngine(preset, EngineSettings())


def test_loglikelihoods_favour_the_scripted_answer_and_are_stable(preset) -> None:
    engine = FakeEngine(preset, EngineSettings(), script={"capital": "Paris"})
    requests = [("The capital of France?", " Paris"), ("The capital of France?", " Rome")]
    paris, rome = engine.loglikelihoods(requests)
    assert paris.logprob == 0.0 and -10 < rome.logprob < 0
    assert (paris.tokens, paris.prompt_tokens) == (1, 4)
    again = FakeEngine(preset, EngineSettings(), script={"capital": "Paris"})
    assert again.loglikelihoods(requests) == [paris, rome]  # same in any process
    assert engine.served == ["The capital of France?"]  # one request scores both options


def test_top_logprobs_give_each_generated_token_and_its_likeliest_alternatives(preset) -> None:
    engine = FakeEngine(preset, EngineSettings())
    settings = SamplingSettings(n=2, temperature=0.8)
    [plain] = engine.generate(["q"], settings)
    [asked] = engine.generate(["q"], settings, top_logprobs=3)
    assert asked.texts == plain.texts and plain.steps == ()  # the text does not change
    assert engine.generate(["q"], settings, top_logprobs=3) == [asked]  # nor the steps
    for text, steps in zip(asked.texts, asked.steps, strict=True):
        assert len(steps) == len(text.split())
        for step in steps:
            assert step.top[0] == (step.token, step.logprob) and len(step.top) == 3
            logprobs = [lp for _, lp in step.top]
            assert logprobs == sorted(logprobs, reverse=True) and logprobs[0] <= 0


@pytest.mark.parametrize("top", [-1, 21])
def test_top_logprobs_out_of_range_or_for_scoring_are_refused(top: int) -> None:
    from evalpipe.records.request import Request

    with pytest.raises(ConfigError, match=f"top_logprobs={top} must be 0 to 20"):
        Request(id="r1", prompt="q", sampling=SamplingSettings(), top_logprobs=top)
    with pytest.raises(ConfigError, match="only a generating request"):
        Request(id="r2", prompt="q", continuations=(" A",), top_logprobs=2)


def test_a_failed_generate_leaves_nothing_in_flight(preset) -> None:
    class FailsOnce(FakeEngine):
        failed = False

        def step(self):
            if not self.failed:
                self.failed = True
                raise EngineError("the engine broke mid-step")
            return super().step()

    engine = FailsOnce(preset, EngineSettings())
    with pytest.raises(EngineError, match="broke mid-step"):
        engine.generate(["What is 2 + 2?"], SamplingSettings())
    assert engine.in_flight() == 0
    # The same request ids are free again for the next call.
    assert len(engine.generate(["What is 2 + 2?"], SamplingSettings())) == 1
