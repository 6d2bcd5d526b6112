"""The pilot (`--pilot`): its seeded, stratified draw and default size, a full run that resumes
its samples instead of generating them again (with the scores of a run without a pilot), the
full run submitted after it, --budget, the bad inputs, and the bound line of an estimate with
neither pilot nor past run. All on the fake engine."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
from runner_support import SCRIPT, ToyTask, fake_engine, preset, toy_tasks

import evalpipe
from evalpipe.catalog.gpus import load_gpus
from evalpipe.catalog.pilot import ASSUMED_CV, CAP, FLOOR, Z90, PilotSize, default_size
from evalpipe.cli import main
from evalpipe.core.errors import ConfigError
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.estimate.cost import probed_prefill
from evalpipe.estimate.history import load_history
from evalpipe.estimate.stepfit import fit_steps
from evalpipe.run.pilotprobe import PROBE_REPEATS, PROBE_STEPS
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.run.smokeprobe import probe_prompts
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import read_manifest
from evalpipe.rundir.samplelog import read_samples
from evalpipe.tasks.base import Sample
from evalpipe.tasks.pilotdraw import draw


def _samples(n: int) -> list[Sample]:
    # Prompt sizes that are not in id order: the draw must sort by size, not by position.
    return [Sample(id=f"s{i}", prompt="x" * ((i * 37) % n + 1), target="") for i in range(n)]


def test_the_draw_is_seeded_and_takes_one_sample_from_each_prompt_length_stratum() -> None:
    samples = _samples(100)
    chosen = draw(samples, 10, seed=3, task="t")
    assert len(chosen) == 10
    assert chosen == draw(samples, 10, seed=3, task="t")  # the same seed, the same draw
    assert chosen != draw(samples, 10, seed=4, task="t")
    assert chosen != draw(samples, 10, seed=3, task="other")  # tasks draw independently
    # Sizes 1..100: one sample from each tenth of them, in the task's own order.
    assert sorted((len(s.prompt) - 1) // 10 for s in chosen) == list(range(10))
    assert chosen == [s for s in samples if s in chosen]
    assert draw(samples, 100, seed=0, task="t") == samples


@pytest.mark.parametrize("population", [20, 50, 300, 1000, 5000])
def test_the_default_size_knows_the_mean_within_ten_percent_at_ninety(population: int) -> None:
    n = min(population, default_size(population))
    assert FLOOR <= n <= CAP or n == population
    half = Z90 * ASSUMED_CV / math.sqrt(n) * math.sqrt((population - n) / (population - 1))
    assert half <= 0.10 or n == CAP  # the cap gives way only where the rule asks for more
    assert PilotSize.parse("auto").samples("t", population) == n
    assert PilotSize.parse("0.1").samples("t", population) == math.ceil(population / 10)


def test_the_default_sizes_docs_planner_md_quotes() -> None:
    assert [default_size(n) for n in (200, 30, 10_000)] == [94, 26, 171]


def test_bad_pilot_sizes_each_name_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    for text in ("0", "-3", "nan", "1.5"):
        with pytest.raises(ConfigError, match="give a fraction of each task"):
            PilotSize.parse(text)
    with pytest.raises(SystemExit):
        main(["run", "--preset", "tiny_random", "--tasks", "arithmetic", "--pilot", "0"])
    assert "--pilot 0 draws no samples" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"--pilot 50 is larger than task 'arithmetic', which "
                       r"has 10 sample\(s\): pass --pilot 10 or fewer"):  # fmt: skip
        evalpipe.evaluate(preset="tiny_random", tasks=["arithmetic"], limit=10, pilot="50",
                          backend="fake")  # fmt: skip
    with pytest.raises(ConfigError, match="--pilot runs one job over a sample of every task"):
        RunOptions(backend="fake", pilot="5", shard=evalpipe.run.runner.Shard(index=0, count=2))


def test_the_full_run_resumes_the_pilots_samples_and_scores_as_a_run_without_one(
    tmp_path: Path,
) -> None:
    tasks = [*toy_tasks(), ToyTask(name="delta", category="math", size=40)]
    total = sum(t.size for t in tasks)
    piloted, plain = tmp_path / "piloted", tmp_path / "plain"
    pilot_engine = fake_engine()
    pilot = run_evaluation(lambda _: pilot_engine, tasks, piloted, preset=preset(),
                           options=RunOptions(backend="fake", pilot="4", pilot_seed=7))  # fmt: skip
    assert pilot.status == "complete" and pilot.n_total == 4 * len(tasks)
    drawn = json.loads((piloted / "manifest.json").read_text())["pilot"]
    assert (drawn["size"], drawn["seed"]) == ("4", 7)
    assert {t: (e["drawn"], e["of"]) for t, e in drawn["tasks"].items()} == {
        t.name: (4, t.size) for t in tasks
    }
    full_engine = fake_engine()
    full = run_evaluation(lambda _: full_engine, tasks, piloted, preset=preset(),
                          options=RunOptions(backend="fake"))  # fmt: skip
    # Counted: the full run asked the engine for every sample but the pilot's.
    assert len(full_engine.served) == total - 4 * len(tasks)
    assert not set(full_engine.served) & set(pilot_engine.served)
    assert json.loads((piloted / "manifest.json").read_text())["pilot"]["resumed"] == 16
    baseline = run_evaluation(lambda _: fake_engine(), tasks, plain, preset=preset(),
                              options=RunOptions(backend="fake"))  # fmt: skip
    assert full.n_done == baseline.n_done == total
    assert full.summary.tasks == baseline.summary.tasks  # the deterministic engine: equal
    by_key = {r.key: r.completions for r in read_samples(plain / "samples.jsonl").records}
    assert {r.key: r.completions for r in read_samples(piloted / "samples.jsonl").records} == (
        by_key
    )


@pytest.mark.parametrize(("slots", "room"), [(64, True), (8, True), (64, False)],
                         ids=["beyond the pilot", "within it", "slots unknown"])  # fmt: skip
def test_a_pilot_probes_the_full_runs_batch_where_its_own_batches_stay_below_it(
    tmp_path: Path, slots: int, room: bool
) -> None:
    # 2 samples of each of four tasks (at most 8 sequences a step) before a run of 60 samples
    # decoding at once on 64 slots; on 8 slots the pilot's steps already hold the run's batch;
    # an engine that cannot tell its slots (room() None: a remote server) is not probed.
    tasks = [*toy_tasks(), ToyTask(name="delta", category="math", size=40)]
    engine = FakeEngine(preset(), EngineSettings(), script=SCRIPT, max_num_seqs=slots,
                        token_s=0.001, kv_tokens=100_000 if room else None)  # fmt: skip
    run_evaluation(lambda _: engine, tasks, tmp_path, preset=preset(),
                   options=RunOptions(backend="fake", pilot="2"))  # fmt: skip
    manifest = read_manifest(RunDir(tmp_path))
    assert manifest is not None and manifest.pilot is not None
    (job,) = load_history([tmp_path], load_gpus())
    if slots == 8 or not room:
        assert manifest.pilot.probe is None and "probe" not in manifest.timings
        assert job.steps.bins == manifest.occupancy.steps.bins
        return
    batch = sum(t.size for t in tasks)  # each toy sample answers once
    probe = manifest.pilot.probe
    assert probe is not None and probe.steps.steps == PROBE_STEPS
    assert [b.batch for b in probe.steps.bins.values()] == [batch]
    # The fake engine counts a prompt's words as its tokens; its first step prefilled them.
    prompts = probe_prompts(batch, "pilot", PROBE_REPEATS)
    assert probe.prompt_tokens == sum(len(p.split()) for p in prompts)
    assert probe.prefill_s > 0 and manifest.timings["probe"] > 0
    # The estimate's step fit reads the probe beside the pilot's own steps, prices prompts at
    # the probe's prefill, and keeps the probe's seconds out of the job's overhead.
    assert max(b.batch for b in job.steps.bins.values()) == batch
    assert job.steps.steps == manifest.occupancy.steps.steps + PROBE_STEPS
    fit = fit_steps(job.steps)
    assert fit is not None and fit.high_batch == batch
    assert probed_prefill([job]) == probe.prefill_s / probe.prompt_tokens
    assert job.probe_s == manifest.timings["probe"]
    assert job.overhead_s == max(0.0, job.wall_s - job.load_s - job.generate_s - job.probe_s)


def test_shards_of_the_full_run_resume_the_pilots_samples_of_their_slice(tmp_path: Path) -> None:
    tasks = toy_tasks()
    run = tmp_path / "run"
    run_evaluation(lambda _: fake_engine(), tasks, run, preset=preset(),
                   options=RunOptions(backend="fake", pilot="2"))  # fmt: skip
    served = 0
    for index in range(2):
        engine = fake_engine()
        shard = evalpipe.run.runner.Shard(index=index, count=2)
        options = RunOptions(backend="fake", shard=shard)
        result = run_evaluation(lambda _, e=engine: e, tasks, run / "shards" / str(index),
                                preset=preset(), options=options)  # fmt: skip
        assert result.status == "complete"
        served += len(engine.served)
    assert served == sum(t.size for t in tasks) - 2 * len(tasks)


def _pilot(tmp_path: Path) -> Path:
    run = tmp_path / "results" / "pilot"
    evalpipe.evaluate(preset="tiny_random", tasks=["arithmetic"], limit=40, pilot="10",
                      out=run, backend="fake")  # fmt: skip
    return run


SUBMIT = ["submit", "--preset", "tiny_random", "--cluster", "local", "--tasks", "arithmetic",
          "--limit", "40", "--dry-run", "--no-check"]  # fmt: skip


def test_after_pilot_submits_the_rest_sized_from_the_pilots_lengths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    run = _pilot(tmp_path)
    capsys.readouterr()
    assert main([*SUBMIT, "--after-pilot", str(run)]) == 0
    out = capsys.readouterr().out
    # The rest of the task, priced at the lengths the pilot measured, not at max_tokens.
    assert "pilot: 10 of 40 samples, mean answer" in out
    assert "max_tokens 128 as an upper bound" not in out and "bound:" not in out
    row = next(line for line in out.splitlines() if line.startswith("arithmetic "))
    assert row.split()[1] == "30"
    assert "→ --shards 1 --replicas 1 --time " in out  # chosen: --shards auto --time auto
    assert f"--out {run.resolve()}" in out or str(run.resolve()) in out
    assert "sbatch" in out


def test_after_pilot_refuses_an_unfinished_pilot_another_selection_and_a_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    run = _pilot(tmp_path)
    capsys.readouterr()
    other = ["submit", "--preset", "tiny_random", "--cluster", "local", "--tasks", "ordering",
             "--limit", "40", "--dry-run", "--no-check", "--after-pilot", str(run)]  # fmt: skip
    assert main(other) != 0
    assert "this submission selects ordering" in capsys.readouterr().err
    sweep = [*SUBMIT, "--after-pilot", str(run)]
    sweep[2] = "tiny_random,smollm2_135m"
    assert main(sweep) != 0
    assert "not a sweep of 2" in capsys.readouterr().err
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps(manifest | {"status": "interrupted"}))
    assert main([*SUBMIT, "--after-pilot", str(run)]) != 0
    assert "is interrupted, so its figures are partial" in capsys.readouterr().err


def test_on_a_device_without_a_roofline_the_pilots_job_prices_each_token() -> None:
    """The CPU engine: a finished job's seconds per generated token are the rate; its own work
    re-estimated takes its own generation time."""
    from evalpipe.catalog.gpus import get_gpu
    from evalpipe.core.span import Span
    from evalpipe.estimate.cost import basis, estimate
    from evalpipe.estimate.history import PastJob, TaskRecord
    from evalpipe.estimate.pilot import Measured, narrowed
    from evalpipe.estimate.workmodel import TaskWork
    from evalpipe.planning import planner

    tiny, cpu = preset(), get_gpu("cpu")
    plan = planner.plan(tiny, cpu, gpus_per_node=1, read_model_config=False)
    record = TaskRecord(task="t", samples=10, completions=20, prompt_tokens=500,
                        generated_tokens=2000, longest=100, ranked=0)  # fmt: skip
    job = PastJob(path=Path("pilot"), preset=tiny.name, family="tiny", gpu="cpu", tp=1, pp=1,
                  replicas=1, backend="vllm", attempts=1, load_s=4.0, generate_s=50.0,
                  score_s=0.0, wall_s=60.0, gpus=0, energy_j=None, tasks=(record,))  # fmt: skip
    how = basis(tiny, cpu, plan, jobs=[job])
    assert "seconds per generated token on cpu" in how.rates.basis and how.calibrated
    work = TaskWork(task="t", category="", samples=10, completions=2,
                    prompt_tokens=Span.exact(50), generated_tokens=Span.exact(100),
                    max_tokens=100, score_s=Span.exact(0),
                    sources=("prompts", "lengths"))  # fmt: skip
    assert estimate(tiny, plan, [work], how).generate_s.mid == pytest.approx(50.0)
    twice = estimate(tiny, plan, [dataclasses.replace(work, samples=20)], how)
    assert twice.generate_s.mid == pytest.approx(100.0)
    # Answers the pilot measured at max_tokens are measured, not a bound.
    bound = dataclasses.replace(work, length_bound=True)
    assert any("bound: t has no past run" in n for n in estimate(tiny, plan, [bound], how).notes)
    seen = Measured(task="t", lengths=(100.0, 100.0), population=10, longest=100)
    notes = estimate(tiny, plan, [narrowed(bound, seen, 2)], how).notes
    assert not any("bound:" in n for n in notes)


def test_the_pilot_prints_the_full_runs_estimate_and_the_command_that_submits_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_estimate import _calibration

    from evalpipe.catalog.selection import Selection
    from evalpipe.estimate.pilot import after_pilot_command, pilot_estimate

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "results" / "p"
    args = ["run", "--preset", "tiny_random", "--tasks", "arithmetic", "--limit", "40",
            "--pilot", "10", "--backend", "fake", "--out", str(run)]  # fmt: skip
    assert main(args) == 0
    assert "no estimate from this pilot: the fake engine's timings" in capsys.readouterr().err
    # A smoke record beside the run prices it (the fake engine's own job never calibrates).
    smoke = dataclasses.replace(_calibration(0.02, 0.003), preset="tiny_random")
    smoke.write(tmp_path / "results")
    selection = Selection(tasks=("arithmetic",), limit=40, pilot="10")
    found = pilot_estimate(preset(), selection, run, [tmp_path / "results"])
    (seen,) = found.measured.values()
    assert (len(seen.lengths), seen.population) == (10, 40)
    assert found.remaining.tasks[0].samples == 30 and found.full.tasks[0].samples == 40
    assert found.remaining.gpu_hours.mid < found.full.gpu_hours.mid
    text = found.describe(after_pilot_command("tiny_random", selection, run))
    assert re.search(r"arithmetic\s+10/40\s+\d+\s+\d+-\d+\s+\d+", text), text
    assert "after the pilot (its samples resumed)" in text
    assert text.rstrip().endswith(
        "submit the full run: evalpipe submit --preset tiny_random --tasks arithmetic --limit 40 "
        f"--after-pilot {run} --cluster CLUSTER"
    )


def test_budget_refuses_saying_by_how_much_and_what_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    run = _pilot(tmp_path)
    capsys.readouterr()
    assert main([*SUBMIT, "--after-pilot", str(run), "--budget", "0.0001"]) != 0
    err = capsys.readouterr().err
    assert "over --budget 0.0001" in err and "What would fit:" in err
    assert main([*SUBMIT, "--pilot", "10", "--budget", "0.0000001"]) != 0
    err = capsys.readouterr().err
    assert "--budget 1e-07 GPU-hours is below the pilot's own cost" in err
    assert "draw a smaller pilot" in err
    assert main([*SUBMIT, "--pilot", "10", "--budget", "100"]) == 0
    assert main([*SUBMIT, "--pilot", "10", "--shards", "2"]) != 0
    assert "is one job over a sample of every task, not --shards 2" in capsys.readouterr().err
    assert main([*SUBMIT, "--pilot", "10", "--shards", "auto", "--time", "auto"]) == 0
    assert "→ --shards 1 --replicas 1 --time " in capsys.readouterr().out


def test_an_estimate_without_pilot_or_past_run_says_it_is_a_bound_and_how_to_narrow_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["plan", "--preset", "tiny_random", "--gpu", "h100-80gb", "--tasks", "arithmetic"]
    assert main([*args, "--estimate"]) == 0
    bound = [line for line in capsys.readouterr().out.splitlines() if "bound: " in line]
    assert bound == [
        "- bound: arithmetic has no past run or pilot, so every answer is priced at its whole "
        "budget (up to 128 tokens): the figure is an upper bound. `evalpipe submit --preset "
        "tiny_random --tasks arithmetic --pilot --cluster CLUSTER` measures the answer lengths "
        "on up to 94 samples a task first (docs/planner.md, Pilot)"
    ]


def test_budget_names_fewer_completions_for_repeated_sampling_with_the_hours_saved() -> None:
    from evalpipe.catalog.gpus import get_gpu
    from evalpipe.core.span import Span
    from evalpipe.estimate.budget import check_budget
    from evalpipe.estimate.cost import basis, estimate
    from evalpipe.estimate.workmodel import TaskWork
    from evalpipe.planning import planner

    tiny, h100 = preset(), get_gpu("h100-80gb")
    plan = planner.plan(tiny, h100, gpus_per_node=1, read_model_config=False)
    how = basis(tiny, h100, plan)

    def hours(work: list[TaskWork]) -> float:
        return estimate(tiny, plan, work, how).gpu_hours.mid

    once = TaskWork(task="once", category="", samples=2000, completions=1,
                    prompt_tokens=Span.exact(100), generated_tokens=Span.exact(500),
                    max_tokens=1000, score_s=Span.exact(0), sources=())  # fmt: skip
    repeated = dataclasses.replace(once, task="repeated", completions=16)
    k = {n: hours([once, dataclasses.replace(repeated, completions=n)]) for n in (4, 5, 16)}
    with pytest.raises(ConfigError) as refused:
        check_budget((k[4] + k[5]) / 2, [once, repeated],
                     lambda work: estimate(tiny, plan, work, how))  # fmt: skip
    assert (
        f"repeated with 4 completions a sample instead of 16 (then {k[4]:.3g} GPU-hours, "
        f"{k[16] - k[4]:.3g} saved)"
    ) in str(refused.value)
