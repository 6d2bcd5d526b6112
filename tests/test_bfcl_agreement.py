"""bench/bfcl_agreement.py's multi-turn result files: a run's steps read back as `bfcl generate`
writes an entry (per turn, per step, the model's text; a failed inference as its error string);
a native run's completions and steps as BFCL's FC handler records them (their parsed calls).
Its scoring by `bfcl evaluate` is the bench's quick test (tests/test_bench_quick.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from evalpipe.records.episode import Step
from evalpipe.records.tools import ToolCall, ToolCalls
from evalpipe.rundir.steps import StepRecord

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bfcl_agreement import from_run, multi_turn_from_run

TASK = "bfcl_multi_turn_base"


def record(sample_id: str, accuracy: float, **extra: Any) -> dict[str, Any]:
    return {"task": TASK, "category": "bfcl", "sample_id": sample_id, "prompt": [],
            "completions": [""], "extracted": ["valid" if accuracy else "x"],
            "scores": {"accuracy": accuracy}, "prompt_tokens": 1, "completion_tokens": [1],
            "shard": None, **extra}  # fmt: skip


def step(sample_id: str, index: int, turn: int, text: str) -> dict[str, Any]:
    found = Step(index=index, text=text, prompt_tokens=1, completion_tokens=1,
                 outcome={"turn": turn, "calls": [], "results": []})  # fmt: skip
    return StepRecord(task=TASK, sample_id=sample_id, step=found).to_dict()


def test_trajectories_are_grouped_by_turn_and_failed_inferences_are_error_strings(
    tmp_path: Path,
) -> None:
    refusal = {"reason": "context_overflow", "prompt_tokens": 9000, "limit": 8192, "detail": ""}
    samples = [record("a", 1.0), record("b", 0.0, refusal=refusal),
               record("c", 0.0, extracted=["sandbox_failed"]),
               {**record("d", 1.0), "task": "bfcl_simple_python"}]  # fmt: skip
    # Out of order, as concurrent entries append them; b's steps before its refused one.
    steps = [step("a", 0, 0, "[f(x=1)]"), step("b", 0, 0, "[g()]"), step("a", 2, 1, "words"),
             step("a", 1, 0, "done"), step("a", 3, 2, "[h()]"), step("a", 4, 2, "end")]  # fmt: skip
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples))
    (tmp_path / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))

    results, verdicts = multi_turn_from_run(tmp_path)

    assert results == {"multi_turn_base": [
        ("a", [["[f(x=1)]", "done"], ["words"], ["[h()]", "end"]]),
        ("b", "Error during inference: context_overflow"),
        ("c", "Error during inference: sandbox_failed"),
    ]}  # fmt: skip
    assert verdicts == {"multi_turn_base": {"a": True, "b": False, "c": False}}


def test_a_native_runs_completions_are_bfcls_fc_results(tmp_path: Path) -> None:
    call = {"name": "f", "arguments": '{"x": 1}'}
    samples = [
        {**record("a", 1.0), "task": "bfcl_simple_python",
         "tool_calls": [{"calls": [call, call], "content": ""}]},
        {**record("b", 0.0), "task": "bfcl_simple_python", "completions": ["<tool_call>{"],
         "tool_calls": [{"calls": [], "content": "<tool_call>{", "unparsed": "not JSON"}]},
        {**record("c", 0.0), "task": "bfcl_simple_python"},  # refused: no calls recorded
        record("d", 1.0),
    ]  # fmt: skip
    called = Step(index=0, text="<tool_call>…", prompt_tokens=1, completion_tokens=1,
                  calls=ToolCalls(calls=(ToolCall(name="f", arguments='{"x": 1}'),)),
                  outcome={"turn": 0, "calls": ["f(x=1)"], "results": ["1"]})  # fmt: skip
    words = Step(
        index=1,
        text="done",
        prompt_tokens=1,
        completion_tokens=1,
        calls=ToolCalls(content="done"),
        outcome={"turn": 0, "calls": [], "results": []},
    )
    steps = [StepRecord(task=TASK, sample_id="d", step=s).to_dict() for s in (called, words)]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples))
    (tmp_path / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))

    results, _ = from_run(tmp_path, native=True)
    assert results == {"simple_python": [("a", [{"f": '{"x": 1}'}, {"f": '{"x": 1}'}]),
                                         ("b", "<tool_call>{"), ("c", "")]}  # fmt: skip
    trajectories, _ = multi_turn_from_run(tmp_path, native=True)
    assert trajectories == {"multi_turn_base": [("d", [[[{"f": '{"x": 1}'}], "done"]])]}
