"""A scripted model for BFCL multi-turn entries on the fake engine: at each user turn it issues
the turn's ground-truth calls (one step), and after their results it answers in words (no
call, so BFCL ends the turn); for the entries named chatty it answers every user turn with
CHATTY_WORDS words, which the next step's prompt cannot hold. QwenGroundTruthModel does the
same for BFCL's handler mode with Qwen's FC handler (`<tool_call>` JSON in its own prompt
format); NativeGroundTruthModel for native mode, its calls hermes's `<tool_call>` JSON, which
the fake engine parses into the completion's tool calls. Run as a program, it evaluates those
entries of multi_turn_base into a run directory, in this process (the kill -9 test's subject):
python bfcl_scripted.py OUT CHATTY_ID ID...."""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalpipe.catalog.preset import Preset, load_preset
from evalpipe.catalog.taskrefs import expand_refs
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.records.sampling import SamplingSettings
from evalpipe.run.runner import GenerationResult, RunOptions, run_evaluation
from evalpipe.tasks.bfcl.kind import KIND
from evalpipe.tasks.bfcl.multiturn import BfclMultiTurnTask
from evalpipe.tasks.kindbase import LoadOptions

# Words (the fake engine counts a word a token): BFCL's function docs are long, and the scripted
# entries' steps stay under 4,500; a chatty answer (cut to the task's 4,096 new tokens) does not.
CONTEXT = 6_000
CHATTY_WORDS = CONTEXT
DONE = "All done."
ROLES = ("system", "user", "assistant", "tool")


def load(category: str, preset: Preset | None = None) -> BfclMultiTurnTask:
    """The category's task, in `preset`'s BFCL mode (default: prompting)."""
    options = LoadOptions() if preset is None else LoadOptions(preset=preset, backend="fake")
    (task,) = KIND.load(expand_refs([f"bfcl:{category}"]), options).tasks
    assert isinstance(task, BfclMultiTurnTask)
    return task


def last_role(text: str) -> str:
    """The role of the last message of a prompt as the fake engine writes it ('role: …' lines)."""
    return max(ROLES, key=lambda role: text.rfind(f"\n{role}: "))


class GroundTruthModel(FakeEngine):
    """Answers each entry of `entries` with its ground-truth calls (see the module's text)."""

    def __init__(self, entries: Sequence[Mapping[str, Any]], *, chatty: Sequence[str] = (),
                 delay_s: float = 0.0) -> None:  # fmt: skip
        preset = load_preset("tiny_random")
        super().__init__(preset, EngineSettings(max_model_len=CONTEXT), delay_s=delay_s)
        self.entries = {e["turns"][0][-1]["content"]: e for e in entries}
        self.chatty = set(chatty)

    def _completion(self, text: str, settings: SamplingSettings, index: int) -> str:
        entry = next(e for question, e in self.entries.items() if question in text)
        if last_role(text) != "user":
            return DONE
        if entry["id"] in self.chatty:
            return " ".join(["chat"] * CHATTY_WORDS)
        turn = text.count("\nuser: ") - 1
        calls = entry["ground_truth"][turn]
        return f"[{', '.join(calls)}]" if calls else "None of the functions fits the request."


# Qwen's FC prompt (its BFCL handler's `_format_prompt`): a user turn, and the tools' answers.
QWEN_USER = "<|im_start|>user\n"
QWEN_RESULTS = "</tool_response><|im_end|>\n<|im_start|>assistant\n"


def qwen_tool_calls(calls: Sequence[str]) -> str:
    """BFCL's ground-truth calls (`f(a=1)`, keywords only) as Qwen writes calls."""
    out = []
    for call in calls:
        node = ast.parse(call, mode="eval").body
        assert isinstance(node, ast.Call) and not node.args, call
        arguments = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
        call = json.dumps({"name": ast.unparse(node.func), "arguments": arguments})
        out.append(f"<tool_call>\n{call}\n</tool_call>")
    return "\n".join(out)


class NativeGroundTruthModel(GroundTruthModel):
    """The ground-truth model for native mode: the chat has no system prompt (the functions
    are tools), the calls are hermes's `<tool_call>` JSON; the entries named in `broken` open
    their first turn's call and break its JSON (an unparseable call, which ends the turn)."""

    def __init__(self, entries: Sequence[Mapping[str, Any]], *, broken: Sequence[str] = (),
                 delay_s: float = 0.0) -> None:  # fmt: skip
        super().__init__(entries, delay_s=delay_s)
        self.broken = set(broken)

    def _completion(self, text: str, settings: SamplingSettings, index: int) -> str:
        entry = next(e for question, e in self.entries.items() if question in text)
        text = "\n" + text  # the first message is a user's: a line of its own
        if last_role(text) != "user":
            return DONE
        turn = text.count("\nuser: ") - 1
        if entry["id"] in self.broken and turn == 0:
            return BROKEN_CALL
        calls = entry["ground_truth"][turn]
        return qwen_tool_calls(calls) if calls else "None of the functions fits the request."


# A call opened and not closed as JSON: hermes's parser (and the fake engine) cannot read it.
BROKEN_CALL = '<tool_call>\n{"name": "ls", "arguments": {"a": </tool_call>'


class QwenGroundTruthModel(GroundTruthModel):
    """The ground-truth model for BFCL's handler mode with Qwen's FC handler: the prompt is the
    handler's text, the calls are `<tool_call>` JSON."""

    def _completion(self, text: str, settings: SamplingSettings, index: int) -> str:
        entry = next(e for question, e in self.entries.items() if question in text)
        if text.endswith(QWEN_RESULTS):
            return DONE
        turn = text.count(QWEN_USER) - text.count(QWEN_USER + "<tool_response>") - 1
        calls = entry["ground_truth"][turn]
        return qwen_tool_calls(calls) if calls else "None of the functions fits the request."


def subset(task: BfclMultiTurnTask, ids: Sequence[str]) -> BfclMultiTurnTask:
    """The task over the entries named (in that order)."""
    by_id = {e["id"]: e for e in task.entries}
    return BfclMultiTurnTask(bfcl_category=task.bfcl_category, version=task.version,
                             entries=[by_id[i] for i in ids], mode=task.mode)  # fmt: skip


def run(out: Path, task: BfclMultiTurnTask, chatty: str, delay_s: float) -> GenerationResult:
    """Every entry of `task` answered by the ground-truth model, `chatty` by words."""
    model = GroundTruthModel(task.entries, chatty=[chatty], delay_s=delay_s)
    return run_evaluation(lambda settings: model, [task], out, preset=load_preset("tiny_random"),
                          options=RunOptions(backend="fake"))  # fmt: skip


def run_model(out: Path, tasks: Sequence[Any], model: FakeEngine, stop: Any = None) -> str:
    """The status of a run of `tasks` into `out`, answered by the scripted `model` (a fake
    engine; `stop` a stop flag it may raise)."""
    return run_evaluation(lambda settings: model, list(tasks), out,
                          preset=load_preset("tiny_random"), options=RunOptions(backend="fake"),
                          stop=stop).status  # fmt: skip


def records(out: Path) -> dict[str, dict[str, Any]]:
    """The run's samples.jsonl by sample id (each written once)."""
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == len({r["sample_id"] for r in rows}), "a sample was written twice"
    return {r["sample_id"]: r for r in rows}


def step_rows(out: Path) -> list[dict[str, Any]]:
    """The run's steps.jsonl, in file order."""
    return [json.loads(x) for x in (out / "steps.jsonl").read_text().splitlines()]


def step_keys(out: Path) -> list[tuple[str, int, str, str]]:
    """Each recorded step as (sample, index, text, outcome), sorted: two runs' steps compare."""
    return sorted((s["sample_id"], s["index"], s["text"], json.dumps(s["outcome"]))
                  for s in step_rows(out))  # fmt: skip


if __name__ == "__main__":
    out, chatty, ids = Path(sys.argv[1]), sys.argv[2], sys.argv[2:]
    result = run(out, subset(load("multi_turn_base"), ids), chatty, delay_s=0.3)
    sys.exit(0 if result.status == "complete" else 1)
