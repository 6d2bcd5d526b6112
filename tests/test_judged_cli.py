"""Judged tasks through `evalpipe run`: both phases in one command (the judge in its own
process), an endpoint judge's exact scores, --phase generate then --phase judge with two judges
(the answers never regenerated), MT-Bench from a data folder, and the task file's rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from endpoint_support import FaultServer

from evalpipe.cli import main
from evalpipe.core.errors import ConfigError
from evalpipe.jobs.jobspec import JobOptions
from evalpipe.run.runoptions import EndpointOptions, JudgeOptions, RunnerOptions
from evalpipe.tasks.judged import load_judged_task
from evalpipe.tasks.mtbench import mtbench_tasks

TASK = Path(__file__).parent / "fixtures" / "judged" / "capitals.yaml"
FAKE = ["run", "--preset", "tiny_random", "--backend", "fake"]


def folders(out: Path) -> list[Path]:
    return sorted((out / "judgments").iterdir())


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_endpoint_judge_through_evalpipe_run_scores_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    # The fake engine answers "The answer is d."; the scripted judge rates d + 1, or nothing
    # for 0 (a parse failure).
    script = {f"Answer: The answer is {d}.": f"[[{d + 1}]]" for d in range(1, 10)}
    with FaultServer(model="judge-a", script=script, faults=["500"]) as server:
        status = main([
            *FAKE, "--tasks", f"judge:{TASK}", "--out", str(out),
            "--judge-base-url", server.base_url, "--judge-model", "judge-a",
        ])  # fmt: skip
    assert status == 0
    last = {r["sample_id"]: r["completions"][0] for r in rows(out / "samples.jsonl")}
    digits = [int(t.rsplit(" ", 1)[1].rstrip(".")) for t in last.values()]
    expected = [d + 1.0 for d in digits if d]
    (folder,) = folders(out)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["parse_failures"] == digits.count(0)
    assert summary["overall"] == (sum(expected) / len(expected) if expected else None)
    assert summary["judge"]["model"] == "judge-a" and summary["judge"]["backend"] == "openai"
    assert max(server.answered.values()) == 1
    # Outside a job, auto judges after generation, each phase in a process of its own.
    assert "each phase in a process of its own" in capsys.readouterr().err
    # The report shows the judge beside its reliability.
    assert main(["report", str(out)]) == 0
    report = capsys.readouterr().out
    (row,) = [line for line in report.splitlines() if "judge-a (openai)" in line]
    assert f"| {digits.count(0)} (" in row
    assert f"{summary['overall']:.2f}" in row if expected else "—" in row
    assert "not comparable" in report


def test_generate_then_judge_twice_never_regenerates(tmp_path: Path) -> None:
    out = tmp_path / "run"
    base = [*FAKE, "--tasks", f"judge:{TASK}", "--out", str(out), "--judge", "tiny_random"]
    assert main([*base, "--phase", "generate"]) == 0
    assert not (out / "judgments").exists()
    answers = (out / "samples.jsonl").read_bytes()
    assert main([*base, "--phase", "judge"]) == 0
    assert main([*base, "--phase", "judge"]) == 0  # nothing missing: nothing asked
    assert main([*base, "--phase", "judge", "--judge-max-tokens", "16"]) == 0
    first, second = folders(out)
    assert len(rows(first / "judgments.jsonl")) == len(rows(second / "judgments.jsonl")) == 2
    assert (out / "samples.jsonl").read_bytes() == answers


def test_mt_bench_from_a_data_folder(tmp_path: Path) -> None:
    data = tmp_path / "llm_judge"
    (data / "mt_bench" / "reference_answer").mkdir(parents=True)
    questions = [
        {"question_id": 1, "category": "writing", "turns": ["Write a haiku.", "Shorter."]},
        {"question_id": 2, "category": "math", "turns": ["2 + 2?", "Times 3?"]},
    ]
    (data / "mt_bench" / "question.jsonl").write_text(
        "".join(json.dumps(q) + "\n" for q in questions)
    )
    ref = {"question_id": 2, "choices": [{"turns": ["4", "12"]}]}
    (data / "mt_bench" / "reference_answer" / "gpt-4.jsonl").write_text(json.dumps(ref) + "\n")
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
    (data / "judge_prompts.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "run"
    argv = [*FAKE, "--tasks", "mt_bench", "--judge-data", str(data), "--judge", "tiny_random"]
    assert main([*argv, "--out", str(out)]) == 0
    (folder,) = folders(out)
    judged = {(r["task"], r["sample_id"]): r for r in rows(folder / "judgments.jsonl")}
    assert set(judged) == {
        ("mt_bench_writing", "1@1"), ("mt_bench_writing", "1@2"),
        ("mt_bench_math", "2@1"), ("mt_bench_math", "2@2"),
    }  # fmt: skip
    assert judged[("mt_bench_math", "2@2")]["prompt"][1]["content"].startswith(
        "Times 3? R2: 12 A2: "
    )
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["published_judge"] == "gpt-4" and not summary["comparable"]


def test_the_packaged_mt_bench_has_80_two_turn_questions() -> None:
    tasks = mtbench_tasks()
    assert sum(len(t.samples()) for t in tasks) == 80
    assert all(len(s.turns) == 1 for t in tasks for s in t.samples())
    temperature = {t.topic: t.sampling.temperature for t in tasks}
    assert temperature["writing"] == 0.7 and temperature["math"] == 0.0
    assert all(s.target["reference"] for t in tasks if t.topic == "math" for s in t.samples())


def test_judge_options_and_task_files_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="need a judge"):
        JudgeOptions(max_tokens=5)
    with pytest.raises(ConfigError, match="--judge-base-url"):
        JudgeOptions(preset="tiny_random", endpoint=EndpointOptions(model="m"))
    with pytest.raises(ConfigError, match="a merge keeps no judgments"):
        JobOptions(run=RunnerOptions(judge=JudgeOptions(preset="tiny_random")), shards=2)
    bad = tmp_path / "bad.yaml"
    bad.write_text(TASK.read_text().replace("parser: rating", "parsr: rating"))
    with pytest.raises(ConfigError, match="unknown key 'parsr'"):
        load_judged_task(bad)
