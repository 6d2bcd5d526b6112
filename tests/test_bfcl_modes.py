"""BFCL's modes (docs/bfcl.md "Modes"): a preset's bfcl_mode chooses the handler that formats the
prompts and decodes the answers; each mode is recorded in the task definition and
bfcl_results.json; bad mode settings are refused before anything loads; in handler mode with
Qwen's FC handler the token ids evalpipe sends equal those of the handler's formatted prompt on
every entry of three categories (tiny_random's tokenizer: Qwen's handler writes its template as
text, so any tokenizer compares the strings) and its decoder reads scripted answers; a native
run end to end on the fake engine."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from test_bfcl_requests import bfcl_token_ids

from evalpipe.catalog.preset import Preset, load_preset
from evalpipe.catalog.taskrefs import expand_refs
from evalpipe.core.errors import ConfigError
from evalpipe.engine import rendering
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.records.prompt import Rendered
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.tasks.bfcl import entries
from evalpipe.tasks.bfcl.child import project_env
from evalpipe.tasks.bfcl.install import bfcl_dir
from evalpipe.tasks.bfcl.kind import KIND, check_prompting_only
from evalpipe.tasks.bfcl.task import BfclTask
from evalpipe.tasks.kindbase import LoadOptions

FC_MODEL = "Qwen/Qwen3-8B-FC"
FC_CATEGORIES = ("simple_python", "parallel_multiple", "live_parallel")


def preset(**given: object) -> Preset:
    return dataclasses.replace(load_preset("tiny_random"), **given)  # type: ignore[arg-type]


def load(given: Preset, *tasks: str, backend: str = "vllm") -> dict[str, BfclTask]:
    loaded = KIND.load(expand_refs(tasks), LoadOptions(preset=given, backend=backend))
    return {task.bfcl_category: task for task in loaded.tasks}  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def fc_tasks() -> dict[str, BfclTask]:
    return load(preset(bfcl_mode="handler", bfcl_model=FC_MODEL),
                *(f"bfcl:{c}" for c in FC_CATEGORIES))  # fmt: skip


# The entries program's refusal of a model it cannot drive, for several in one process (what
# `load` raises as a ConfigError naming the fix; entries.read_entries).
REFUSALS = """
import json, runpy, sys
given = json.load(sys.stdin)
sys.path.append(given["bfcl"])
program = runpy.run_path(given["program"])
print(json.dumps([program["handler_for"]("handler", m) for m in given["models"]]))
both = ["simple_python", "format_sensitivity"]
print(json.dumps([program["skipped_for"](program["handler_for"]("handler", m), "handler", both)
                  for m in ("Qwen/Qwen3-8B-FC", "Qwen/Qwen3-8B")]))
"""


def test_bad_mode_settings_are_refused_naming_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match=r"native mode .* names none: set tool_parser"):
        load(preset(bfcl_mode="native"), "bfcl:simple_python")
    native = preset(bfcl_mode="native", tool_parser="hermes")
    with pytest.raises(ConfigError, match=r"memory_kv run in bfcl_mode prompting or handler"):
        load(native, "bfcl:simple_python", "bfcl:memory_kv")
    models = ["Qwen/Qwen3-8B-FCX", "gpt-4o-2024-11-20-FC", "THUDM/glm-4-9b-chat"]
    given = {"bfcl": str(bfcl_dir()), "program": str(entries.PROGRAM), "models": models}
    with tempfile.TemporaryDirectory() as root:
        done = subprocess.run([sys.executable, "-c", REFUSALS], input=json.dumps(given),
                              capture_output=True, text=True, env=project_env(root),
                              check=True)  # fmt: skip
    unknown, api, glm = json.loads(done.stdout.splitlines()[-2])
    # format_sensitivity is for prompting models: left out for an FC handler, as `bfcl
    # generate` leaves it out; named, it is refused (plain `bfcl` runs without it).
    assert json.loads(done.stdout.splitlines()[-1]) == [["format_sensitivity"], []]
    with pytest.raises(ConfigError, match=r"format_sensitivity is run for prompting models only"):
        check_prompting_only(["format_sensitivity"], ["format_sensitivity"], "handler")
    check_prompting_only(["format_sensitivity"], ["bfcl"], "handler")
    assert unknown == "BFCL registers no model 'Qwen/Qwen3-8B-FCX'"
    assert "OpenAIResponsesHandler, an API handler, not a local one" in api
    assert "(GLMHandler) sends stop_token_ids with its requests" in glm
    # What the user reads of a refusal: the reason, then the fix.
    program = tmp_path / "refuses.py"
    program.write_text(f"print({json.dumps(json.dumps({'refused': unknown}))})")
    monkeypatch.setattr(entries, "PROGRAM", program)
    told = r"bfcl_model 'Qwen/Qwen3-8B-FCX': BFCL registers no model .*\. Name a local model"
    with pytest.raises(ConfigError, match=told):
        load(preset(bfcl_mode="handler", bfcl_model=models[0]), "bfcl:simple_python")
    for wrong in ({"bfcl_mode": "handler"}, {"bfcl_model": FC_MODEL}):
        with pytest.raises(ValueError, match="the handler mode needs bfcl_model"):
            preset(**wrong)
    with pytest.raises(ValueError, match="bfcl_mode 'fc' is not one of prompting, handler"):
        preset(bfcl_mode="fc")


def test_token_ids_equal_qwens_fc_handler_on_every_entry(
    fc_tasks: dict[str, BfclTask], tiny_random_path: Path
) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_random_path))
    theirs = bfcl_token_ids(tiny_random_path, FC_CATEGORIES, FC_MODEL)
    ours = {
        sample.id: rendering.render(tokenizer, sample.prompt, chat=True, preset="tiny_random")[1]
        for task in fc_tasks.values()
        for sample in task.samples()
    }
    assert len(ours) == len(theirs) == 616  # every entry: 400 + 200 + 16
    assert ours == theirs


# simple_python_0: calculate_triangle_area(base: int, height: int, unit: str = optional).
def fc(arguments: str) -> str:
    call = f'{{"name": "calculate_triangle_area", "arguments": {arguments}}}'
    return f"<tool_call>\n{call}\n</tool_call>"


def test_qwens_fc_handler_formats_the_prompt_and_decodes_the_answers(
    fc_tasks: dict[str, BfclTask],
) -> None:
    simple = fc_tasks["simple_python"]
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
