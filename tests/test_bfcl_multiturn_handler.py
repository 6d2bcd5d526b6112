"""BFCL's multi-turn categories in handler mode (Qwen's FC handler), without a model: a scripted
model writing the ground-truth calls as Qwen's `<tool_call>` JSON goes through the whole runner
and scores 1.0; every prompt evalpipe sent equals the one BFCL's own
`inference_multi_turn_prompting` formats with that handler for the same answers, and its
trajectory equals BFCL's result; a resumed entry's next prompt is formatted again alike."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from bfcl_scripted import DONE, QwenGroundTruthModel, subset

from evalpipe.catalog.preset import load_preset
from evalpipe.catalog.taskrefs import expand_refs
from evalpipe.records.episode import Step
from evalpipe.records.prompt import Rendered
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.rundir.layout import RunDir
from evalpipe.sandbox.exchange import run_exchange
from evalpipe.tasks.bfcl.install import sandbox_data
from evalpipe.tasks.bfcl.kind import KIND
from evalpipe.tasks.bfcl.multiturn import BfclMultiTurnTask
from evalpipe.tasks.kindbase import LoadOptions

FC_MODEL = "Qwen/Qwen3-8B-FC"
# An entry whose ground truth passes keywords only, offering `sort` at its third turn (one
# entry of one category: each step and the scoring are a sandboxed process).
ENTRIES = {"multi_turn_miss_func": ["multi_turn_miss_func_4"]}

# BFCL's own loop with Qwen's FC handler, the model's answers given in order: each prompt the
# handler formats, and the result BFCL keeps (per turn, per step, the handler's reading).
BFCL_LOOP = """
import json, os, sys, tempfile
from types import SimpleNamespace
given = json.load(sys.stdin)
sys.path[:0] = given["path"]
sys.path.append(given["bfcl"])
os.environ["BFCL_PROJECT_ROOT"] = tempfile.mkdtemp()
from bfcl_eval.model_handler.local_inference.qwen_fc import QwenFCHandler
from bfcl_eval.utils import load_dataset_entry
usage = SimpleNamespace(prompt_tokens=0, completion_tokens=0)
out = {}
for category, ids in given["entries"].items():
    for entry in load_dataset_entry(category):
        if entry["id"] not in ids:
            continue
        handler = QwenFCHandler(model_name="Qwen/Qwen3-8B", temperature=0.001,
                                registry_name=given["model"], is_fc_model=True)
        answers, prompts = iter(given["answers"][entry["id"]]), []
        def query(data, handler=handler, answers=answers, prompts=prompts):
            prompts.append(handler._format_prompt(data["message"], data["function"]))
            text = next(answers)
            return SimpleNamespace(choices=[SimpleNamespace(text=text)], usage=usage), 0.0
        handler._query_prompting = query
        result, _ = handler.inference_multi_turn_prompting(entry, False, True)
        out[entry["id"]] = {"prompts": prompts, "result": result}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def tasks() -> dict[str, BfclMultiTurnTask]:
    preset = dataclasses.replace(load_preset("tiny_random"), bfcl_mode="handler",
                                 bfcl_model=FC_MODEL)  # fmt: skip
    refs = expand_refs([f"bfcl:{c}" for c in ENTRIES])
    loaded = KIND.load(refs, LoadOptions(preset=preset)).tasks
    return {t.bfcl_category: subset(t, ENTRIES[t.bfcl_category]) for t in loaded}  # type: ignore[attr-defined]


def test_qwens_fc_handler_runs_the_conversations_as_bfcl_does(
    tasks: dict[str, BfclMultiTurnTask], tmp_path: Path
) -> None:
    every = [e for t in tasks.values() for e in t.entries]
    model = QwenGroundTruthModel(every)
    result = run_evaluation(lambda _: model, list(tasks.values()), tmp_path,
                            preset=load_preset("tiny_random"),
                            options=RunOptions(backend="fake"))  # fmt: skip
    assert result.status == "complete"
    rows = {json.loads(x)["sample_id"]: json.loads(x)
            for x in RunDir(tmp_path).samples.read_text().splitlines()}  # fmt: skip
    steps = [json.loads(x) for x in RunDir(tmp_path).steps.read_text().splitlines()]
    for entry in every:
        assert rows[entry["id"]]["extracted"] == ["valid"], entry["id"]
        assert rows[entry["id"]]["scores"]["accuracy"] == 1.0
    document = json.loads((tmp_path / "bfcl_results.json").read_text())
    assert (document["mode"], document["handler"]) == ("handler", "QwenFCHandler")
    definitions = json.loads(RunDir(tmp_path).manifest.read_text())["config"]["definitions"]
    assert definitions["bfcl_multi_turn_miss_func"]["bfcl_model"] == FC_MODEL

    # BFCL's own loop, given the same answers, formats the same prompts and keeps the same result.
    mine = {e["id"]: [s for s in steps if s["sample_id"] == e["id"]] for e in every}
    answers = {i: [s["text"] for s in found] for i, found in mine.items()}
    data = sandbox_data(model=FC_MODEL, entries=ENTRIES, answers=answers)
    theirs, ended = run_exchange(BFCL_LOOP, data, timeout_s=300)
    assert theirs is not None, ended.detail
    for entry in every:
        question = entry["turns"][0][-1]["content"]
        assert len(theirs[entry["id"]]["prompts"]) == len(mine[entry["id"]]) > len(entry["turns"])
        served = [text for text in model.served if question in text]
        assert served == theirs[entry["id"]]["prompts"], entry["id"]
        responses = [s["outcome"]["response"] for s in mine[entry["id"]]]
        assert responses == [r for turn in theirs[entry["id"]]["result"] for r in turn]
        assert DONE in responses and any("<tool_call>" in r for r in responses)

    # A resumed entry (no prompt kept from its last step) has its prompt formatted again.
    task = tasks["multi_turn_miss_func"]
    sample = task.samples()[0]
    recorded = [Step.from_dict(s) for s in mine[sample.id]][:5]
    again = BfclMultiTurnTask(bfcl_category=task.bfcl_category, version=task.version,
                              entries=task.entries, mode=task.mode)  # fmt: skip
    prompt = again.next_request(sample, recorded)
    assert isinstance(prompt, Rendered)
    assert prompt == [t for t in model.served if entry_question(task) in t][5]


def entry_question(task: BfclMultiTurnTask) -> str:
    return task.entries[0]["turns"][0][-1]["content"]
