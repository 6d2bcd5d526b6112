"""Tools carried by samples: the streaming loop puts them on the engine's requests, the run
records the parsed calls, the preset's tool_parser enters the fingerprint only for tasks that
give tools, and the estimate counts the tools' text in the prompt."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from runner_support import ToyTask, lines, preset

from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.estimate.longprompts import counted_prompt
from evalpipe.run.runner import RunOptions, run_config, run_evaluation
from evalpipe.tasks.base import Sample

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": CITY}}
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


@dataclass(frozen=True, kw_only=True)
class ToolTask(ToyTask):
    """Each sample offers the weather tool; sample 0 must call it (tool_choice required)."""

    gives_tools = True

    def samples(self, limit: int | None = None) -> list[Sample]:
        return [
            Sample(id=f"{self.name}-{i}", prompt=f"Weather question {i}?", target="",
                   tools=(WEATHER,), tool_choice="required" if i == 0 else "auto")
            for i in range(self.size)
        ][:limit]  # fmt: skip


def test_a_samples_tools_reach_the_engine_and_its_calls_are_recorded(tmp_path: Path) -> None:
    hermes = dataclasses.replace(preset(), tool_parser="hermes")
    script = {"Weather question 0?": '[{"name": "get_weather", "parameters": {"city": "Oslo"}}]',
              "Weather question 1?": CALL}  # fmt: skip
    engine = FakeEngine(hermes, EngineSettings(), script=script, delay_s=0.0)
    task = ToolTask(name="weather", category="tools", size=3)
    result = run_evaluation(lambda _: engine, [task], tmp_path / "run", preset=hermes,
                            options=RunOptions(backend="fake"))  # fmt: skip
    assert result.status == "complete"
    calls = {row["sample_id"]: row.get("tool_calls") for row in lines(tmp_path / "run")}
    # Sample 0's required choice made the fake engine read its answer as forced JSON.
    assert calls["weather-0"][0]["calls"] == [
        {"name": "get_weather", "arguments": json.dumps({"city": "Oslo"})}]  # fmt: skip
    assert calls["weather-1"][0]["calls"] == [
        {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}]  # fmt: skip
    assert calls["weather-2"][0]["calls"] == []


def test_the_tool_parser_is_fingerprinted_only_for_tasks_that_give_tools() -> None:
    hermes = dataclasses.replace(preset(), tool_parser="hermes")
    options = RunOptions(backend="fake")
    plain = run_config(hermes, [ToyTask(name="t", category="math", size=1)], options)
    tools = run_config(hermes, [ToolTask(name="w", category="tools", size=1)], options)
    assert "tool_parser" not in plain.model
    assert tools.model["tool_parser"] == "hermes"
    other = run_config(dataclasses.replace(hermes, tool_parser="llama3_json"),
                       [ToolTask(name="w", category="tools", size=1)], options)  # fmt: skip
    assert other.fingerprint() != tools.fingerprint()


def test_the_estimate_counts_a_samples_tools_as_prompt_text() -> None:
    [sample] = ToolTask(name="w", category="tools", size=1).samples()
    counted = counted_prompt(sample)
    assert counted[0] == {"role": "system", "content": json.dumps(WEATHER)}
    assert counted[1:] == [{"role": "user", "content": "Weather question 0?"}]
    plain = dataclasses.replace(sample, tools=())
    assert counted_prompt(plain) == plain.prompt
