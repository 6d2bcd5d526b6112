"""Where the judge runs: the planner's choice and its reasons, what the job asks for, the GPU
split on a node (fake NVML), and the judge following the answers as they are written."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest
from judge_support import TASK, answer, judge, verdicts
from runner_support import preset

from evalpipe.catalog.gpus import get_gpu
from evalpipe.catalog.preset import load_preset
from evalpipe.cli import main
from evalpipe.core.errors import DoesNotFitError
from evalpipe.core.options import record_from
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.jobs.jobspec import JobOptions
from evalpipe.jobs.prepare import prepare
from evalpipe.monitor.fake_nvml import FakeGpu, FakeNvml, fake_uuid
from evalpipe.planning import planner
from evalpipe.planning.judgeplacement import choose_placement
from evalpipe.run.judgephase import judge_run
from evalpipe.run.judgeprocess import beside_gpus, split_gpus
from evalpipe.run.localplan import visible_gpus
from evalpipe.run.runoptions import RunnerOptions
from evalpipe.rundir.samplelog import SampleTail

H100 = get_gpu("h100-80gb")
WORK = [(TASK, TASK.samples())]
JUDGED = Path(__file__).parent / "fixtures" / "judged" / "capitals.yaml"


def plan(name: str, **kw: object) -> planner.Plan:
    return planner.plan(load_preset(name), H100, gpus_per_node=8, **kw)


def test_the_planner_places_the_judge_and_says_why() -> None:
    small, judge_plan = plan("llama3_1_8b"), plan("qwen3_32b")
    beside = choose_placement(small, judge_plan, gpus_per_node=8)
    assert beside.kind == "side-by-side" and "both fit on one node at once" in beside.reason
    assert beside.gpus_per_node == small.gpus_per_node + judge_plan.gpus_per_node
    after = choose_placement(small, judge_plan, gpus_per_node=8, wanted="after")
    assert after.kind == "after" and after.gpus_per_node == max(
        small.gpus_per_node, judge_plan.gpus_per_node
    )
    assert "the judge's" in after.reason  # the larger phase sizes the job
    # The model filling the node with replicas would lose some: after, unless the walls say so.
    filled = plan("llama3_1_8b", replicas=None)
    auto = choose_placement(filled, judge_plan, gpus_per_node=8)
    assert auto.kind == "after" and "of its 8 replicas" in auto.reason
    walls = {"after": 900.0, "side-by-side": 600.0}
    timed = choose_placement(filled, judge_plan, gpus_per_node=8, walls_s=walls)
    assert timed.kind == "side-by-side" and "600 s against 900 s" in timed.reason
    assert timed.model_replicas == 8 - judge_plan.gpus_per_node
    # A judge behind a server takes none of the job's GPUs.
    served = choose_placement(small, None, gpus_per_node=8)
    assert (served.kind, served.gpus_per_node, served.helper_gpus) == ("side-by-side", 1, 0)


def test_side_by_side_that_does_not_fit_is_refused_saying_why() -> None:
    big, judge_plan = plan("llama3_3_70b"), plan("qwen2_5_72b")
    need = big.gpus_per_node + judge_plan.gpus_per_node
    if need <= 8:  # both 70B-class layouts on one node of 4 instead
        big, judge_plan = (
            planner.plan(load_preset(n), H100, gpus_per_node=4)
            for n in ("llama3_3_70b", "qwen2_5_72b")
        )
        nodes = 4
    else:
        nodes = 8
    auto = choose_placement(big, judge_plan, gpus_per_node=nodes)
    assert auto.kind == "after" and "side by side does not fit" in auto.reason
    with pytest.raises(DoesNotFitError, match=r"need \d+ GPUs at once; a node has"):
        choose_placement(big, judge_plan, gpus_per_node=nodes, wanted="side-by-side")


def test_the_job_asks_for_both_phases_and_tells_the_runner(tmp_path: Path) -> None:
    options = {"backend": "fake", "tasks": (f"judge:{JUDGED}",), "judge": "tiny_random"}
    run = record_from(RunnerOptions, options)
    beside = prepare("tiny_random", "local", JobOptions(run=run), tmp_path / "a")
    assert "#SBATCH --gres=gpu:h100:2" in beside.script
    assert "# Judge placement, side-by-side: both fit on one node at once" in beside.script
    assert "--judge-placement side-by-side" in beside.script
    forced = record_from(RunnerOptions, {**options, "judge_placement": "after"})
    after = prepare("tiny_random", "local", JobOptions(run=forced), tmp_path / "b")
    assert "#SBATCH --gres=gpu:h100:1" in after.script
    assert "# Judge placement, after: asked for;" in after.script
    generate = record_from(RunnerOptions, {**options, "phase": "generate"})
    plain = prepare("tiny_random", "local", JobOptions(run=generate), tmp_path / "c")
    assert "Judge placement" not in plain.script and "--judge-placement" not in plain.script
    only = record_from(RunnerOptions, {**options, "phase": "judge"})
    judging = prepare("tiny_random", "local", JobOptions(run=only), tmp_path / "d")
    assert "# Judge placement, after: side by side does not fit (the job only judges" in (
        judging.script
    )
    served = record_from(RunnerOptions, {"tasks": options["tasks"], "judge": "tiny_random"})
    serve = prepare("tiny_random", "local", JobOptions(run=served, mode="serve"), tmp_path / "e")
    assert "after: side by side does not fit (the job's vLLM server holds" in serve.script


def test_gpus_split_between_model_and_judge_from_the_visible_ones(monkeypatch) -> None:
    nvml = FakeNvml([FakeGpu(uuid=fake_uuid(i)) for i in range(4)])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1,2")
    gpus = visible_gpus(nvml)
    judge_preset = load_preset("llama3_1_8b")
    assert beside_gpus(gpus, judge_preset, tp=None, pp=None, replicas=None) == (["3", "1"], ["2"])
    # A job's layout for the model: the judge gets what follows it.
    assert beside_gpus(gpus, judge_preset, tp=1, pp=1, replicas=1) == (["3"], ["1"])
    assert beside_gpus(gpus, None, tp=None, pp=None, replicas=None) == (["3", "1", "2"], [])
    with pytest.raises(DoesNotFitError, match="3 are visible"):
        split_gpus(["3", "1", "2"], model_gpus=2, judge_gpus=2)


def test_a_followed_file_yields_whole_lines_once(tmp_path: Path) -> None:
    answer(tmp_path / "run")
    lines = (tmp_path / "run" / "samples.jsonl").read_bytes().splitlines(keepends=True)
    path = tmp_path / "samples.jsonl"
    tail = SampleTail(path)
    assert tail.read() == []
    path.write_bytes(lines[0] + lines[1][:10])
    assert [r.sample_id for r in tail.read()] == [json.loads(lines[0])["sample_id"]]
    path.write_bytes(lines[0] + lines[1])
    assert [r.sample_id for r in tail.read()] == [json.loads(lines[1])["sample_id"]]
    path.write_bytes(lines[0])  # repaired shorter: read again from the start
    assert len(tail.read()) == 1


class TimedEngine(FakeEngine):
    """The fake judge, noting when each step answered something."""

    def __init__(self) -> None:
        super().__init__(preset(), EngineSettings(), script=verdicts(), delay_s=0.0)
        self.answered_at: list[float] = []

    def step(self):  # type: ignore[no-untyped-def]
        done = super().step()
        if done:
            self.answered_at.append(time.monotonic())
        return done


def judge_beside(
    run: Path, stop_after: int | None = None
) -> tuple[list[float], TimedEngine, object]:
    """Feed a finished run's answers into `run` one by one while a judge follows them; returns
    the times the answers were written, the judge's engine and result."""
    source = run.parent / "source"
    answer(source)
    run.mkdir(exist_ok=True)
    for name in ("manifest.json",):
        shutil.copy(source / name, run / name)
    lines = (source / "samples.jsonl").read_bytes().splitlines(keepends=True)
    done = threading.Event()
    written: list[float] = []

    def generate() -> None:
        with open(run / "samples.jsonl", "ab") as fh:
            for line in lines:
                fh.write(line[: len(line) // 2])  # a line being written is not read
                fh.flush()
                time.sleep(0.02)
                fh.write(line[len(line) // 2 :])
                fh.flush()
                written.append(time.monotonic())
                time.sleep(0.05)
        done.set()

    engine = TimedEngine()
    writer = threading.Thread(target=generate)
    writer.start()
    result = judge_run(
        lambda: engine,
        run,
        WORK,
        judge(),
        generating=lambda: not done.is_set(),
        stopping=lambda: stop_after is not None and len(engine.served) >= stop_after,
    )
    writer.join()
    return written, engine, result


def test_the_judge_follows_the_answers_as_they_are_written(tmp_path: Path) -> None:
    written, engine, result = judge_beside(tmp_path / "run")
    assert result.status == "complete" and result.asked == len(TASK.samples())
    rows = (result.folder.judgments).read_text().splitlines()
    assert sorted(json.loads(r)["sample_id"] for r in rows) == sorted(
        f"{s.id}@2" for s in TASK.samples()
    )
    # Judged while generation went on: answers were judged before the last one was written.
    assert engine.answered_at[0] < written[-1]


def test_a_judge_beside_stopped_then_resumed_asks_each_judgment_once(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _, _, first = judge_beside(run, stop_after=3)
    assert first.status == "interrupted"
    kept = len(first.folder.judgments.read_text().splitlines())
    assert 0 < kept < len(TASK.samples())
    engine = FakeEngine(preset(), EngineSettings(), script=verdicts(), delay_s=0.0)
    rest = judge_run(lambda: engine, run, WORK, judge(), generating=lambda: False)
    assert rest.status == "complete" and rest.asked == len(TASK.samples()) - kept
    ids = [json.loads(r)["sample_id"] for r in rest.folder.judgments.read_text().splitlines()]
    assert len(ids) == len(set(ids)) == len(TASK.samples())


def test_side_by_side_through_evalpipe_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = ["run", "--preset", "tiny_random", "--backend", "fake", "--tasks", f"judge:{JUDGED}",
            "--judge", "tiny_random", "--judge-placement", "side-by-side",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert "judging answers side by side as they are written" in capsys.readouterr().err
    (folder,) = (out / "judgments").iterdir()
    rows = [json.loads(x) for x in (folder / "judgments.jsonl").read_text().splitlines()]
    assert sorted(r["sample_id"] for r in rows) == ["fr@2", "jp@1"]
    # The fake judge answers without a rating: both judgments are counted parse failures.
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["judgments"] == summary["parse_failures"] == 2


def test_plan_estimate_covers_both_phases_and_each_placement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "--preset", "llama3_1_8b", "--gpu", "h100-80gb", "--replicas", "1",
            "--judge", "qwen3_32b", "--estimate", "--tasks", f"judge:{JUDGED}",
            "--results", str(tmp_path)]  # fmt: skip
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    estimate, judging = data["estimate"], data["estimate"]["judging"]
    walls = judging["walls_s"]
    generation, judge_wall = estimate["wall_s"]["mid"], judging["judging"]["wall_s"]["mid"]
    assert walls["after"]["mid"] == pytest.approx(generation + judge_wall, abs=0.2)
    assert walls["side-by-side"]["mid"] > max(generation, judge_wall)
    assert walls["side-by-side"]["mid"] < walls["after"]["mid"]
    assert judging["placement"] == "side-by-side" and "predicted wall" in judging["reason"]
    (work,) = judging["judging"]["tasks"]
    assert work["samples"] == 2 and work["generated_tokens"]["mid"] == 1024  # judge max_tokens
    assert data["judge"]["tensor_parallel_size"] >= 1
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "total, judge after generation" in text and "total, judge side by side" in text
    assert "placement: side-by-side: predicted wall" in text
    # Without --estimate: the judge's layout and the placement with its reason.
    assert main(argv[:9]) == 0
    text = capsys.readouterr().out
    assert "judge: qwen3_32b (" in text and "placement: side-by-side: both fit on one node" in text
    # Arena-Hard: both orders judged, each judgment at its config's judge max_tokens.
    arena = [*argv[:9], "--estimate", "--tasks", "arena_hard", "--judge-data",
             str(Path(__file__).parent / "fixtures" / "arena_hard"), "--results", str(tmp_path),
             "--json"]  # fmt: skip
    assert main(arena) == 0
    judging = json.loads(capsys.readouterr().out)["estimate"]["judging"]["judging"]
    assert [(t["samples"], t["max_tokens"]) for t in judging["tasks"]] == [(6, 64), (2, 64)]
    # A judge behind a server: placed, its judging phase not estimated.
    served = [*argv[:7], "--judge-base-url", "http://judge:8000/v1", *argv[9:]]
    assert main(served) == 0
    text = capsys.readouterr().out
    assert "judge: behind a server" in text and "total, judge side by side" not in text


def test_a_judge_prompt_is_its_template_plus_the_answers_it_quotes() -> None:
    from evalpipe.core.span import Span
    from evalpipe.estimate.judgework import judge_work, turns_work
    from evalpipe.estimate.workmodel import TaskWork, TokenCounter, helper_work
    from evalpipe.tasks.judged import load_judged_task

    task = load_judged_task(JUDGED)
    words = TokenCounter(lambda text: len(text.split()), 0, "words")
    answers = TaskWork(task=task.name, category="judged", samples=2, completions=1,
                       prompt_tokens=Span.exact(10.0), generated_tokens=Span(5.0, 20.0, 24.0),
                       max_tokens=24, score_s=Span.exact(0.0), sources=())  # fmt: skip
    work = judge_work(task, task.grading(), answers, load_preset("tiny_random"),
                      limit=None, max_tokens=64, counter=words)  # fmt: skip
    template = [
        sum(len(m["content"].split()) for m in ask.prompt)
        for s in task.samples()
        for ask in task.grading().asks(s, [""] * (1 + len(s.turns)))
    ]
    mean = sum(template) / len(template)
    assert work.prompt_tokens == Span(mean + 5.0, mean + 20.0, mean + 24.0)
    assert (work.samples, work.generated_tokens) == (2, Span.exact(64.0))
    # A helper's request, built as a user simulator's turn is (tests/test_user_sim_placement.py).
    assert work == helper_work(answers, 2, work.prompt_tokens, 64, helper="judge",
                               source=work.sources[0])  # fmt: skip
    # Generating: one sample of the fixture has a second turn, a request with its history.
    turns = turns_work(task, answers, None)
    assert turns.samples == 3 and turns.prompt_tokens.mid == 10.0 * 1.25 + 20.0 * 0.25


def test_a_phase_process_gets_the_stop_signal_its_parent_received() -> None:
    import subprocess
    import sys

    from evalpipe.run.judgeprocess import wait_child

    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGUSR1, lambda *a: sys.exit(75))\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    assert wait_child(child, lambda: "SIGUSR1") == 75


def test_the_judge_sees_the_generation_end_when_its_process_dies() -> None:
    import subprocess
    import sys

    from evalpipe.run.judgeprocess import generation_open

    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], stdout=subprocess.PIPE
    )
    going = generation_open(holder.stdout)
    time.sleep(0.1)
    assert going()
    holder.kill()  # kill -9: the pipe closes with it
    holder.wait()
    deadline = time.monotonic() + 5
    while going() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not going()
