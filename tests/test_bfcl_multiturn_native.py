"""BFCL's multi-turn categories in native mode (docs/bfcl.md "Modes"), without a model: a
scripted model issuing the ground-truth calls as hermes tool calls goes through the whole runner
and scores 1.0; an answer whose tool call does not parse is recorded on its step and counted,
and ends its turn; every request evalpipe sent (chat, tools, call ids) equals the one BFCL's own
`inference_multi_turn_FC` builds with its OpenAI FC handler for the same answers, the held-out
functions added at their turn, and the trajectory equals BFCL's result; a run stopped between
steps resumes to the uninterrupted run's steps and scores."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from bfcl_scripted import BROKEN_CALL, DONE, NativeGroundTruthModel, records, subset

from evalpipe.catalog.preset import Preset, load_preset
from evalpipe.catalog.taskrefs import expand_refs
from evalpipe.records.episode import Ended, Step, StepRequest
from evalpipe.records.tools import ToolCalls
from evalpipe.run.runner import GenerationResult, RunOptions, run_evaluation
from evalpipe.rundir.layout import RunDir
from evalpipe.sandbox.exchange import run_exchange
from evalpipe.tasks.bfcl.install import sandbox_data
from evalpipe.tasks.bfcl.kind import KIND
from evalpipe.tasks.bfcl.multiturn import BfclMultiTurnTask
from evalpipe.tasks.kindbase import LoadOptions

# Entries of two turns each (so they finish together, scored in one batch) whose ground truth
# passes keywords only (hermes's JSON arguments), and one whose first answer opens a call it
# breaks.
TURNS = 2
SCRIPTED = ["multi_turn_base_11", "multi_turn_base_13", "multi_turn_base_45"]
BROKEN = "multi_turn_base_3"
# An entry offering `sort` and `echo` at its third turn: the tools change between its steps.
HELD_OUT = "multi_turn_miss_func_4"

# BFCL's own FC loop with its OpenAI chat-completions FC handler, the model's messages given in
# order: what each query sends (the chat, the server's messages as the SDK dumps them, and the
# tools), and the result BFCL keeps (per turn, per step, the handler's reading).
FC_LOOP = """
import copy, json, os, sys, tempfile
from types import SimpleNamespace
given = json.load(sys.stdin)
sys.path[:0] = given["path"]
sys.path.append(given["bfcl"])
os.environ["BFCL_PROJECT_ROOT"] = tempfile.mkdtemp()
from openai.types.chat import ChatCompletionMessage
from bfcl_eval.constants.enums import ModelStyle
from bfcl_eval.model_handler.api_inference.openai_completion import OpenAICompletionsHandler
from bfcl_eval.model_handler.base_handler import BaseHandler
from bfcl_eval.utils import load_dataset_entry
usage = SimpleNamespace(prompt_tokens=0, completion_tokens=0)
def plain(message):
    return message if isinstance(message, dict) else message.model_dump(exclude_none=True)
out = {}
for category, ids in given["entries"].items():
    for entry in load_dataset_entry(category):
        if entry["id"] not in ids:
            continue
        # Its constructor opens an API client, which a loop whose query is given never uses.
        handler = OpenAICompletionsHandler.__new__(OpenAICompletionsHandler)
        BaseHandler.__init__(handler, model_name="evalpipe", temperature=0.001,
                             registry_name="evalpipe-FC", is_fc_model=True)
        handler.model_style = ModelStyle.OPENAI_COMPLETIONS
        answers, asked = iter(given["answers"][entry["id"]]), []
        def query(data, answers=answers, asked=asked):
            asked.append({"messages": [plain(m) for m in data["message"]],
                          "tools": copy.deepcopy(data["tools"])})
            message = ChatCompletionMessage.model_validate(next(answers))
            return SimpleNamespace(choices=[SimpleNamespace(message=message)], usage=usage), 0.0
        handler._query_FC = query
        result, _ = handler.inference_multi_turn_FC(entry, False, True)
        out[entry["id"]] = {"asked": asked, "result": result}
sys.stdout.write("\\n" + json.dumps(out) + "\\n")
"""


def native() -> Preset:
    return dataclasses.replace(load_preset("tiny_random"), bfcl_mode="native",
                               tool_parser="hermes")  # fmt: skip


@pytest.fixture(scope="module")
def tasks() -> dict[str, BfclMultiTurnTask]:
    refs = expand_refs(["bfcl:multi_turn_base", "multi_turn_miss_func"])
    loaded = KIND.load(refs, LoadOptions(preset=native(), backend="fake")).tasks
    return {t.bfcl_category: t for t in loaded}  # type: ignore[attr-defined]


def scripted(task: BfclMultiTurnTask) -> BfclMultiTurnTask:
    return subset(task, [*SCRIPTED, BROKEN])


def run(out: Path, task: BfclMultiTurnTask, model: NativeGroundTruthModel,
        stop: Any = None) -> GenerationResult:  # fmt: skip
    return run_evaluation(lambda _: model, [task], out, preset=native(),
                          options=RunOptions(backend="fake"), stop=stop)  # fmt: skip


@pytest.fixture(scope="module")
def whole(tasks: dict[str, BfclMultiTurnTask], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted run of the scripted model."""
    out = tmp_path_factory.mktemp("whole")
    task = scripted(tasks["multi_turn_base"])
    model = NativeGroundTruthModel(task.entries, broken=[BROKEN])
    assert run(out, task, model).status == "complete"
    return out


def steps(out: Path, sample_id: str | None = None) -> list[dict[str, Any]]:
    found = [json.loads(x) for x in RunDir(out).steps.read_text().splitlines()]
    return [s for s in found if sample_id in (None, s["sample_id"])]


def test_the_ground_truth_tool_calls_score_one_and_an_unparsed_call_is_counted(
    whole: Path,
) -> None:
    found = records(whole)
    for sample_id in SCRIPTED:
        record = found[sample_id]
        assert record["extracted"] == ["valid"], sample_id
        assert record["scores"] == {"accuracy": 1.0, "unparsed": 0.0, "sandbox_failed": 0.0,
                                    "step_limit": 0.0}  # fmt: skip
        # Each turn a step of calls and a step in words that ends it.
        recorded = steps(whole, sample_id)
        assert [len(s["calls"]["calls"]) > 0 for s in recorded] == [True, False] * TURNS
        for step in recorded[::2]:
            outcome = step["outcome"]
            assert len(outcome["calls"]) == len(outcome["results"]) == len(step["calls"]["calls"])
    # The broken call: recorded on its step, counted, its turn ended; the entry went on.
    broken = steps(whole, BROKEN)
    assert broken[0]["text"] == BROKEN_CALL and broken[0]["calls"]["unparsed"]
    assert broken[0]["outcome"]["calls"] == [] and broken[1]["outcome"]["turn"] == 1
    assert found[BROKEN]["scores"]["unparsed"] == 1.0 and found[BROKEN]["scores"]["accuracy"] == 0
    document = json.loads((whole / "bfcl_results.json").read_text())
    assert (document["mode"], document["leaderboard_comparable"]) == ("native", False)
    category = document["categories"]["multi_turn_base"]
    assert (category["correct"], category["total"], category["unparsed"]) == (3, 4, 1.0)
    manifest = json.loads(RunDir(whole).manifest.read_text())["config"]
    assert manifest["definitions"]["bfcl_multi_turn_base"]["mode"] == "native"
    assert manifest["model"]["tool_parser"] == "hermes"


def answer(step: Step) -> dict[str, Any]:
    """A step as the server's assistant message it stands for (vLLM's: its text, none beside
    calls when there is none), under evalpipe's call ids."""
    parsed = step.calls or ToolCalls(content=step.text)
    if not parsed.calls:
        return {"role": "assistant", "content": parsed.content}
    calls = [{"id": f"call_{step.index}_{i}", "type": "function",
              "function": {"name": c.name, "arguments": c.arguments}}
             for i, c in enumerate(parsed.calls)]  # fmt: skip
    return {"role": "assistant", "content": parsed.content or None, "tool_calls": calls}


def sent(task: BfclMultiTurnTask, sample_id: str, recorded: Sequence[Step]) -> list[Any]:
    """What evalpipe asked at each step (the chat, with None fields left out as the SDK leaves
    them out, and the tools), from the recorded steps before it; the entry ends after them."""
    sample = next(s for s in task.samples() if s.id == sample_id)
    out = []
    for done in range(len(recorded)):
        request = task.next_request(sample, recorded[:done])
        assert isinstance(request, StepRequest) and request.tool_choice == "auto"
        chat = [{k: v for k, v in m.items() if v is not None} for m in request.prompt]
        out.append({"messages": chat, "tools": list(request.tools)})
    assert isinstance(task.next_request(sample, recorded), Ended)
    return out


def test_each_request_equals_bfcls_fc_loop_and_the_held_out_tools_join_at_their_turn(
    tasks: dict[str, BfclMultiTurnTask], whole: Path
) -> None:
    base, missing = tasks["multi_turn_base"], tasks["multi_turn_miss_func"]
    mine = {i: [Step.from_dict(s) for s in steps(whole, i)] for i in (SCRIPTED[0], BROKEN)}
    # The held-out entry answered in words at each turn: no call, so each turn is one step.
    turns = len(next(e for e in missing.entries if e["id"] == HELD_OUT)["turns"])
    mine[HELD_OUT] = [Step(index=i, text=DONE, prompt_tokens=1, completion_tokens=1,
                           calls=ToolCalls(content=DONE),
                           outcome={"turn": i, "calls": [], "results": []})
                      for i in range(turns)]  # fmt: skip
    entries = {"multi_turn_base": [SCRIPTED[0], BROKEN], "multi_turn_miss_func": [HELD_OUT]}
    answers = {i: [answer(s) for s in found] for i, found in mine.items()}
    theirs, ended = run_exchange(FC_LOOP, sandbox_data(entries=entries, answers=answers),
                                 timeout_s=300)  # fmt: skip
    assert theirs is not None, ended.detail
    for sample_id, recorded in mine.items():
        task = missing if sample_id == HELD_OUT else base
        assert sent(task, sample_id, recorded) == theirs[sample_id]["asked"], sample_id
        sample = next(s for s in task.samples() if s.id == sample_id)
        assert task.history(sample, recorded).texts == theirs[sample_id]["result"], sample_id
    # The tools grew by the held-out function at its turn, and only then.
    asked = [[t["function"]["name"] for t in a["tools"]] for a in theirs[HELD_OUT]["asked"]]
    assert "sort" not in asked[1] and asked[2] == [*asked[1], "sort", "echo"] == asked[-1]
    # The estimate counts each request's tools as the template's listing of them.
    first, *_ = missing.request_prompts(None)
    assert first[0]["role"] == "system" and '"name": "grep"' in first[0]["content"]
    assert '"name": "sort"' not in first[0]["content"]


def test_a_run_stopped_between_steps_resumes_to_the_same_steps_and_scores(
    tasks: dict[str, BfclMultiTurnTask], whole: Path, tmp_path: Path
) -> None:
    task = scripted(tasks["multi_turn_base"])
    first = NativeGroundTruthModel(task.entries, broken=[BROKEN])

    class StopAfter:  # once every conversation is two steps in
        @property
        def requested(self) -> str | None:
            return "test" if len(first.served) >= 2 * len(task.entries) else None

    out = tmp_path / "run"
    assert run(out, task, first, StopAfter()).status == "interrupted"
    cut = steps(out)
    assert 0 < len(cut) < len(steps(whole))
    second = NativeGroundTruthModel(task.entries, broken=[BROKEN])
    assert run(out, task, second).status == "complete"
    # Each conversation went on from its last recorded step: none asked twice, none missing.
    assert len(first.served) + len(second.served) == len(steps(whole))

    def keyed(out: Path) -> list[tuple[Any, ...]]:
        return sorted((s["sample_id"], s["index"], s["text"], json.dumps(s["calls"]),
                       json.dumps(s["outcome"])) for s in steps(out))  # fmt: skip

    assert keyed(out) == keyed(whole)
    for sample_id, record in records(whole).items():
        resumed = records(out)[sample_id]
        for key in ("turns", "completions", "extracted", "scores", "prompt_tokens"):
            assert resumed.get(key) == record.get(key), (sample_id, key)
