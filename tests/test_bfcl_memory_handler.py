"""BFCL's memory categories (memory_kv, memory_rec_sum) in handler mode with Qwen's FC handler
(`Qwen/Qwen3-8B-FC`), without a model: the memory scripted model (bfcl_memory_scripted.py)
answering in Qwen's `<tool_call>` format stores the expected answers in a scenario's first
prerequisite conversation and answers its questions from the memory alone; every prompt
evalpipe sent, every trajectory and every flushed snapshot equal those of BFCL's own
`inference_multi_turn_prompting` with that handler given the same answers (the conversations,
then the questions, in BFCL's order, its memory files in a folder of its own)."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path

import pytest
from bfcl_memory_scripted import QUESTION, MemoryModel, bfcls_loop, chain, recorded_steps
from bfcl_scripted import qwen_tool_calls

from evalpipe.catalog.preset import load_preset
from evalpipe.catalog.taskrefs import expand_refs
from evalpipe.records.sampling import SamplingSettings
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.rundir.layout import RunDir
from evalpipe.tasks.bfcl.kind import KIND
from evalpipe.tasks.bfcl.multiturn import BfclMultiTurnTask
from evalpipe.tasks.kindbase import LoadOptions

FC_MODEL = "Qwen/Qwen3-8B-FC"
SCENARIO = "notetaker"  # its conversations are BFCL's shortest (4-5 turns)
PREREQS, QUESTIONS = 1, 2  # one conversation: each is several sandboxed steps in a row

# Qwen's FC prompt (its handler's `_format_prompt`): each message opens with its role, the
# tools' answers are a user message of `<tool_response>` blocks, the prompt ends opening the
# assistant's.
OPEN, CLOSE, ASK = "<|im_start|>", "<|im_end|>\n", "<|im_start|>assistant\n"
RESPONSE = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.S)


def as_roles(prompt: str) -> str:
    """Qwen's FC prompt as the fake engine writes a chat ('role: content' lines, a line per tool
    answer), which MemoryModel reads."""
    lines = []
    for block in prompt.removesuffix(ASK).split(OPEN)[1:]:
        role, _, content = block.partition("\n")
        content = content.removesuffix(CLOSE)
        if role == "user" and content.startswith("<tool_response>"):
            lines += [f"tool: {answer}" for answer in RESPONSE.findall(content)]
        else:
            lines.append(f"{role}: {content}")
    return "\n".join(lines)


class QwenMemoryModel(MemoryModel):
    """MemoryModel reading Qwen's FC prompts and writing its calls as `<tool_call>` JSON."""

    def _completion(self, text: str, settings: SamplingSettings, index: int) -> str:
        answer = super()._completion(as_roles(text), settings, index)
        node = ast.parse(answer, mode="eval").body if answer.startswith("[") else None
        if isinstance(node, ast.List):  # BFCL's prompting calls, `[f(a=1), …]`
            return qwen_tool_calls([ast.unparse(call) for call in node.elts])
        return answer


@pytest.fixture(scope="module")
def tasks() -> list[BfclMultiTurnTask]:
    """Both categories over the scenario's first conversations and questions, in handler mode."""
    preset = dataclasses.replace(load_preset("tiny_random"), bfcl_mode="handler",
                                 bfcl_model=FC_MODEL)  # fmt: skip
    refs = expand_refs(["bfcl:memory_kv", "memory_rec_sum"])
    loaded = KIND.load(refs, LoadOptions(preset=preset)).tasks
    by: dict[str, list[BfclMultiTurnTask]] = {}
    for task in loaded:
        assert isinstance(task, BfclMultiTurnTask)
        by.setdefault(task.bfcl_category.removesuffix("_prereq"), []).append(task)
    return [t for c in ("memory_kv", "memory_rec_sum")
            for t in chain(by[c], SCENARIO, PREREQS, QUESTIONS)]  # fmt: skip


def test_each_prompt_result_and_snapshot_equal_bfcls_own_loop_with_qwens_fc_handler(
    tasks: list[BfclMultiTurnTask], tmp_path: Path
) -> None:
    questions = [e for t in tasks if not t.bfcl_category.endswith("_prereq") for e in t.entries]
    first = [t.entries[0]["turns"][0][-1]["content"] for t in tasks
             if t.bfcl_category.endswith("_prereq")]  # fmt: skip
    model = QwenMemoryModel(questions, first)
    result = run_evaluation(lambda _: model, tasks, tmp_path, preset=load_preset("tiny_random"),
                            options=RunOptions(backend="fake"))  # fmt: skip
    assert result.status == "complete"
    rows = [json.loads(x) for x in RunDir(tmp_path).samples.read_text().splitlines()]
    scores = {r["sample_id"]: r["scores"] for r in rows}
    # Answered from the memory alone: the prerequisites' memory reached each question.
    assert [scores[e["id"]]["accuracy"] for e in questions] == [1.0] * len(questions)
    assert all(s == {"left_memory": 1.0} for k, s in scores.items() if "_prereq_" in k)

    by_id = recorded_steps(tmp_path)
    theirs = bfcls_loop(tasks, by_id, FC_MODEL)
    for task in tasks:
        for sample in task.samples():
            steps, bfcl = by_id[sample.id], theirs[sample.id]
            # The prompts the engine was sent for this entry: its opening message and its
            # category's first function (both categories share conversations and questions).
            entry = next(e for e in task.entries if e["id"] == sample.id)
            marks = (
                entry["turns"][0][-1]["content"],
                json.dumps({"name": entry["functions"][0]["name"]})[1:-1],
            )
            mine = [p for p in model.served if all(m in p for m in marks)]
            assert mine == bfcl["prompts"], sample.id
            assert task.history(sample, steps).texts == bfcl["result"], sample.id
            if bfcl["snapshot"] is not None:
                assert steps[-1].outcome["memory"]["snapshot"] == bfcl["snapshot"], sample.id
    # memory_rec_sum's questions were shown the notes its first conversation appended.
    assert any(QUESTION in p and "answer_0=" in p for p in model.served)
    assert sum(bfcl["snapshot"] is not None for bfcl in theirs.values()) == 2 * PREREQS
