"""Long contexts: the presets' rope scaling, the context ceiling it sets, the planner's layout or
refusal at 128k, and the engine arguments that carry the scaling to vLLM."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from evalpipe.catalog.budgets import Ask, fit_context
from evalpipe.catalog.gpus import get_gpu, load_gpus
from evalpipe.catalog.preset import Preset, RopeScaling, load_preset
from evalpipe.catalog.taskrefs import KINDS, AskGiven, TaskRef
from evalpipe.cli import main
from evalpipe.core import exitcodes
from evalpipe.core.configio import build
from evalpipe.core.errors import ConfigError
from evalpipe.engine.fallback import Context, Ladder
from evalpipe.engine.protocol import EngineSettings
from evalpipe.engine.vllm import llm_kwargs
from evalpipe.planning import planner
from evalpipe.planning.memory import GIB

H100 = get_gpu("h100-80gb")
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048,
        "rope_theta": 10000}  # fmt: skip


def _preset(rope: dict[str, Any] | None, **top: Any) -> Preset:
    """tiny_random (2,048 positions) as YAML would give it, with `rope` as its rope_scaling."""
    base = load_preset("tiny_random")
    arch = dataclasses.asdict(base.architecture) | {"rope_scaling": rope}
    data = {"name": "long", "model": base.model, "architecture": arch, "max_model_len": 1024}
    data |= top
    return build(Preset, data, "presets/long.yaml")


def _plan(preset: Preset, length: int, **kwargs: Any) -> planner.Plan:
    return planner.plan(preset, H100, max_model_len=length, read_model_config=False, **kwargs)


# -- the preset's rope scaling ----------------------------------------------------------------


def test_the_qwen_presets_carry_the_cards_yarn_and_reach_131072() -> None:
    for name, native in (("qwen3_32b", 40960), ("qwen2_5_72b", 32768)):
        arch = load_preset(name).architecture
        assert arch.rope_scaling == RopeScaling(
            factor=4.0, original_max_position_embeddings=32768, rope_theta=1_000_000
        )
        assert (arch.native_context, arch.context_ceiling) == (native, 131072)
    smol = load_preset("smollm2_135m").architecture
    assert smol.rope_scaling is None and smol.context_ceiling == 8192


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"factor": 1.0}, "factor must exceed 1 to lengthen the context, got 1.0"),
        ({"factor": "4x"}, "factor must be a positive number, got '4x'"),
        ({"rope_theta": 0}, "rope_theta must be a positive number, got 0"),
        ({"rope_type": "linear"}, "rope_type 'linear' is not one of yarn"),
        (
            {"original_max_position_embeddings": 4096},
            r"original_max_position_embeddings \(4096\) exceeds max_position_embeddings \(2048\)",
        ),
        (
            {"factor": 1.5, "original_max_position_embeddings": 1024},
            r"reaches 1536 tokens .*no more than max_position_embeddings \(2048\): it would never",
        ),
        ({"type": "yarn"}, "unknown key 'type'.*Valid keys: factor, "),
    ],
)
def test_a_bad_rope_scaling_block_is_refused_naming_the_value(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        _preset(YARN | change)
    assert "presets/long.yaml" in str(caught.value)


def test_rope_theta_is_required_and_engine_kwargs_may_not_set_the_scaling_too() -> None:
    with pytest.raises(ConfigError, match=r"missing required key.*rope_theta"):
        _preset({k: v for k, v in YARN.items() if k != "rope_theta"})
    with pytest.raises(ConfigError, match="hf_overrides sets rope_scaling and architecture"):
        _preset(YARN, engine_kwargs={"hf_overrides": {"rope_scaling": {"factor": 2.0}}})
    kept = _preset(YARN, engine_kwargs={"hf_overrides": {"sliding_window": None}})
    assert kept.architecture.context_ceiling == 8192


# -- the ceiling, the budgets and the planner -------------------------------------------------


def test_long_budgets_reach_the_scaled_ceiling_only_with_rope_scaling() -> None:
    ruler = Ask(name="ruler", max_tokens=128, prompt_tokens=100_000)
    context = fit_context(load_preset("qwen3_32b"), [ruler], None)
    assert context.max_model_len == 64 + 100_000 + 128
    assert "ceiling: 131072 with rope scaling (yarn factor 4 over 32768" in context.notes[0]
    beyond = fit_context(load_preset("qwen3_32b"), [Ask(name="x", max_tokens=200_000)], None)
    assert beyond.max_model_len == 131072 and beyond.budgets["x"] == 131072 - 64 - 1024
    long_answer = Ask(name="ruler", max_tokens=4000, prompt_tokens=6000)
    plain = fit_context(load_preset("smollm2_135m"), [long_answer], None)
    assert plain.max_model_len == 8192  # max_position_embeddings: no scaling configured
    assert "ceiling: max_position_embeddings 8192" in plain.notes[0]


def test_ruler_default_lengths_size_the_context_to_the_longest_within_the_ceiling() -> None:
    """Without --ruler-lengths, RULER's context is its longest default length (a power of two),
    not the model's whole ceiling: 32,768 on a 40,960-position model."""
    ref = TaskRef.parse("ruler")
    (ask,) = KINDS["ruler"].asks(ref, None, AskGiven())
    odd = _preset(None, max_model_len=4096)
    odd = dataclasses.replace(
        odd, architecture=dataclasses.replace(odd.architecture, max_position_embeddings=40960)
    )
    assert fit_context(odd, [ask], None).max_model_len == 32768
    assert fit_context(load_preset("qwen3_32b"), [ask], None).max_model_len == 131072
    assert fit_context(load_preset("smollm2_135m"), [ask], None).max_model_len == 8192


def test_prompts_counted_in_tokens_beyond_the_ceiling_are_refused_with_the_fix() -> None:
    fits = Ask(name="ruler", max_tokens=128, prompt_tokens=130_000)
    assert fit_context(load_preset("qwen3_32b"), [fits], None).max_model_len == 130_192
    with pytest.raises(ConfigError) as scaled:
        fit_context(load_preset("qwen3_32b"), [Ask(name="ruler", max_tokens=128,
                                                   prompt_tokens=131072)], None)  # fmt: skip
    assert "ruler: its longest prompt has 131072 tokens" in str(scaled.value)
    assert "131072 with rope scaling (yarn factor 4" in str(scaled.value)
    assert "Ask for lengths below 131072." in str(scaled.value)
    with pytest.raises(ConfigError) as plain:  # --max-model-len does not lift the model's limit
        fit_context(load_preset("smollm2_135m"), [Ask(name="ruler", max_tokens=128,
                                                      prompt_tokens=16000)], 8192)  # fmt: skip
    assert "the most smollm2_135m can hold (max_position_embeddings 8192)" in str(plain.value)
    assert "add it to the preset's architecture.rope_scaling" in str(plain.value)


def test_the_long_prompt_warning_counts_the_scaled_positions() -> None:
    """`check` and `plan --estimate` name the fix against the ceiling, not the native length."""
    from types import SimpleNamespace

    from evalpipe.estimate.workmodel import long_prompt
    from evalpipe.tasks.base import Sample

    def task(words: int) -> SimpleNamespace:
        sample = Sample(id="1", prompt="word " * words, target="a")
        return SimpleNamespace(name="long", samples=lambda limit: [sample])

    scaled = _preset(YARN)  # 2,048 positions natively, 8,192 with its YaRN
    fits = long_prompt(task(3000), scaled, None, 1024, None)  # 15,000 bytes: about 3,760 tokens
    assert fits is not None and "fits it (the model has 8,192 positions)" in fits.line()
    beyond = long_prompt(task(8000), scaled, None, 1024, None)
    assert beyond is not None and "the model's 8,192 positions cannot hold it" in beyond.line()


def test_qwen3_32b_at_128k_takes_two_h100s_with_two_full_length_sequences() -> None:
    p = _plan(load_preset("qwen3_32b"), 131072)
    assert (p.tensor_parallel_size, p.pipeline_parallel_size, p.fits) == (2, 1, True)
    # 64 layers × 2 (K, V) × 8 KV heads / TP 2 × 128 dims × 2 bytes × 131,072 tokens = 16 GiB.
    assert p.kv_cache_per_seq_gib == pytest.approx(64 * 2 * 4 * 128 * 2 * 131072 / GIB)
    assert p.max_concurrent_seqs == 2 and p.max_model_len == 131072
    assert any("exceeds the native 40960 positions: vLLM gets the card's rope scaling (yarn "
               "factor 4 over 32768 tokens)" in note for note in p.notes)  # fmt: skip
    assert any("the KV cache holds 2 full-length sequence(s)" in note and
               "max_num_seqs=1024" in note for note in p.notes)  # fmt: skip
    native = _plan(load_preset("qwen3_32b"), 40960)
    assert not any("rope scaling" in note for note in native.notes)


def test_a_length_the_model_cannot_hold_is_refused_naming_why_and_the_fix() -> None:
    with pytest.raises(ConfigError) as plain:
        _plan(load_preset("smollm2_135m"), 16384)
    assert "max_model_len 16384 is outside 1..8192" in str(plain.value)
    assert "configures no rope scaling" in str(plain.value)
    assert "add it to the preset's architecture.rope_scaling" in str(plain.value)
    with pytest.raises(ConfigError) as scaled:
        _plan(load_preset("qwen3_32b"), 200_000)
    assert "outside 1..131072: qwen3_32b reaches 131072 positions with its rope scaling" in str(
        scaled.value
    )
    assert "40960 without. Plan at most 131072" in str(scaled.value)


def test_a_length_the_gpus_cannot_hold_names_the_wider_layout_and_shorter_length() -> None:
    p = _plan(load_preset("qwen3_32b"), 131072, tp=1, pp=1, alternatives=list(load_gpus().values()))
    assert not p.fits and p.notes[0].startswith("does not fit: at TP=1 × PP=1")
    assert "for one 131072-token sequence" in p.notes[0]
    assert "option: a wider layout: --tp 2 --pp 1 gives TP=2 × PP=1 (2 GPUs, 1 node)" in p.notes
    assert any(note.startswith("option: --max-model-len ") for note in p.notes)


def test_plan_prints_the_128k_layout_and_refuses_an_unscaled_preset(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "--preset", "qwen3_32b", "--gpu", "h100-80gb", "--max-model-len", "131072"]
    assert main(argv) == exitcodes.OK
    out = capsys.readouterr().out
    assert "TP=2 × PP=1" in out and "16.000 GiB per GPU at 131072 tokens" in out
    assert "exceeds the native 40960 positions" in out
    argv = ["plan", "--preset", "smollm2_135m", "--gpu", "h100-80gb", "--max-model-len", "16384"]
    assert main(argv) == exitcodes.ERROR
    assert "configures no rope scaling" in capsys.readouterr().err
    # Named tasks size the context without --estimate, as `submit` sizes it.
    argv = ["plan", "--preset", "qwen3_32b", "--gpu", "h100-80gb", "--tasks", "aime2024", "--json"]
    assert main(argv) == exitcodes.OK
    assert json.loads(capsys.readouterr().out)["max_model_len"] == 32768 + 64 + 1024
    assert main([*argv[:3], "--all-gpus", *argv[5:7]]) == exitcodes.OK
    assert "qwen3_32b (Qwen/Qwen3-32B), max_model_len 33856" in capsys.readouterr().out


# -- the engine's arguments -------------------------------------------------------------------


def test_vllm_gets_the_scaling_only_past_the_native_context() -> None:
    qwen3 = load_preset("qwen3_32b")
    for length in (16384, 40960):
        assert "hf_overrides" not in llm_kwargs(qwen3, EngineSettings(max_model_len=length), "m")
    kwargs = llm_kwargs(qwen3, EngineSettings(max_model_len=131072), "m")
    assert kwargs["max_model_len"] == 131072
    assert kwargs["hf_overrides"] == {
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                         "original_max_position_embeddings": 32768, "rope_theta": 1e6},
        "max_position_embeddings": 131072,
    }  # fmt: skip
    # The preset's own overrides stay beside the scaling.
    other = _preset(YARN, engine_kwargs={"hf_overrides": {"sliding_window": None}})
    merged = llm_kwargs(other, EngineSettings(max_model_len=4096), "m")["hf_overrides"]
    assert merged["sliding_window"] is None and merged["max_position_embeddings"] == 8192
    assert "hf_overrides" not in llm_kwargs(load_preset("smollm2_135m"), EngineSettings(), "m")


def test_a_context_the_oom_ladder_shortens_to_the_native_length_drops_the_scaling() -> None:
    kwargs = llm_kwargs(load_preset("qwen3_32b"), EngineSettings(max_model_len=131072), "m")
    kwargs["hf_overrides"]["sliding_window"] = None  # a preset's own override stays
    context = Context(min_model_len=30000, kv_budget_fixed=False, fp8_weights=False,
                      fp8_kv=False, native_context=40960)  # fmt: skip
    steps = Ladder(kwargs, context=context, subject="preset qwen3_32b")
    kv_short = ValueError(
        "To serve at least one request with the model's max seq len (131072), (32.00 GiB KV "
        "cache is needed, which is larger than the available KV cache memory (20.00 GiB). "
        "Based on the available memory, the estimated maximum model length is 81920."
    )
    while steps.kwargs["max_model_len"] == 131072:
        steps.recover(kv_short, "build")
    assert steps.kwargs["max_model_len"] == 81920  # still past the native length: YaRN stays
    assert "rope_scaling" in steps.kwargs["hf_overrides"]
    native = Ladder(dict(kwargs), context=context, subject="preset qwen3_32b")
    while native.kwargs["max_model_len"] == 131072:
        native.recover(ValueError(str(kv_short).replace("81920", "40000")), "build")
    assert native.kwargs["max_model_len"] == 40000
    assert native.kwargs["hf_overrides"] == {"sliding_window": None}


@pytest.mark.vllm
def test_vllm_accepts_the_overrides_at_four_times_the_native_length(
    vllm_env: dict[str, str], tiny_random_path: Path
) -> None:
    """vLLM's own model config (no engine started) takes the arguments evalpipe builds."""
    from vllm.config import ModelConfig

    kwargs = llm_kwargs(_preset(YARN), EngineSettings(max_model_len=8192), str(tiny_random_path))
    config = ModelConfig(
        model=kwargs["model"], hf_overrides=kwargs["hf_overrides"], max_model_len=8192
    )
    assert config.max_model_len == 8192
    assert config.hf_config.rope_parameters == kwargs["hf_overrides"]["rope_scaling"]
    assert config.hf_config.rope_parameters["rope_theta"] == 10000.0
    with pytest.raises(ValueError, match="max_model_len"):  # the model's own limit without them
        ModelConfig(model=kwargs["model"], max_model_len=8192)
