"""Tools and structured outputs on requests: validation, rendering with tools, vLLM's hermes
parser around evalpipe's unparsed-call record, the fake and endpoint engines, the sample log
and summary, and the preset's tool_parser at preflight."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
from endpoint_support import FaultServer

from evalpipe.catalog.preset import Endpoint, load_preset
from evalpipe.core.errors import ConfigError
from evalpipe.engine import rendering
from evalpipe.engine.endpoint import EndpointEngine
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.records.request import Request
from evalpipe.records.sampling import SamplingSettings
from evalpipe.records.tools import ToolCall, ToolCalls, read_forced
from evalpipe.rundir.samplelog import SampleRecord, unparsed_tool_calls

WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
NAMED = {"type": "function", "function": {"name": "weather"}}
HERMES_CALL = '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'
OSLO_CALL = '{"name": "weather", "arguments": {"city": "Oslo"}}'
HERMES_BROKEN = '<tool_call>{"name": "f", "arguments": {"x": 1</tool_call>'

# A chat template that shows the tools, as Qwen's and Hermes' do (written for this test).
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nYou may call these functions:\n<tools>\n"
    "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}</tools>\n"
    'Answer with <tool_call>{"name": ..., "arguments": ...}</tool_call>.<|im_end|>\n{% endif %}'
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def request(**fields: object) -> Request:
    return Request(id="r", prompt="Weather in Oslo?", sampling=SamplingSettings(), **fields)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tools": (WEATHER,), "tool_choice": {"type": "function", "function": {"name": "g"}}},
         "names function 'g', which is not among the tools \\(weather\\)"),
        ({"tools": (WEATHER,), "tool_choice": "sometimes"},
         "tool_choice 'sometimes' is not one of auto, none, required"),
        ({"tool_choice": "required"}, "tool_choice 'required' needs tools"),
        ({"tools": ({"type": "function", "function": {}},)}, "is not an OpenAI function tool"),
        ({"tools": (WEATHER, WEATHER)}, "tool names must be distinct"),
        ({"json_schema": {"type": "integer", "minimum": "five"}},
         "json_schema: .* is not a valid JSON schema \\('five' is not of type 'number'\\)"),
        ({"json_schema": ["not", "an", "object"]}, "a JSON schema must be an object"),
        ({"tools": (WEATHER,), "tool_choice": NAMED, "json_schema": {"type": "object"}},
         "cannot also follow json_schema"),
    ],
)  # fmt: skip
def test_bad_tools_tool_choice_and_schemas_are_refused_naming_the_value(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        request(**fields)


def test_a_scoring_request_cannot_carry_tools() -> None:
    with pytest.raises(ConfigError, match="tools and json_schema need a generating request"):
        Request(id="r", prompt="q", continuations=(" A",), tools=(WEATHER,))


def test_rendering_with_tools_is_the_tokenizer_s_own_chat_template(
    tiny_random_path: Path, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    folder = tmp_path / "tools_tokenizer"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_random_path / name, folder / name)
    (folder / "chat_template.jinja").write_text(TOOLS_TEMPLATE)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    chat = [{"role": "user", "content": "Weather in Oslo?"}]
    text, ids = rendering.render(tokenizer, chat, chat=True, preset="tools", tools=[WEATHER])
    expected = tokenizer.apply_chat_template(
        chat, tools=[WEATHER], add_generation_prompt=True, tokenize=False
    )
    assert text == expected and '"name": "weather"' in text
    assert ids == tokenizer.encode(expected, add_special_tokens=False)
    without, _ = rendering.render(tokenizer, chat, chat=True, preset="tools")
    assert "<tools>" not in without  # no tools: the template's tools block stays out


def test_a_conversation_with_calls_reaches_the_template_as_vllm_hands_it() -> None:
    """An assistant step with calls and no text, its arguments a JSON string (OpenAI's form, as
    episodes keep it): the template gets empty text and the arguments as an object, as vLLM's
    own chat path (parse_chat_messages → _postprocess_messages) gives them."""
    import copy

    from vllm.renderers.chat_utils import _postprocess_messages

    def call(arguments: str) -> dict[str, object]:
        return {"id": "c0", "type": "function",
                "function": {"name": "weather", "arguments": arguments}}  # fmt: skip

    chat = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None,
         "tool_calls": [call('{"city": "Oslo"}'), call("not json"), call("[1]"), call("")]},
        {"role": "tool", "content": "rain", "tool_call_id": "c0"},
        {"role": "assistant", "content": "Rain.", "tool_calls": []},
    ]  # fmt: skip
    theirs = [{**m, "content": m["content"] or ""} for m in copy.deepcopy(chat)]
    _postprocess_messages(theirs)
    ours = rendering.template_messages(chat)
    assert ours == theirs
    assert [c["function"]["arguments"] for c in ours[1]["tool_calls"]] == [
        {"city": "Oslo"},
        {},
        {},
        {},
    ]
    assert chat[1]["content"] is None  # the episode's own record is left as it is


@pytest.fixture(scope="module")
def hermes(tiny_random_path: Path):
    from transformers import AutoTokenizer

    from evalpipe.engine.toolcalls import ToolReader

    return ToolReader(
        "hermes",
        AutoTokenizer.from_pretrained(tiny_random_path),
        preset="tiny_random",
        reasoning_parser="qwen3",
    )


def test_hermes_reads_a_call_and_records_a_malformed_one_as_unparsed(hermes) -> None:
    tools = ({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},)
    asked = request(tools=tools)
    texts = [HERMES_CALL, HERMES_BROKEN, "no call here", f"<think>{HERMES_CALL}</think>Done."]
    good, broken, plain, thought = hermes.read(texts, asked)
    assert good == ToolCalls(calls=(ToolCall(name="f", arguments='{"x": 1}'),))
    assert good.calls[0].args() == {"x": 1}
    assert broken.calls == () and "could not parse" in broken.unparsed
    assert broken.content == HERMES_BROKEN  # the raw call is kept
    assert plain == ToolCalls(content="no call here")
    # The reasoning is split off first: a call inside it is no call.
    assert thought == ToolCalls(content="Done.")
    # Counted: one completion of the sample began a call that did not parse.
    record = SampleRecord(
        task="t", category="c", sample_id="s", prompt="q", completions=tuple(texts),
        extracted=(None,) * 4, scores={}, prompt_tokens=1, completion_tokens=(1,) * 4,
        tool_calls=(good, broken, plain, thought),
    )  # fmt: skip
    assert unparsed_tool_calls([record]) == 1
    again = SampleRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert again.tool_calls == record.tool_calls


def test_hermes_keeps_special_tokens_and_a_forced_choice_becomes_a_schema(hermes) -> None:
    assert hermes.keeps_special_tokens(request(tools=(WEATHER,)))
    assert not hermes.keeps_special_tokens(request(tools=(WEATHER,), tool_choice="none"))
    assert not hermes.keeps_special_tokens(request())
    assert (
        hermes.schema(request(tools=(WEATHER,), tool_choice=NAMED))
        == (WEATHER["function"]["parameters"])
    )
    required = hermes.schema(request(tools=(WEATHER,), tool_choice="required"))
    assert required["type"] == "array" and required["minItems"] == 1
    assert hermes.schema(request(tools=(WEATHER,))) is None
    assert hermes.schema(request(json_schema={"enum": ["a"]})) == {"enum": ["a"]}


def test_forced_calls_are_read_from_json_and_bad_json_is_unparsed() -> None:
    assert read_forced('{"city": "Oslo"}', NAMED).calls == (
        ToolCall(name="weather", arguments='{"city": "Oslo"}'),
    )
    listed = read_forced('[{"name": "weather", "parameters": {"city": "Oslo"}}]', "required")
    assert listed.calls == (ToolCall(name="weather", arguments='{"city": "Oslo"}'),)
    assert "not JSON" in read_forced('{"city": "Os', NAMED).unparsed
    assert "not a list" in read_forced('{"city": "Oslo"}', "required").unparsed


def test_a_preset_without_a_tool_parser_cannot_read_auto_calls(tiny_random_path: Path) -> None:
    from transformers import AutoTokenizer

    from evalpipe.engine.toolcalls import ToolReader

    reader = ToolReader(
        None, AutoTokenizer.from_pretrained(tiny_random_path), preset="tiny_random",
        reasoning_parser=None,
    )  # fmt: skip
    with pytest.raises(ConfigError, match="Preset 'tiny_random' has no tool_parser"):
        reader.read([HERMES_CALL], request(tools=(WEATHER,)))


@pytest.mark.parametrize(
    ("parser", "message"),
    [
        ("hermess", "tool_parser 'hermess' is not one of vLLM's tool-call parsers. Did you "
         "mean 'hermes'\\?"),
        ("llama3_json", "tool_parser 'llama3_json' refuses this model's tokenizer"),
        ("mistral", "tool_parser 'mistral' refuses this model's tokenizer"),
    ],
)  # fmt: skip
def test_preflight_refuses_a_tool_parser_naming_the_preset(
    tiny_random_path: Path, parser: str, message: str
) -> None:
    from evalpipe.jobs.preflight import check_tool_parser

    preset = dataclasses.replace(load_preset("tiny_random"), tool_parser=parser)
    [finding] = check_tool_parser(preset, tiny_random_path)
    assert finding.level == "error" and "Preset 'tiny_random'" in finding.message
    assert re.search(message, finding.message)
    assert (
        check_tool_parser(dataclasses.replace(preset, tool_parser="hermes"), tiny_random_path) == []
    )


def test_a_preset_names_its_tool_parser_in_yaml(tmp_path: Path) -> None:
    import yaml

    data = yaml.safe_load(Path("configs/presets/tiny_random.yaml").read_text())
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump(data | {"tool_parser": "hermes"}))
    assert load_preset(str(path)).tool_parser == "hermes"
    path.write_text(yaml.safe_dump(data | {"tool_parser": ""}))
    with pytest.raises(ConfigError, match="tool_parser must name one of vLLM's"):
        load_preset(str(path))


def test_the_fake_engine_returns_scripted_calls() -> None:
    engine = FakeEngine(
        load_preset("tiny_random"),
        EngineSettings(),
        script={"Oslo": f"Checking. <tool_call>{OSLO_CALL}</tool_call>", "Bergen": HERMES_BROKEN},
    )  # fmt: skip
    oslo, bergen, plain = engine.run(
        [
            request(tools=(WEATHER,)),
            Request(id="b", prompt="Bergen?", sampling=SamplingSettings(), tools=(WEATHER,)),
            Request(id="c", prompt="Oslo!", sampling=SamplingSettings()),
        ]
    )
    assert oslo.generation.tool_calls == (
        ToolCalls(calls=(ToolCall(name="weather", arguments='{"city": "Oslo"}'),),
                  content="Checking."),
    )  # fmt: skip
    assert bergen.generation.tool_calls[0].unparsed
    assert plain.generation.tool_calls == ()  # no tools offered: nothing parsed


def endpoint_engine(server: FaultServer) -> EndpointEngine:
    endpoint = Endpoint(base_url=server.base_url, timeout_s=5.0, backoff_s=0.05, max_retries=1)
    return EndpointEngine(
        dataclasses.replace(load_preset("tiny_random"), endpoint=endpoint), key=None
    )


def test_the_endpoint_sends_tools_and_a_schema_and_reads_tool_calls() -> None:
    replied = [
        {"id": "call_1", "type": "function",
         "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}},
        {"id": "call_2", "type": "function", "function": {"arguments": "{}"}},
    ]  # fmt: skip
    schema = {"type": "object", "properties": {"a": {"enum": ["yes", "no"]}}}
    with FaultServer(tool_calls=replied) as server:
        engine = endpoint_engine(server)
        try:
            called, structured = engine.run(
                [request(tools=(WEATHER,), tool_choice=NAMED),
                 Request(id="s", prompt="Yes?", sampling=SamplingSettings(), json_schema=schema)]
            )  # fmt: skip
        finally:
            engine.close()
    tools_body, schema_body = sorted(server.bodies, key=lambda b: "tools" not in b)
    assert tools_body["tools"] == [WEATHER] and tools_body["tool_choice"] == NAMED
    assert schema_body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": True},
    }
    assert "tools" not in schema_body and "response_format" not in tools_body
    [calls] = called.generation.tool_calls
    assert calls.calls == (ToolCall(name="weather", arguments='{"city": "Oslo"}'),)
    assert "without a function name" in calls.unparsed
    assert structured.generation.tool_calls == ()


def test_tool_choice_none_renders_the_tools_but_reads_no_call(hermes) -> None:
    [read] = hermes.read([HERMES_CALL], request(tools=(WEATHER,), tool_choice="none"))
    assert read == ToolCalls(content=HERMES_CALL)


def test_the_summary_counts_unparsed_calls_per_task() -> None:
    from evalpipe.rundir.summary import TaskSummary

    summary = TaskSummary(category="c", unparsed_tool_calls=2)
    assert summary.to_dict()["unparsed_tool_calls"] == 2
    assert TaskSummary.from_dict(summary.to_dict()).unparsed_tool_calls == 2
    assert "unparsed_tool_calls" not in TaskSummary(category="c").to_dict()


def test_the_completions_api_sends_vllm_s_structured_outputs_and_refuses_tools(
    tiny_random_path: Path,
) -> None:
    schema = {"enum": ["yes", "no"]}
    with FaultServer() as server:
        endpoint = Endpoint(base_url=server.base_url, api="completions", max_retries=1)
        preset = dataclasses.replace(load_preset("tiny_random"), endpoint=endpoint)
        engine = EndpointEngine(preset, key=None)
        try:
            engine.run([request(json_schema=schema)])
            with pytest.raises(ConfigError, match="sends through the chat API only"):
                engine.run([request(tools=(WEATHER,))])
        finally:
            engine.close()
    [body] = server.bodies
    assert body["structured_outputs"] == {"json": schema} and "response_format" not in body
