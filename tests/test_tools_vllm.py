"""Structured outputs and tools through the real vLLM engine on the CPU (tiny_random: its
completions are noise, so JSON that validates shows the grammar was applied)."""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import pytest

from evalpipe.catalog.preset import load_preset
from evalpipe.core.errors import ConfigError
from evalpipe.engine.protocol import EngineSettings
from evalpipe.engine.vllm import VllmEngine
from evalpipe.records.request import Request
from evalpipe.records.sampling import SamplingSettings

pytestmark = pytest.mark.vllm

ANSWER = {"enum": ["yes", "no", "maybe"]}
SAMPLED = SamplingSettings(max_tokens=16, n=4, temperature=1.0, seed=3)


def test_a_json_schema_is_followed_and_free_text_is_not_json(tiny_engine: VllmEngine) -> None:
    structured, free = tiny_engine.run(
        [
            Request(id="s", prompt="Yes or no?", sampling=SAMPLED, json_schema=ANSWER),
            Request(id="f", prompt="Yes or no?", sampling=SAMPLED),
        ]
    )
    assert structured.refusal is None and len(structured.generation.texts) == 4
    for text in structured.generation.texts:
        jsonschema.validate(json.loads(text), ANSWER)
    assert structured.generation.tool_calls == ()
    # Without the schema the same model writes no answer of the enum (the check is strict).
    for text in free.generation.texts:
        with pytest.raises((ValueError, jsonschema.ValidationError)):
            jsonschema.validate(json.loads(text), ANSWER)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "(?<=a)b"},  # refused when admitted
        {"type": "integer", "minimum": 5, "maximum": 1},  # fails to compile in the engine loop
    ],
)
def test_a_schema_the_grammar_cannot_honour_refuses_that_request_only(
    tiny_engine: VllmEngine, schema: dict[str, object]
) -> None:
    bad, good = tiny_engine.run(
        [
            Request(id="bad", prompt="x", sampling=SAMPLED, json_schema=schema),
            Request(id="good", prompt="x", sampling=SAMPLED, json_schema=ANSWER),
        ]
    )
    assert bad.generation is None and bad.refusal.reason == "refused"
    assert bad.refusal.detail
    assert good.refusal is None


def test_a_tool_parser_that_refuses_the_tokenizer_stops_the_engine_naming_the_preset(
    vllm_env: dict[str, str], tiny_random_path: object
) -> None:
    preset = dataclasses.replace(load_preset("tiny_random"), tool_parser="llama3_json")
    with pytest.raises(ConfigError, match="Preset 'tiny_random': tool_parser 'llama3_json'"):
        VllmEngine.open(preset, EngineSettings())


def test_hermes_tools_render_keep_special_tokens_and_give_one_record_per_completion(
    vllm_env: dict[str, str], tiny_random_path: object
) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    preset = dataclasses.replace(load_preset("tiny_random"), tool_parser="hermes")
    engine = VllmEngine.open(preset, EngineSettings())
    try:
        [done] = engine.run([Request(id="t", prompt="Call f.", sampling=SAMPLED, tools=(tool,))])
        described = engine.describe()["sampling"]
    finally:
        engine.close()
    assert len(done.generation.tool_calls) == SAMPLED.n
    # hermes's adjust_request: the call markers may be special tokens, so none are skipped.
    assert [s["skip_special_tokens"] for s in described] == [False]
