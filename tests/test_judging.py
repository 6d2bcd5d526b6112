"""The judging phase: judgments streamed into their judge's folder, resumed without asking one
twice, a changed judge judging the same answers anew; rating parsing; scores exact through an
endpoint judge with scripted verdicts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from endpoint_support import FaultServer
from judge_support import PROMPT, TASK, answer, endpoint_judge, judge, verdicts
from runner_support import preset

from evalpipe.core.errors import ConfigError, DamagedFileError
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.run.judgephase import JUDGE_SAMPLING, JudgeTask, judge_run
from evalpipe.rundir.judgments import SCORE, JudgeDefinition, judge_dirs, read_judge_summary
from evalpipe.tasks.base import Sample
from evalpipe.tasks.gradings import (
    JudgePrompt,
    SingleGrading,
    TemplateGrading,
    parse_pass_fail,
    parse_rating,
    parse_score,
)

WORK = [(TASK, TASK.samples())]


@pytest.mark.parametrize(
    ("text", "rating"),
    [
        ("Rating: [[8]]", 8.0),
        ("[[8.5]]", 8.5),
        ("[[10]] though [3] was close", 10.0),
        ("first [3], then [[9]]", 9.0),  # the double brackets win wherever they are
        ("Rating: [7]", 7.0),  # the fallback pattern
        ("[[ 8 ]]", None),
        ("Rating: 8", None),  # FastChat's package matches it, then discards it
        ("[[eight]]", None),
        ("", None),
    ],
)
def test_ratings_parse_as_fastchat_reads_them(text: str, rating: float | None) -> None:
    assert parse_rating(text) == rating


def test_pass_fail_and_regex_parsers() -> None:
    assert parse_pass_fail("so [[PASS]]") == 1.0
    assert parse_pass_fail("[[fail]]") == 0.0
    assert parse_pass_fail("pass") is None
    assert parse_score("regex", "Score: 4/5", r"Score: (\d+)") == 4.0
    assert parse_score("regex", "Score: none", r"Score: (\d+)") is None
    with pytest.raises(ConfigError, match="no group"):
        TemplateGrading(prompt=judge_prompt("x"), parser="regex", pattern=r"\d+")
    with pytest.raises(ConfigError, match="needs a pattern"):
        TemplateGrading(prompt=judge_prompt("x"), parser="regex")


def judge_prompt(name: str, template: str = "{question} {answer}") -> JudgePrompt:
    return JudgePrompt(name=name, system_prompt=f"sys {name}", prompt_template=template)


def test_a_thinking_judge_is_read_from_its_answer_only() -> None:
    task = JudgeTask(
        name="t", category="c", sampling=JUDGE_SAMPLING, reasoning_parser="deepseek_r1",
        grading=TemplateGrading(prompt=PROMPT, parser="pass_fail"),
    )  # fmt: skip
    sample = Sample(id="1@1", prompt="q", target=None)
    scored = task.score(sample, ["[[FAIL]] would be harsh.</think>\n[[PASS]]"])
    assert scored.scores == {SCORE: 1.0} and scored.reasoning == ("[[FAIL]] would be harsh.",)
    # DeepSeek-R1's template opens <think> in the prompt: no </think>, all of it reasoning.
    cut = task.score(sample, ["Still weighing it: [[PASS]]"])
    assert (cut.extracted, cut.scores, cut.cut_off) == ((None,), {}, (True,))
    # The parser shapes the judgments: a judge folder of its own; none leaves the name as it was.
    plain = JudgeDefinition(model="m")
    assert "reasoning_parser" not in plain.to_dict()
    assert JudgeDefinition(model="m", reasoning_parser="qwen3").fingerprint != plain.fingerprint
    # A task file's rating declares no scale: nothing is out of range there.
    rating = JudgeTask(
        name="t", category="c", sampling=JUDGE_SAMPLING, grading=TemplateGrading(prompt=PROMPT)
    )
    assert rating.score(sample, ["[[85]]"]).scores == {SCORE: 85.0}


def test_single_grading_asks_one_judgment_per_turn_with_references() -> None:
    prompts = {
        "single-v1": judge_prompt("single-v1", "Q {question} A {answer}"),
        "single-math-v1": judge_prompt(
            "single-math-v1", "Q {question} R {ref_answer_1} A {answer}"
        ),
        "single-v1-multi-turn": judge_prompt(
            "single-v1-multi-turn", "{question_1}|{answer_1}|{question_2}|{answer_2}"
        ),
        "single-math-v1-multi-turn": judge_prompt(
            "single-math-v1-multi-turn", "{question_1}|{ref_answer_1}|{ref_answer_2}|{answer_2}"
        ),
    }
    grading = SingleGrading(prompts=prompts, ref_categories=frozenset({"math"}))
    plain = Sample(id="1", prompt="q1", turns=("q2",), target={}, meta={"category": "writing"})
    asks = grading.asks(plain, ["a1", "a2"])
    assert [a.turn for a in asks] == [1, 2]
    assert asks[0].prompt == [
        {"role": "system", "content": "sys single-v1"},
        {"role": "user", "content": "Q q1 A a1"},
    ]
    assert asks[1].prompt[1]["content"] == "q1|a1|q2|a2"
    math = Sample(
        id="2", prompt="q1", turns=("q2",), target={"reference": ["r1", "r2"]},
        meta={"category": "math"},
    )  # fmt: skip
    asks = grading.asks(math, ["a1", "a2"])
    assert asks[0].prompt[1]["content"] == "Q q1 R r1 A a1"
    assert asks[1].prompt[1]["content"] == "q1|r1|r2|a2"
    with pytest.raises(ConfigError, match="single-math-v1"):
        SingleGrading(prompts={"single-v1": prompts["single-v1"]}, ref_categories=frozenset())


def judgments(folder: Path) -> list[dict]:
    return [json.loads(x) for x in (folder / "judgments.jsonl").read_text().splitlines()]


def test_judgments_are_records_resumed_never_asked_twice(tmp_path: Path) -> None:
    answer(tmp_path)
    before = (tmp_path / "samples.jsonl").read_bytes()
    opened: list[FakeEngine] = []

    def open_judge() -> FakeEngine:
        opened.append(FakeEngine(preset(), EngineSettings(), script=verdicts(), delay_s=0.0))
        return opened[-1]

    first = judge_run(open_judge, tmp_path, WORK, judge())
    assert first.status == "complete" and first.asked == len(TASK.samples())
    rows = judgments(first.folder.path)
    assert {r["sample_id"] for r in rows} == {f"{s.id}@2" for s in TASK.samples()}
    assert all(r["completions"][0] in verdicts().values() for r in rows)  # kept in full
    # A second call finds every judgment on disk and opens no judge.
    again = judge_run(open_judge, tmp_path, WORK, judge())
    assert again.asked == 0 and len(opened) == 1
    assert again.summary == first.summary
    # Another judge (here: another sampling) judges the same answers into a folder beside it.
    other = judge_run(open_judge, tmp_path, WORK, judge(max_tokens=64))
    assert other.folder != first.folder and other.asked == len(TASK.samples())
    assert len(judge_dirs(first.folder.run)) == 2
    assert (tmp_path / "samples.jsonl").read_bytes() == before  # never regenerated
    meta = json.loads(first.folder.judge.read_text())
    assert meta["model"] == "judge-a" and meta["answers"]
    # Each file reads back into the record it was written from.
    assert JudgeDefinition.from_dict(meta) == judge().definition()
    assert read_judge_summary(first.folder) == first.summary
    first.folder.summary.write_text('{"judgments": 3}')
    with pytest.raises(DamagedFileError, match=r"summary\.json is not a judge summary .*'parse_"):
        read_judge_summary(first.folder)


def expected_scores(out: Path) -> tuple[list[float], int]:
    """The scripted judge's scores for the run's last answers, and its parse failures."""
    last = [
        json.loads(x)["completions"][0] for x in (out / "samples.jsonl").read_text().splitlines()
    ]
    digits = [int(text.rsplit(" ", 1)[1].rstrip(".")) for text in last]
    return [d + 1.0 for d in digits if d != 0], digits.count(0)


def test_endpoint_judge_scores_are_exact(tmp_path: Path) -> None:
    answer(tmp_path)
    with FaultServer(model="judge-a", script=verdicts(), faults=["429", "500"]) as server:
        result = judge_run(lambda: endpoint_judge(server.base_url), tmp_path, WORK, judge())
    scores, failures = expected_scores(tmp_path)
    summary = result.summary
    assert summary.parse_failures == failures
    assert summary.judgments == len(TASK.samples())
    assert summary.overall == sum(scores) / len(scores)
    assert summary.distribution == {str(int(s)): n for s, n in sorted(Counter(scores).items())}
    assert summary.comparable is False and summary.note and "not comparable" in summary.note
    assert max(server.answered.values()) == 1  # the retried faults asked nothing twice


def test_kill_during_judging_then_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    answer(whole)
    answer(cut)
    with FaultServer(model="judge-a", script=verdicts()) as server:
        judge_run(lambda: endpoint_judge(server.base_url), whole, WORK, judge())
    with FaultServer(model="judge-a", script=verdicts(), delay_s=0.3) as server:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(Path("tests").resolve()), *sys.path]),
        }
        child = subprocess.Popen(
            [sys.executable, "tests/judge_support.py", str(cut), server.base_url], env=env
        )
        log = next(iter(cut.glob("judgments/*/judgments.jsonl")), None)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            log = next(iter(cut.glob("judgments/*/judgments.jsonl")), None)
            if log is not None and len(log.read_text().splitlines()) >= 3:
                break
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert log is not None
        kept = {json.loads(x)["prompt"][1]["content"] for x in log.read_text().splitlines()}
        assert 3 <= len(kept) < len(TASK.samples())
        asked_before = Counter(server.answered)
        result = judge_run(lambda: endpoint_judge(server.base_url), cut, WORK, judge())
    assert result.status == "complete"
    # No judgment that reached the disk was asked again; only those in flight at the kill
    # (at most the judge's concurrency, 2) were asked a second time.
    for key in kept:
        assert server.answered[next(k for k in server.answered if key in k)] == 1
    twice = [k for k, n in server.answered.items() if n > 1]
    assert len(twice) <= 2 and all(asked_before[k] == 1 for k in twice)

    def rows(out: Path) -> list[dict]:
        return sorted(judgments(next(out.glob("judgments/*"))), key=lambda r: r["sample_id"])

    assert rows(cut) == rows(whole)
    written = json.loads(next(whole.glob("judgments/*/summary.json")).read_text())
    assert result.summary.to_dict() == written
