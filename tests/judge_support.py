"""A judged task for the judging tests, and a driver that judges a run directory in a child
process through an OpenAI-compatible judge, so tests can kill -9 it mid-phase.

`python tests/judge_support.py RUN_DIR BASE_URL` judges RUN_DIR's answers with the endpoint at
BASE_URL and exits 0 (complete) or 75 (interrupted).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from runner_support import ChatTask, preset

from evalpipe.catalog.preset import with_endpoint
from evalpipe.core import exitcodes
from evalpipe.engine.endpoint import EndpointEngine
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.run.judgephase import JUDGE_SAMPLING, Judge, judge_run
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.tasks.gradings import JudgePrompt, TemplateGrading

PROMPT = JudgePrompt(
    name="test-rating",
    system_prompt="You grade answers.",
    prompt_template="Question: {question}\nAnswer: {answer}\nRate it 1-10 as [[n]].",
)


TASK = ChatTask(name="chat", category="chat", size=12)


def verdicts() -> dict[str, str]:
    """Scripted judge outputs keyed by the answer they grade: answer digit d gets [[d + 1]],
    except d = 0, which the judge answers without a rating (a parse failure)."""
    out = {"Answer: The answer is 0.": "I cannot rate this."}
    out |= {f"Answer: The answer is {d}.": f"Fine work. Rating: [[{d + 1}]]" for d in range(1, 10)}
    return out


def answer(out: Path) -> None:
    """The run's answers, from the fake engine."""
    engine = FakeEngine(preset(), EngineSettings(), delay_s=0.0)
    run_evaluation(
        lambda settings: engine,
        [TASK],
        out,
        preset=preset(),
        options=RunOptions(backend="fake"),
    )


def judge(model: str = "judge-a", **sampling: object) -> Judge:

    return Judge(
        identity={"backend": "openai", "model": model},
        gradings={TASK.name: TemplateGrading(prompt=PROMPT)},
        sampling=dataclasses.replace(JUDGE_SAMPLING, **sampling),
    )


def endpoint_judge(base_url: str, model: str = "judge-a", concurrency: int = 2) -> EndpointEngine:
    endpoint = with_endpoint(
        preset(),
        base_url=base_url,
        model=model,
        concurrency=concurrency,
        timeout_s=5.0,
        backoff_s=0.05,
        max_retries=3,
    )
    return EndpointEngine(endpoint, key=None)


def thinking_judge(folder: Path, parser: str = "qwen3") -> Path:
    """A judge preset (a YAML file in `folder`): the test model with a reasoning parser, as a
    thinking judge's preset has."""
    shipped = Path(__file__).parents[1] / "configs" / "presets" / "tiny_random.yaml"
    path = folder / "thinking_judge.yaml"
    path.write_text(shipped.read_text() + f"reasoning_parser: {parser}\n")
    return path


def mt_bench_data(folder: Path, questions: list[dict], references: list[dict]) -> Path:
    """An MT-Bench data folder laid out as FastChat's llm_judge/data, with these questions and
    reference answers and short judge prompts of FastChat's names and fields."""
    (folder / "mt_bench" / "reference_answer").mkdir(parents=True)
    (folder / "mt_bench" / "question.jsonl").write_text(
        "".join(json.dumps(q) + "\n" for q in questions)
    )
    (folder / "mt_bench" / "reference_answer" / "gpt-4.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in references)
    )
    prompts = {
        "single-v1": "Q: {question} A: {answer}",
        "single-math-v1": "Q: {question} R: {ref_answer_1} A: {answer}",
        "single-v1-multi-turn": "{question_1} {answer_1} {question_2} A2: {answer_2}",
        "single-math-v1-multi-turn": "{question_2} R2: {ref_answer_2} A2: {answer_2}",
    }
    lines = [
        {"name": n, "type": "single", "system_prompt": "Judge.", "prompt_template": t,
         "output_format": "[[rating]]"}
        for n, t in prompts.items()
    ]  # fmt: skip
    (folder / "judge_prompts.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return folder


def main(argv: list[str]) -> int:
    out, base_url = Path(argv[0]), argv[1]
    result = judge_run(lambda: endpoint_judge(base_url), out, [(TASK, TASK.samples())], judge())
    return exitcodes.OK if result.status == "complete" else exitcodes.RESUMABLE


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
