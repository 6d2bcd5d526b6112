"""The real vLLM engine on the CPU: generation, chat templates, validation, OOM ladder.

Every LLM() build costs seconds here, so the tiny_random engine is one session fixture
(tests/conftest.py) and only the OOM tests build their own.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from neartie import EPSILON, assert_near_tie_equal, tokenizer_decode

from evalpipe.catalog.preset import Preset, load_preset
from evalpipe.core.errors import ConfigError, EngineError
from evalpipe.engine.fallback import fp8_kv_cache_supported
from evalpipe.engine.protocol import EngineSettings
from evalpipe.engine.vllm import VllmEngine
from evalpipe.records.completion import Generation
from evalpipe.records.request import Request
from evalpipe.records.sampling import SamplingSettings

pytestmark = pytest.mark.vllm

# tiny_random's KV cache per token in bf16: K and V × 2 layers × 2 KV heads × 32 dims × 2 bytes.
KV_BYTES_PER_TOKEN = 2 * 2 * 2 * 32 * 2


def tokenizer(path: Path):  # a transformers tokenizer
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def test_greedy_generation_in_another_order_is_equal_with_token_counts(
    tiny_engine: VllmEngine, tiny_random_path: Path
) -> None:
    prompts = ["What is 2 + 2?", "Name a planet.", "Hi"]
    greedy = SamplingSettings(max_tokens=12)
    first = tiny_engine.generate(prompts, greedy, top_logprobs=2)
    # The same batch in another order: equal modulo near-ties (tests/neartie.py).
    again = tiny_engine.generate(prompts[::-1], greedy)
    decode = tokenizer_decode(tiny_random_path)
    for reference, other in zip(first, again[::-1], strict=True):
        assert_near_tie_equal(reference, other.texts, decode)
    assert len({g.texts for g in first}) == 3  # each prompt got its own completion
    tok = tokenizer(tiny_random_path)
    for prompt, gen in zip(prompts, first, strict=True):
        chat = [{"role": "user", "content": prompt}]
        templated = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        # The chat template was applied: the prompt tokens are the templated prompt's.
        assert gen.prompt_tokens == len(tok(templated, add_special_tokens=False).input_ids)
        assert gen.prompt_tokens > len(tok(prompt).input_ids)
        assert len(gen.texts) == 1 and gen.completion_tokens == (12,)


def test_top_logprobs_give_the_generated_tokens_and_the_likeliest_at_each(
    tiny_engine: VllmEngine, tiny_random_path: Path
) -> None:
    greedy = SamplingSettings(max_tokens=24)
    [plain] = tiny_engine.generate(["Name a planet."], greedy)
    [asked] = tiny_engine.generate(["Name a planet."], greedy, top_logprobs=2)
    assert plain.steps == () and asked.texts == plain.texts  # asking changes no text
    [steps] = asked.steps
    assert len(steps) == asked.completion_tokens[0] == 24
    # The text is the tokens' (vLLM holds back a character cut off at the end).
    decoded = tokenizer(tiny_random_path).decode([s.token for s in steps])
    assert decoded.startswith(asked.texts[0])
    assert set(decoded[len(asked.texts[0]) :]) <= {"\ufffd"}
    for step in steps:
        assert len(step.top) == 2 and step.top[0][1] >= step.top[1][1]
        # Greedy: the token taken is a likeliest one (bf16 logits tie now and then).
        assert step.logprob == step.top[0][1] < 0
        assert step.token in {t for t, lp in step.top if lp == step.logprob}


def test_a_clear_divergence_from_a_recorded_reference_fails(
    tiny_engine: VllmEngine, tiny_random_path: Path
) -> None:
    """The near-tie rule on real log-probabilities: taking the runner-up where the reference
    was sure fails; taking it at a near-tie passes."""
    prompts = ["Name a planet.", "Hi", "What is 2 + 2?", "Count to ten."]
    references = tiny_engine.generate(prompts, SamplingSettings(max_tokens=64), top_logprobs=2)
    decode = tokenizer_decode(tiny_random_path)
    # (reference, position, gap) where the reference's token ends a whole character (tiny_random
    # writes stray bytes too), so the runner-up there changes the text at that very token.
    places = []
    for reference in references:
        ids = [s.token for s in reference.steps[0]]
        for k, step in enumerate(reference.steps[0]):
            if not any(decode(ids[:end]).endswith("\ufffd") for end in (k, k + 1)):
                places.append((reference, k, step.top[0][1] - step.top[1][1]))

    def runner_up_at(reference: Generation, k: int) -> str:
        steps = reference.steps[0]
        return decode([*(s.token for s in steps[:k]), steps[k].top[1][0]])

    sure, k, gap = next(place for place in places if place[2] > EPSILON)
    with pytest.raises(AssertionError, match=f"{gap:.3f} nats apart"):
        assert_near_tie_equal(sure, [runner_up_at(sure, k)], decode)
    tied, k, _ = next(place for place in places if place[2] < EPSILON)
    assert_near_tie_equal(tied, [runner_up_at(tied, k)], decode)


def test_messages_and_sampling_settings_reach_vllm(tiny_engine: VllmEngine) -> None:
    as_text = tiny_engine.generate(["Hello"], SamplingSettings(max_tokens=6))
    as_chat = tiny_engine.generate(
        [[{"role": "user", "content": "Hello"}]], SamplingSettings(max_tokens=6)
    )
    assert as_chat == as_text
    sampled = SamplingSettings(max_tokens=6, n=3, temperature=1.0, seed=7)
    [three] = tiny_engine.generate(["Hello"], sampled)
    assert len(three.texts) == 3 and len(set(three.texts)) > 1
    assert tiny_engine.generate(["Hello"], sampled) == [three]  # seeded per request


def test_the_streaming_loop_equals_llm_chat_and_llm_generate(tiny_engine: VllmEngine) -> None:
    """The engine renders chat templates itself for `LLMEngine.add_request`: its completions
    equal vLLM's own `LLM.chat` (chat) and `LLM.generate` (plain) on the same prompts."""
    from vllm import SamplingParams

    prompts = ["What is 2 + 2?", "Name a planet.", "Hi"]
    params = SamplingParams(max_tokens=12, temperature=0.0)
    ours = tiny_engine.generate(prompts, SamplingSettings(max_tokens=12))
    conversations = [[{"role": "user", "content": p}] for p in prompts]
    theirs = tiny_engine._llm.chat(conversations, params, use_tqdm=False)
    assert [g.texts[0] for g in ours] == [o.outputs[0].text for o in theirs]
    assert [g.prompt_tokens for g in ours] == [len(o.prompt_token_ids) for o in theirs]
    plain = dataclasses.replace(tiny_engine.preset, chat=False)
    tiny_engine.preset = plain
    try:
        ours = tiny_engine.generate(prompts, SamplingSettings(max_tokens=12))
    finally:
        tiny_engine.preset = dataclasses.replace(plain, chat=True)
    theirs = tiny_engine._llm.generate(prompts, params, use_tqdm=False)
    assert [g.texts[0] for g in ours] == [o.outputs[0].text for o in theirs]


def test_the_presets_chat_template_kwargs_reach_the_template(
    tiny_engine: VllmEngine, tiny_random_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`chat_template_kwargs` (e.g. Qwen3's enable_thinking) are variables of the chat template
    in the in-process engine, for generation and for option scoring alike."""
    from evalpipe.engine import rendering

    tok = tokenizer(tiny_random_path)
    tok.chat_template = (
        "{% if enable_thinking is defined and not enable_thinking %}<no-think>{% endif %}"
        "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    )
    assert rendering.render(tok, "Hi", chat=True, preset="t")[0] == "Hi"
    closed = {"enable_thinking": False}
    assert rendering.render(tok, "Hi", chat=True, preset="t", template_kwargs=closed)[0] == (
        "<no-think>Hi"
    )
    # The engine renders with its preset's kwargs, for generation and option scoring alike.
    seen: list[object] = []
    real = rendering.render
    monkeypatch.setattr(
        rendering, "render", lambda *a, **k: seen.append(k["template_kwargs"]) or real(*a, **k)
    )
    preset = tiny_engine.preset
    tiny_engine.preset = dataclasses.replace(preset, chat_template_kwargs=closed)
    try:
        tiny_engine.generate(["Hi"], SamplingSettings(max_tokens=2))
        tiny_engine.loglikelihoods([("Hi", " A")])
    finally:
        tiny_engine.preset = preset
    assert seen and all(kwargs == closed for kwargs in seen)


def test_abort_drops_requests_in_flight(tiny_engine: VllmEngine) -> None:
    from evalpipe.records.request import Request

    long = SamplingSettings(max_tokens=512, ignore_eos=True)
    tiny_engine.add([Request(id=f"a{i}", prompt="Count.", sampling=long) for i in range(3)])
    tiny_engine.step()
    assert sorted(tiny_engine.abort()) == ["a0", "a1", "a2"]
    assert tiny_engine.in_flight() == 0
    assert not tiny_engine._llm.llm_engine.has_unfinished_requests()
    # The engine goes on serving after an abort.
    [answer] = tiny_engine.generate(["Hi"], SamplingSettings(max_tokens=4))
    assert answer.completion_tokens == (4,)


def test_describe_reports_model_settings_versions_and_cpu_defaults(
    tiny_engine: VllmEngine, tiny_random_path: Path
) -> None:
    import vllm

    info = tiny_engine.describe()
    assert info["model_path"] == str(tiny_random_path)
    assert info["versions"]["vllm"] == vllm.__version__
    assert info["device"].startswith("cpu")
    # 32 sequences of max_model_len on the CPU, instead of a share of the machine's memory;
    # whole prefills (a split one fails a seeded request there: see the next test).
    assert info["cpu_defaults"] == {
        "kv_cache_memory_bytes": 32 * 1024 * KV_BYTES_PER_TOKEN,
        "enable_chunked_prefill": False,
        "max_num_batched_tokens": 4096,
    }
    assert info["engine_kwargs"]["enforce_eager"] is True
    assert info["resolved"]["max_model_len"] == 1024
    assert info["resolved"]["kv_cache_tokens"] >= 32 * 1024
    # What admission checks its longest samples against: vLLM's slots and cache, whole blocks.
    room = tiny_engine.room()
    config = tiny_engine._llm.llm_engine.vllm_config
    assert room.block == config.cache_config.block_size
    assert room.slots == info["resolved"]["max_num_seqs"] == config.scheduler_config.max_num_seqs
    assert room.kv_tokens == info["resolved"]["kv_cache_tokens"]
    assert room.kv_tokens % room.block == 0
    assert info["fallback_steps"] == [] and info["builds"] == 1


def test_seeded_requests_that_overflow_a_step_budget_sample(tiny_engine: VllmEngine) -> None:
    """Seeded prompts worth twice a step's 4,096 tokens: with chunked prefill the prompt at the
    end of a step would be split, and vLLM 0.32's CPU runner then fails the whole run ("CPU
    Generator does not use offset"). The CPU engine prefills whole prompts instead."""
    prompts = [f"{i} " + "word " * 80 for i in range(20)]  # about 400 tokens each
    sampled = SamplingSettings(max_tokens=2, temperature=0.6, top_k=20, seed=13)
    first = tiny_engine.generate(prompts, sampled)
    assert [len(g.texts) for g in first] == [1] * 20
    assert tiny_engine.generate(prompts, sampled) == first  # still seeded per request


def test_engine_kwargs_are_checked_against_vllm_before_loading(vllm_env: dict) -> None:
    tiny = load_preset("tiny_random")
    typo = dataclasses.replace(tiny, engine_kwargs={"enforce_eagre": True})
    with pytest.raises(ConfigError) as err:
        VllmEngine.open(typo, EngineSettings())
    assert "engine_kwargs.enforce_eagre is not an argument of vLLM's EngineArgs" in str(err.value)
    assert "Did you mean 'enforce_eager'?" in str(err.value)
    reserved = dataclasses.replace(tiny, engine_kwargs={"max_model_len": 512})
    with pytest.raises(ConfigError, match="use the preset key max_model_len"):
        VllmEngine.open(reserved, EngineSettings())


def test_an_unprepared_model_without_a_hub_says_how_to_prepare_it(
    vllm_env: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path))
    with pytest.raises(ConfigError, match="evalpipe models prepare tiny_random"):
        VllmEngine.open(load_preset("tiny_random"), EngineSettings())


def tiny_with_kv_tokens(tokens: int) -> Preset:
    """tiny_random, plain prompts, with a KV cache of `tokens` bf16 tokens (max_model_len 1024)."""
    tiny = load_preset("tiny_random")
    kv_bytes = tokens * KV_BYTES_PER_TOKEN
    return dataclasses.replace(
        tiny, chat=False, engine_kwargs={**tiny.engine_kwargs, "kv_cache_memory_bytes": kv_bytes}
    )


def test_oom_ladder_recovers_when_the_kv_cache_cannot_hold_max_model_len(
    tiny_engine: VllmEngine, tiny_random_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)  # it would override the kwarg
    # About 320 bf16 tokens of cache (vLLM fits 512 in fp8 with AVX-512, 128 on an AVX2-only
    # CPU): none holds 1024; the tasks need 100.
    engine = VllmEngine.open(tiny_with_kv_tokens(320), EngineSettings(min_model_len=100))
    try:
        [gen] = engine.generate(["The capital of France is"], SamplingSettings(max_tokens=8))
        info = engine.describe()
        preempted = _preemptions_of_two_that_each_fill_the_cache(engine)
    finally:
        engine.close()
    # Two sequences that each grow to fill the whole cache cannot run side by side: vLLM
    # preempts one (frees its cache, computes it again later), and the engine's slots count it.
    assert preempted >= 1
    # Closing one in-process engine leaves the process's other engines working.
    [after] = tiny_engine.generate(["The capital of France is"], SamplingSettings(max_tokens=2))
    assert after.completion_tokens == (2,)
    steps = info["fallback_steps"]
    assert steps[0].startswith("build: the KV cache cannot hold one sequence of max_model_len")
    # vLLM's estimate of what fits (block-granular), above the tasks' need.
    assert "max_model_len 1024 → " in steps[-1] and "(the tasks need 100)" in steps[-1]
    assert 100 <= info["resolved"]["max_model_len"] < 1024
    if fp8_kv_cache_supported():  # AVX-512 or AMX: the cheaper step first
        assert len(steps) == 2, steps
        assert "kv_cache_dtype auto → fp8" in steps[0]
        assert info["builds"] == 3
        assert info["resolved"]["kv_cache_dtype"] == "fp8"
    else:  # vLLM's CPU attention has no fp8 KV cache here: the ladder skips that step
        assert len(steps) == 1, steps
        assert info["builds"] == 2
        assert info["resolved"].get("kv_cache_dtype", "auto") == "auto"
    # A plain (chat: false) preset sends the text as it is.
    assert gen.prompt_tokens == len(
        tokenizer(tiny_random_path)("The capital of France is").input_ids
    )
    assert gen.completion_tokens == (8,)


def _preemptions_of_two_that_each_fill_the_cache(engine: VllmEngine) -> int:
    """Run two requests, each generating up to max_model_len, step by step; the preemptions
    the engine's slots reported."""
    room, length = engine.room(), int(engine.describe()["resolved"]["max_model_len"])
    assert room.kv_tokens < 2 * length  # the two cannot both reach their full length at once
    sampling = SamplingSettings(max_tokens=length - 16, ignore_eos=True)
    engine.add([Request(id=str(i), prompt="Count to a thousand:", sampling=sampling)
                for i in range(2)])  # fmt: skip
    preempted, done = 0, 0
    while done < 2:
        done += len(engine.step())
        slots = engine.slots()
        assert slots is not None
        preempted += slots.preempted
    return preempted


def test_oom_ladder_gives_up_with_the_planner_suggestion(
    tiny_random_path: Path, vllm_env: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    with pytest.raises(EngineError) as err:
        VllmEngine.open(tiny_with_kv_tokens(256), EngineSettings(min_model_len=1000))
    message = str(err.value)
    assert "Out of memory (build) for preset tiny_random after every fallback step" in message
    # vLLM's own words are quoted, then the steps taken, then what would fit.
    assert "To serve at least one request with the model's max seq len (1024)" in message
    if fp8_kv_cache_supported():
        assert "Steps taken: build: the KV cache cannot hold" in message
        assert "kv_cache_dtype auto → fp8" in message
    else:  # no fp8 KV cache on this CPU, and the context cannot shrink below the tasks' need
        assert "Steps taken: no step applies" in message
    assert "evalpipe plan --preset tiny_random --gpu GPU" in message
    assert "raise engine_kwargs.kv_cache_memory_bytes" in message
    # vLLM's estimate with the fp8 cache, below the tasks' 1000: so no shorter max_model_len.
    assert re.search(r"lower max_model_len to \d{3} or less", message)


def test_batch_invariant_kernels_are_asked_for_on_gpus_only() -> None:
    from evalpipe.engine.vllm import batch_invariance_available, env_defaults

    assert batch_invariance_available()  # vLLM 0.32 has VLLM_BATCH_INVARIANT
    cpu = env_defaults({}, cpu=True, oom_fallback=True, deterministic=True)
    assert cpu == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    gpu = env_defaults({}, cpu=False, oom_fallback=False, deterministic=True)
    assert gpu == {"VLLM_BATCH_INVARIANT": "1"}
    # A value the user set is theirs: nothing is added over it.
    user = {"VLLM_BATCH_INVARIANT": "0"}
    assert env_defaults(user, cpu=False, oom_fallback=False, deterministic=True) == {}
