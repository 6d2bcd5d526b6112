"""The runner, in process, with the fake engine and in-test tasks."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest
from runner_support import ToyTask, fake_engine, lines, preset, toy_tasks

from evalpipe.core import exitcodes
from evalpipe.core.errors import ConfigError, ResumeMismatchError, RunDirError
from evalpipe.engine.protocol import EngineSettings
from evalpipe.monitor import DeviceSummary, Monitor
from evalpipe.monitor.fake_nvml import FakeGpu, FakeNvml, fake_uuid
from evalpipe.records.sampling import SamplingSettings
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.samplelog import read_json, read_samples, write_json
from evalpipe.rundir.shard import Shard
from evalpipe.rundir.summary import read_summary

OPTIONS = RunOptions(backend="fake", window=2)


def run(out: Path, *, engine=None, tasks=None, options=OPTIONS, **kwargs):
    engine = engine or fake_engine()
    return run_evaluation(
        lambda settings: engine,
        toy_tasks() if tasks is None else tasks,
        out,
        preset=preset(),
        options=options,
        **kwargs,
    )


def test_complete_run_writes_the_run_directory(tmp_path: Path) -> None:
    out = tmp_path / "run1"
    result = run(out)
    assert result.status == "complete" and result.exit_status == exitcodes.OK
    records = lines(out)
    assert len(records) == 9 + 4 + 7
    assert records[0] == {
        "task": "alpha",
        "category": "math",
        "sample_id": "alpha-0",
        "prompt": "Question 0 of alpha: what is 10 + 0?",
        "completions": ["The answer is 10."],
        "extracted": ["10"],
        "scores": {"accuracy": 1.0},
        "prompt_tokens": 9,
        "completion_tokens": [4],
        "shard": None,
    }
    summary = read_json(out / "summary.json")
    assert summary == result.summary.to_dict()
    # Scripted right answers: alpha 3/9, beta 1/4, gamma 1/7; everything else is wrong.
    tasks = summary["tasks"]
    alpha = tasks["alpha"]["metrics"]["accuracy"]
    assert {k: alpha[k] for k in ("mean", "stderr", "n")} == pytest.approx(
        {"mean": 1 / 3, "stderr": 0.5 / 3, "n": 9}
    )  # sd = sqrt((3·(2/3)² + 6·(1/3)²)/8) = 0.5
    assert alpha["ci_method"] == "wilson"
    assert tasks["beta"]["metrics"]["accuracy"]["mean"] == 0.25
    assert tasks["gamma"]["metrics"]["accuracy"]["stderr"] == pytest.approx(1 / 7)
    math_cat = summary["categories"]["math"]
    assert math_cat["micro"]["accuracy"]["mean"] == pytest.approx(4 / 13)
    assert math_cat["macro"]["accuracy"]["mean"] == pytest.approx((1 / 3 + 1 / 4) / 2)
    assert (summary["n_done"], summary["n_total"], summary["complete"]) == (20, 20, True)
    manifest = read_json(out / "manifest.json")
    assert manifest["status"] == "complete"
    assert manifest["run_id"] == "run1"
    assert manifest["config"]["tasks"] == ["alpha", "beta", "gamma"]
    assert manifest["config"]["sampling"]["alpha"]["max_tokens"] == 256
    assert manifest["engine"]["backend"] == "fake"
    assert manifest["versions"]["evalpipe"] and manifest["versions"]["python"]
    assert manifest["preset"]["name"] == "tiny_random"
    assert set(manifest["timings"]) == {
        "load", "generate:math", "score:math", "generate:reasoning", "score:reasoning",
    }  # fmt: skip
    assert [a["status"] for a in manifest["attempts"]] == ["complete"]


def test_resume_generates_only_missing_samples(tmp_path: Path) -> None:
    full, partial = tmp_path / "full", tmp_path / "partial"
    run(full)
    run(partial)
    text = (partial / "samples.jsonl").read_text()
    kept = text.splitlines(keepends=True)[:7]
    (partial / "samples.jsonl").write_text("".join(kept) + kept[7 - 1][:25])  # + a cut line
    engine = fake_engine()
    result = run(partial, engine=engine)
    assert len(engine.served) == 20 - 7  # the cut-short line's sample is generated again
    assert engine.served[0].startswith("Question 7 of alpha")
    assert lines(partial) == lines(full)
    assert result.summary.to_dict()["tasks"] == read_json(full / "summary.json")["tasks"]
    assert result.summary.categories == read_summary(RunDir(full)).categories


def test_finished_run_is_not_loaded_again(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = run(out)

    def must_not_load(settings):
        raise AssertionError("engine loaded although nothing was left to do")

    again = run_evaluation(must_not_load, toy_tasks(), out, preset=preset(), options=OPTIONS)
    assert again.status == "complete"
    assert again.summary.tasks == first.summary.tasks
    assert [a["status"] for a in read_json(out / "manifest.json")["attempts"]] == ["complete"]


def test_run_killed_after_its_last_sample_is_finished_by_the_next_attempt(tmp_path: Path) -> None:
    """kill -9 between the last sample and the final manifest: the rerun loads no engine, marks
    the dead attempt lost and finishes the run in an attempt of its own."""
    out = tmp_path / "run"
    run(out)
    manifest = read_json(out / "manifest.json")
    manifest["status"] = "running"
    manifest["attempts"][-1]["status"] = "running"
    write_json(out / "manifest.json", manifest)

    def must_not_load(settings):
        raise AssertionError("engine loaded although nothing was left to do")

    again = run_evaluation(must_not_load, toy_tasks(), out, preset=preset(), options=OPTIONS)
    assert again.status == "complete"
    finished = read_json(out / "manifest.json")
    assert finished["status"] == "complete"
    assert [a["status"] for a in finished["attempts"]] == ["lost", "complete"]


class StopAfter:
    """A stop flag that is raised once the runner has checked it `n` times."""

    def __init__(self, n: int) -> None:
        self.n = n

    @property
    def requested(self) -> str | None:
        self.n -= 1
        return "SIGUSR1" if self.n < 0 else None


def test_stop_request_aborts_in_flight_and_keeps_what_finished(tmp_path: Path) -> None:
    out = tmp_path / "run"
    engine = fake_engine(delay_s=0.02)
    result = run(out, engine=engine, stop=StopAfter(4))  # one check before loading, one per step
    assert result.status == "interrupted" and result.exit_status == exitcodes.RESUMABLE
    written = lines(out)
    # Every answered request was written once; those in flight at the stop were aborted.
    assert 0 < len(written) < 20
    assert len(engine.served) == len(written)
    assert len({r["sample_id"] for r in written}) == len(written)
    assert engine.in_flight() == 0
    manifest = read_json(out / "manifest.json")
    assert manifest["status"] == "interrupted"
    summary = read_json(out / "summary.json")
    assert (summary["complete"], summary["n_done"]) == (False, len(written))
    resumed = run(out)
    assert resumed.status == "complete"
    assert [a["status"] for a in read_json(out / "manifest.json")["attempts"]] == [
        "interrupted",
        "complete",
    ]
    reference = run(tmp_path / "reference")
    assert lines(out) == lines(tmp_path / "reference")
    assert resumed.summary.categories == reference.summary.categories


def test_resume_with_other_configuration_is_refused_saying_what_differs(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run(out, options=dataclasses.replace(OPTIONS, limit=3))
    with pytest.raises(ResumeMismatchError) as err:
        run(out, options=dataclasses.replace(OPTIONS, limit=4))
    message = str(err.value)
    assert "limit: 3 → 4" in message
    assert "config_hash" in message and "--out" in message

    hotter = [
        dataclasses.replace(t, sampling=SamplingSettings(temperature=0.7)) for t in toy_tasks()
    ]
    with pytest.raises(ResumeMismatchError, match=r"sampling\.alpha\.temperature: 0\.0 → 0\.7"):
        run(out, tasks=hotter, options=dataclasses.replace(OPTIONS, limit=3))
    with pytest.raises(ResumeMismatchError, match=r'backend: "fake" → "vllm"'):
        run(out, options=dataclasses.replace(OPTIONS, limit=3, backend="vllm"))
    with pytest.raises(ResumeMismatchError, match=r'shard: null → "0/2"'):
        run(out, options=dataclasses.replace(OPTIONS, limit=3, shard=Shard(index=0, count=2)))
    with pytest.raises(ResumeMismatchError, match=r'tasks: \["alpha", "beta", "gamma"\] →'):
        run(out, tasks=toy_tasks()[:2], options=dataclasses.replace(OPTIONS, limit=3))


def test_engine_layout_may_change_between_attempts(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run(out, stop=StopAfter(2))
    other = dataclasses.replace(OPTIONS, engine=EngineSettings(tensor_parallel_size=2))
    assert run(out, options=other).status == "complete"
    engine = read_json(out / "manifest.json")["config"]["engine"]
    assert engine["tensor_parallel_size"] == 2  # the manifest says what the last attempt used


def test_shards_partition_the_unsharded_run(tmp_path: Path) -> None:
    whole = run(tmp_path / "whole", options=dataclasses.replace(OPTIONS, limit=8))
    union = []
    for i in range(3):
        shard = dataclasses.replace(OPTIONS, limit=8, shard=Shard(index=i, count=3))
        result = run(tmp_path / str(i), options=shard)
        assert result.status == "complete"
        got = lines(tmp_path / str(i))
        assert {r["shard"] for r in got} == {i}
        assert [r["sample_id"] for r in got if r["task"] == "alpha"] == [
            f"alpha-{k}" for k in range(i, 8, 3)
        ]
        union += [{**r, "shard": None} for r in got]
    key = lambda r: (r["task"], r["sample_id"])  # noqa: E731
    assert sorted(union, key=key) == sorted(lines(tmp_path / "whole"), key=key)
    assert whole.summary.n_total == 8 + 4 + 7


def test_failure_is_recorded_and_the_run_resumes(tmp_path: Path) -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Brittle(ToyTask):
        def score(self, sample, texts):
            if sample.id == "gamma-3":
                raise ValueError("scorer broke")
            return super().score(sample, texts)

    tasks = [*toy_tasks()[:2], Brittle(name="gamma", category="reasoning", size=7)]
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="scorer broke"):
        run(out, tasks=tasks)
    manifest = read_json(out / "manifest.json")
    assert manifest["status"] == "failed"
    assert "scorer broke" in manifest["error"]
    written = {r.sample_id for r in read_samples(out / "samples.jsonl").records}
    # Samples are scored in the groups that finished together (two at a time with a window of
    # two): everything before the failing group was written, nothing from it.
    assert "gamma-3" not in written and {"gamma-0", "gamma-1"} <= written
    assert run(out).status == "complete"
    assert "error" not in read_json(out / "manifest.json")


def test_inconsistent_directories_are_refused(tmp_path: Path) -> None:
    orphan = tmp_path / "orphan"
    orphan.mkdir()
    (orphan / "samples.jsonl").write_text("")
    with pytest.raises(RunDirError, match=r"manifest\.json does not"):
        run(orphan)
    out = tmp_path / "changed"
    run(out, options=dataclasses.replace(OPTIONS, limit=3))
    shrunk = [dataclasses.replace(t, size=2) for t in toy_tasks()]  # the dataset lost items
    with pytest.raises(RunDirError, match="does not plan"):
        run(out, tasks=shrunk, options=dataclasses.replace(OPTIONS, limit=3))


def test_duplicate_sample_ids_and_bad_options_are_refused(tmp_path: Path) -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Twice(ToyTask):
        def samples(self, limit=None):
            return super().samples(limit) * 2

    with pytest.raises(ConfigError, match="twice"):
        run(tmp_path / "run", tasks=[Twice(name="t", category="c", size=2)])
    with pytest.raises(ConfigError, match="i/N"):
        Shard.parse("3")
    with pytest.raises(ConfigError, match=r"index in 0\.\.count-1"):
        Shard.parse("3/3")
    with pytest.raises(ConfigError, match="No tasks"):
        run(tmp_path / "none", tasks=[])


class RecordingMonitor:
    def __init__(self, csv: Path) -> None:
        self.csv = csv
        self.phases: list[str] = []

    def set_phase(self, name: str) -> None:
        self.phases.append(name)

    def stop(self) -> list[DeviceSummary]:
        return [DeviceSummary(device="gpu0", host="h", name="H100", peak_memory_gib=10.0,
                              mean_util_pct=50.0, energy_j=200.0)]  # fmt: skip


def test_monitor_sees_phases_and_feeds_the_device_summary(tmp_path: Path) -> None:
    monitors: list[RecordingMonitor] = []

    def start(csv: Path) -> RecordingMonitor:
        monitors.append(RecordingMonitor(csv))
        return monitors[-1]

    options = dataclasses.replace(OPTIONS, window=100)
    result = run(tmp_path / "run", options=options, monitor=start)
    (monitor,) = monitors
    assert monitor.csv == tmp_path / "run" / "metrics.csv"
    # Scoring overlaps generation, so the phases are the categories as they are admitted.
    assert monitor.phases == ["load", "generate:math", "generate:reasoning"]
    (device,) = result.summary.to_dict()["devices"]
    assert device["energy_j"] == 200.0
    tokens = result.summary.throughput.generated_tokens
    assert tokens and device["j_per_token"] == pytest.approx(200.0 / tokens)
    assert result.summary.throughput.gpus == 1


def test_real_monitor_with_fake_nvml_tags_phases_and_carries_energy_over(tmp_path: Path) -> None:
    out = tmp_path / "run"
    gpu = FakeGpu(uuid=fake_uuid(0), energy_mj=tuple(range(0, 1_000_000, 5_000)))

    def start(csv: Path) -> Monitor:
        return Monitor(csv, interval_s=3600, nvml=FakeNvml([gpu]), visible_devices="0").start()

    options = dataclasses.replace(OPTIONS, window=4)
    run(out, stop=StopAfter(2), monitor=start, options=options)
    first = read_json(out / "summary.json")["devices"][0]["energy_j"]
    result = run(out, monitor=start, options=options)
    with open(out / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["phase"] for r in rows} >= {"load", "generate:math", "generate:reasoning"}
    (device,) = result.summary.to_dict()["devices"]
    assert device["device"] == "gpu0" and device["name"] == gpu.name
    assert device["energy_j"] > first > 0  # the second attempt adds to the first's energy
    tokens = result.summary.throughput.generated_tokens
    assert device["j_per_token"] == pytest.approx(device["energy_j"] / tokens)
    assert result.summary.throughput.gpus == 1


def test_engine_gets_the_shortest_model_len_the_tasks_allow(tmp_path: Path) -> None:
    seen: list[EngineSettings] = []

    def open_engine(settings: EngineSettings):
        seen.append(settings)
        return fake_engine()

    long = ToyTask(name="long", category="math", size=2, sampling=SamplingSettings(max_tokens=50))
    run_evaluation(open_engine, [long], tmp_path / "run", preset=preset(), options=OPTIONS)
    # "Question 1 of long: what is 10 + 1?" is 35 bytes: 64 template tokens + 35 + 50 to generate.
    assert seen[0].min_model_len == 64 + 35 + 50
    assert read_json(tmp_path / "run" / "manifest.json")["config"]["engine"]["min_model_len"] == 149
    pinned = dataclasses.replace(OPTIONS, engine=EngineSettings(min_model_len=500))
    run_evaluation(open_engine, [long], tmp_path / "pinned", preset=preset(), options=pinned)
    assert seen[1].min_model_len == 500


def test_stop_requested_during_start_up_skips_the_model_load(tmp_path: Path) -> None:
    def must_not_load(settings):
        raise AssertionError("engine loaded although a stop was requested")

    result = run_evaluation(
        must_not_load, toy_tasks(), tmp_path / "run", preset=preset(), options=OPTIONS,
        stop=StopAfter(0),
    )  # fmt: skip
    assert result.status == "interrupted" and result.exit_status == exitcodes.RESUMABLE
    assert read_json(tmp_path / "run" / "manifest.json")["status"] == "interrupted"
    assert run(tmp_path / "run").status == "complete"


def test_multiple_choice_by_logprobs_records_the_likeliest_option(tmp_path: Path) -> None:
    from evalpipe.engine.fake import FakeEngine
    from evalpipe.tasks import load_tasks

    [ordering] = load_tasks(tasks=["ordering"], mc_method="logprobs")
    first = ordering.samples(limit=4)[0]
    script = {first.prompt: first.target["answer"]}  # the fake engine finds this letter likeliest
    engine = FakeEngine(preset(), EngineSettings(), script=script)
    out = tmp_path / "run"
    options = dataclasses.replace(OPTIONS, limit=4)
    assert run(out, engine=engine, tasks=[ordering], options=options).status == "complete"
    records = {r.sample_id: r for r in read_samples(out / "samples.jsonl").records}
    assert len(engine.served) == 4  # one scoring request per question, nothing generated
    right = records[first.id]
    assert right.completions == (first.target["answer"],) and right.scores["accuracy"] == 1.0
    for record in records.values():
        assert len(record.option_logprobs) == 4 and record.completion_tokens == (0,)
        best = max(range(4), key=lambda i: record.option_logprobs[i])
        assert record.completions == ("ABCD"[best],) == record.extracted
    # The method is part of the fingerprint: resuming with generation instead is refused.
    [generating] = load_tasks(tasks=["ordering"], mc_method="generate")
    with pytest.raises(ResumeMismatchError, match=r'scorer\.method: "logprobs" → "generate"'):
        run(out, tasks=[generating], options=options)


def test_a_task_that_fails_to_load_leaves_no_run_directory(tmp_path: Path) -> None:
    from evalpipe.core.errors import DatasetError

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Offline(ToyTask):
        def samples(self, limit: int | None = None):
            raise DatasetError("dataset 'x' is not available offline")

    out = tmp_path / "run"
    with pytest.raises(DatasetError, match="not available offline"):
        run(out, tasks=[*toy_tasks(), Offline(name="offline", category="math", size=3)])
    assert not out.exists()
