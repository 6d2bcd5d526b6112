"""BFCL's modes (docs/bfcl.md "Modes"): a preset's bfcl_mode chooses the handler that formats the
prompts and decodes the answers; each mode is recorded in the task definition and
bfcl_results.json; bad mode settings are refused before anything loads; Qwen's FC handler's
decoder and native mode's FC checking on scripted completions; a native run end to end on the
fake engine."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from evalpipe.catalog.preset import Preset, load_preset
from evalpipe.catalog.taskrefs import expand_refs
from evalpipe.core.errors import ConfigError
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.records.prompt import Rendered
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.tasks.bfcl.kind import KIND
from evalpipe.tasks.bfcl.task import BfclTask
from evalpipe.tasks.kindbase import LoadOptions


def preset(**given: object) -> Preset:
    return dataclasses.replace(load_preset("tiny_random"), **given)  # type: ignore[arg-type]


def load(given: Preset, *tasks: str, backend: str = "vllm") -> dict[str, BfclTask]:
    loaded = KIND.load(expand_refs(tasks), LoadOptions(preset=given, backend=backend))
    return {task.bfcl_category: task for task in loaded.tasks}  # type: ignore[attr-defined]


def test_bad_mode_settings_are_refused_naming_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"native mode .* names none: set tool_parser"):
        load(preset(bfcl_mode="native"), "bfcl:simple_python")
    for model, why in [("Qwen/Qwen3-8B-FCX", "BFCL registers no model 'Qwen/Qwen3-8B-FCX'"),
                       ("gpt-4o-2024-11-20-FC", "an API handler, not a local one"),
                       ("THUDM/glm-4-9b-chat", "GLMHandler. sends stop_token_ids")]:  # fmt: skip
        with pytest.raises(ConfigError, match=rf"{why}.*Name a local model BFCL registers"):
            load(preset(bfcl_mode="handler", bfcl_model=model), "bfcl:simple_python")
    for wrong in ({"bfcl_mode": "handler"}, {"bfcl_model": "Qwen/Qwen3-8B-FC"}):
        with pytest.raises(ValueError, match="the handler mode needs bfcl_model"):
            preset(**wrong)
    with pytest.raises(ValueError, match="bfcl_mode 'fc' is not one of prompting, handler"):
        preset(bfcl_mode="fc")


# simple_python_0: calculate_triangle_area(base: int, height: int, unit: str = optional).
def fc(arguments: str) -> str:
    call = f'{{"name": "calculate_triangle_area", "arguments": {arguments}}}'
    return f"<tool_call>\n{call}\n</tool_call>"


def test_qwens_fc_handler_formats_the_prompt_and_decodes_the_answers() -> None:
    simple = load(preset(bfcl_mode="handler", bfcl_model="Qwen/Qwen3-8B-FC"),
                  "bfcl:simple_python")["simple_python"]  # fmt: skip
    assert simple.definition() | {"bfcl_eval": ""} == {
        "kind": "bfcl", "bfcl_eval": "", "category": "simple_python", "mode": "handler",
        "handler": "QwenFCHandler", "bfcl_model": "Qwen/Qwen3-8B-FC",
        "checker_model": "Qwen/Qwen3-8B-FC", "leaderboard_comparable": True,
        "entries": 400}  # fmt: skip
    [sample] = simple.samples(1)
    # The handler's own text, sent without a chat template.
    assert isinstance(sample.prompt, Rendered) and sample.tools == ()
    assert sample.prompt.startswith("<|im_start|>system\n# Tools\n")
    assert sample.prompt.endswith("<|im_start|>assistant\n")
    texts = {
        fc('{"base": 10, "height": 5}'): "valid",
        "<think>\nhalf base times height\n</think>\n\n" + fc('{"base": 10, "height": 5}'): "valid",
        fc('{"base": "10", "height": 5}'): "type_error:simple",
        fc('{"base": 10, "height": 5'): "simple_function_checker:wrong_count",  # not JSON
        "[calculate_triangle_area(base=10, height=5)]": "simple_function_checker:wrong_count",
    }
    [scored] = simple.score_many([(sample, list(texts))])
    assert dict(zip(texts, scored.extracted, strict=True)) == texts


def test_a_native_run_on_the_fake_engine_checks_the_parsed_calls(tmp_path: Path) -> None:
    native = preset(bfcl_mode="native", tool_parser="hermes")
    tasks = load(native, "bfcl:simple_python", backend="fake")
    [first, second] = tasks["simple_python"].samples(2)
    assert first.tools[0]["function"]["name"] == "calculate_triangle_area"
    assert first.prompt == [{"role": "user", "content": first.prompt[0]["content"]}]
    script = {first.prompt[0]["content"]: fc('{"base": 10, "height": 5}'),
              second.prompt[0]["content"]: "I cannot say."}  # fmt: skip
    engine = FakeEngine(native, EngineSettings(), script=script, delay_s=0.0)
    result = run_evaluation(lambda _: engine, list(tasks.values()), tmp_path / "run",
                            preset=native, options=RunOptions(backend="fake", limit=2))  # fmt: skip
    assert result.status == "complete"
    rows = {json.loads(line)["sample_id"]: json.loads(line)
            for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()}  # fmt: skip
    assert rows[first.id]["tool_calls"][0]["calls"][0]["name"] == "calculate_triangle_area"
    assert rows[first.id]["extracted"] == ["valid"]
    assert rows[second.id]["extracted"] == ["ast_decoder:decoder_failed"]  # no call made
    document = json.loads((tmp_path / "run" / "bfcl_results.json").read_text())
    assert (document["mode"], document["leaderboard_comparable"]) == ("native", False)
    assert document["categories"]["simple_python"]["accuracy"] == 0.5
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())["config"]
    assert manifest["definitions"]["bfcl_simple_python"]["mode"] == "native"
    assert manifest["model"]["tool_parser"] == "hermes"
