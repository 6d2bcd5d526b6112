"""Structured judge outputs: a grading's JSON schema reaches the judge's requests, a reasoning
judge's engine is told its reasoning parser so the grammar leaves its thinking free, and a
structured judgment that does not parse is a recorded parse failure, never a traceback."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from judge_support import TASK, answer
from runner_support import preset

from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.engine.vllm import llm_kwargs
from evalpipe.records.request import Request
from evalpipe.run.judgephase import JUDGE_SAMPLING, Judge, JudgeTask, judge_run
from evalpipe.rundir.judgments import SCORE
from evalpipe.tasks.base import Sample
from evalpipe.tasks.hlegrading import HleGrading

SCHEMA = {
    "type": "object",
    "properties": {"correct": {"type": "string", "enum": ["yes", "no"]},
                   "confidence": {"type": "integer"},
                   "extracted_final_answer": {"type": "string"}},
    "required": ["correct", "confidence", "extracted_final_answer"],
    "additionalProperties": False,
}  # fmt: skip
GRADING = HleGrading(judge_prompt="{question}|{correct_answer}|{response}", json_schema=SCHEMA)
VERDICT = '{"correct": "yes", "confidence": 70, "extracted_final_answer": "4"}'


class Recording(FakeEngine):
    """The fake engine, keeping every request it is given."""

    def __init__(self, script: dict[str, str]) -> None:
        super().__init__(preset(), EngineSettings(), script=script, delay_s=0.0)
        self.requests: list[Request] = []

    def add(self, requests: Sequence[Request]) -> None:
        self.requests += requests
        super().add(requests)


def test_a_graded_judgment_asks_for_its_schema_and_a_bad_one_is_counted(tmp_path: Path) -> None:
    answer(tmp_path)
    # Answers ending in 0 get free text from the judge: parse failures.
    engine = Recording({"The answer is 0.": "It looks right to me."} | {
        f"The answer is {d}.": VERDICT for d in range(1, 10)})  # fmt: skip
    samples = [dataclasses.replace(s, target={"question": "q", "answer": "4"})
               for s in TASK.samples()]  # fmt: skip
    judge = Judge(identity={"backend": "fake", "model": "j"}, gradings={TASK.name: GRADING})
    result = judge_run(lambda: engine, tmp_path, [(TASK, samples)], judge)
    assert engine.requests and all(r.json_schema == SCHEMA for r in engine.requests)
    rows = [json.loads(x) for x in result.folder.judgments.read_text().splitlines()]
    failed = [r for r in rows if "It looks right" in r["completions"][0]]
    assert failed and all(r["scores"] == {} for r in failed)
    assert result.summary.parse_failures == len(failed)
    assert result.summary.benchmarks[TASK.name]["parse_failures"] == len(failed)


def test_a_reasoning_judge_keeps_its_reasoning_before_the_structured_verdict() -> None:
    task = JudgeTask(name="t", category="c", sampling=JUDGE_SAMPLING, grading=GRADING,
                     reasoning_parser="qwen3", json_schema=SCHEMA)  # fmt: skip
    sample = Sample(id="1@1", prompt="q", target=None)
    scored = task.score(sample, [f"<think>Is 4 right? Yes.</think>\n{VERDICT}"])
    assert scored.scores == {SCORE: 1.0} and scored.reasoning == ("Is 4 right? Yes.",)
    # The engine applies the grammar after the reasoning: vLLM is given the parser for it.
    thinking = dataclasses.replace(preset(), reasoning_parser="qwen3")
    kwargs = llm_kwargs(thinking, EngineSettings(), "/models/m")
    assert kwargs["structured_outputs_config"] == {"reasoning_parser": "qwen3"}
    assert "structured_outputs_config" not in llm_kwargs(preset(), EngineSettings(), "/models/m")
