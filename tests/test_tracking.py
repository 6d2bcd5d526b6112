"""Tracking: a run mirrored into MLflow (file store) and W&B (offline files) while it goes, read
back through each library's own records; a tracker that cannot reach its server costs one
warning and no sample; a resumed run continues its tracked run; `report --export` logs a run
that exists already."""

from __future__ import annotations

import glob
import json
import logging
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from runner_support import SCRIPT, preset, toy_tasks

from evalpipe.cli import main
from evalpipe.core.errors import ConfigError
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.monitor import Monitor
from evalpipe.monitor.csvlog import new_rows
from evalpipe.monitor.fake_nvml import FakeGpu, FakeNvml, fake_uuid
from evalpipe.records.completion import Completion
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.run.trackers import BACKENDS, sync_argv
from evalpipe.run.tracking import EXIT_WAIT_ENV, Tracking, exit_wait_s
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import read_manifest
from evalpipe.rundir.samplelog import read_json, read_samples
from evalpipe.rundir.summary import read_summary
from evalpipe.rundir.tracked import sample_rows, tracked_metrics, tracked_params, tracking_group

mlflow = pytest.importorskip("mlflow", reason="pip install 'evalpipe[track]'")
wandb = pytest.importorskip("wandb", reason="pip install 'evalpipe[track]'")

N_SAMPLES = 9 + 4 + 7  # the toy tasks


class GatedEngine(FakeEngine):
    """The fake engine, held after `hold_after` answers until the test opens the gate: the run
    is provably still going while the test reads the tracker."""

    def __init__(self, hold_after: int) -> None:
        super().__init__(preset(), EngineSettings(), script=SCRIPT)
        self.hold_after = hold_after
        self.gate = threading.Event()

    def step(self) -> list[Completion]:
        if len(self.served) >= self.hold_after:
            self.gate.wait(60)
        return super().step()


def run_toy(out: Path, engine: FakeEngine, **kwargs):
    """The toy tasks through `engine` into `out` (run_evaluation's other arguments in kwargs)."""
    return run_evaluation(
        lambda settings: engine,
        toy_tasks(),
        out,
        preset=preset(),
        options=RunOptions(backend="fake", window=2),
        **kwargs,
    )


def tracked_run(out: Path, tracker: str, engine: FakeEngine, interval_s: float = 0.1):
    """run_evaluation on a thread with the real monitor (fake NVML, sampled every 50 ms) and
    `tracker`'s tracking phase; the thread and a list that gets the result."""
    gpu = FakeGpu(uuid=fake_uuid(0), util_pct=(40, 60), energy_mj=tuple(range(0, 10**6, 10**3)))
    result: list = []

    def go() -> None:
        result.append(
            run_toy(
                out,
                engine,
                monitor=lambda csv: Monitor(
                    csv, interval_s=0.05, nvml=FakeNvml([gpu]), visible_devices="0"
                ).start(),
                tracker=lambda run_dir, previous: Tracking(
                    BACKENDS[tracker],
                    run_dir,
                    tracker=tracker,
                    group="g",
                    previous=previous,
                    interval_s=interval_s,
                    exit_wait_s=60,  # what is logged is the point here, not the bound
                ),
            )
        )

    thread = threading.Thread(target=go)
    thread.start()
    return thread, result


def wait_for(condition, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


@pytest.fixture
def mlflow_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    uri = (tmp_path / "store").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    # What is logged is the point of these tests, not the bound on the wait (a loaded machine).
    monkeypatch.setenv(EXIT_WAIT_ENV, "120")
    return uri


def test_mlflow_file_store_holds_the_manifest_the_summary_and_readings_logged_mid_run(
    tmp_path: Path, mlflow_env: str
) -> None:
    from mlflow.tracking import MlflowClient

    out = tmp_path / "run"
    engine = GatedEngine(hold_after=6)
    thread, result = tracked_run(out, "mlflow", engine)
    client = MlflowClient(tracking_uri=mlflow_env)
    try:
        # While the engine is held, MLflow already holds the run, its device readings and its
        # progress.
        experiment = wait_for(lambda: client.get_experiment_by_name("evalpipe"))
        (running,) = wait_for(lambda: client.search_runs([experiment.experiment_id]))
        run_id = running.info.run_id
        readings = wait_for(lambda: client.get_metric_history(run_id, "device/" + _gpu_key(out)))
        progress = wait_for(lambda: client.get_metric_history(run_id, "progress/samples"))
        assert client.get_run(run_id).info.status == "RUNNING"
        assert read_manifest(RunDir(out)).status == "running"
        assert readings[0].value in (40.0, 60.0)
        assert 0 < progress[0].value < N_SAMPLES
    finally:
        engine.gate.set()
        thread.join(60)
    assert result[0].status == "complete"
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    summary = read_json(out / "summary.json")
    metrics = run.data.metrics
    for task, info in summary["tasks"].items():
        for metric, stats in info["metrics"].items():
            assert metrics[f"task/{task}/{metric}"] == pytest.approx(stats["mean"])
            assert metrics[f"task/{task}/{metric}.ci_low"] == pytest.approx(stats["ci_low"])
    assert metrics["category/math/accuracy"] == pytest.approx(
        summary["categories"]["math"]["micro"]["accuracy"]["mean"]
    )
    final = tracked_metrics(read_summary(RunDir(out)))
    assert {k: metrics[k] for k in final} == pytest.approx(final)
    assert final["cost/wall_s"] == summary["throughput"]["wall_s"]
    assert final["cost/energy_j"] == summary["devices"][0]["energy_j"]
    manifest = read_manifest(RunDir(out))
    assert manifest.tracking.backend == "mlflow" and manifest.tracking.run_id == run_id
    assert run.data.params == tracked_params(manifest)
    assert run.data.params["config.sampling.alpha.max_tokens"] == "256"
    assert run.data.params["config_hash"] == manifest.config_hash
    assert run.data.tags["group"] == "g"
    table = json.loads(
        Path(client.download_artifacts(run_id, "samples.json", str(tmp_path / "dl"))).read_text()
    )
    assert len(table["data"]) == N_SAMPLES
    assert table["columns"] == ["task", "sample_id", "prompt", "completion", "extracted", "score"]


def test_a_resumed_run_continues_its_tracked_run(tmp_path: Path, mlflow_env: str) -> None:
    from mlflow.tracking import MlflowClient

    out = tmp_path / "run"

    class Stop:
        requested: str | None = None

    stop = Stop()
    engine = FakeEngine(preset(), EngineSettings(), script=SCRIPT)
    original = engine.step

    def stopping_step():
        if len(engine.served) >= 5:
            stop.requested = "SIGTERM"
        return original()

    engine.step = stopping_step
    tracker = lambda run_dir, previous: Tracking(  # noqa: E731
        BACKENDS["mlflow"], run_dir, tracker="mlflow", group="g", previous=previous, exit_wait_s=60
    )

    def run(engine):
        return run_toy(out, engine, stop=stop, tracker=tracker)

    assert run(engine).status == "interrupted"
    first = read_manifest(RunDir(out)).tracking
    client = MlflowClient(tracking_uri=mlflow_env)
    assert client.get_run(first.run_id).info.status == "KILLED"
    stop.requested = None
    assert run(FakeEngine(preset(), EngineSettings(), script=SCRIPT)).status == "complete"
    assert read_manifest(RunDir(out)).tracking == first
    tracked = client.get_run(first.run_id)
    assert tracked.info.status == "FINISHED"
    assert tracked.data.metrics["samples/done"] == N_SAMPLES
    experiment = client.get_experiment_by_name("evalpipe")
    assert len(client.search_runs([experiment.experiment_id])) == 1


def test_a_judged_run_adds_its_judge_figures_to_its_tracked_run(
    tmp_path: Path, mlflow_env: str
) -> None:
    """Generation, then the judge in its own process: one tracked run holding both phases'
    figures, the judge's equal to its summary.json."""
    from mlflow.tracking import MlflowClient

    from evalpipe.rundir.judgments import judge_dirs, read_judge_summary

    out = tmp_path / "run"
    task = Path(__file__).parent / "fixtures" / "judged" / "capitals.yaml"
    argv = ["run", "--preset", "tiny_random", "--backend", "fake", "--tasks", f"judge:{task}",
            "--judge", "tiny_random", "--track", "mlflow", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    client = MlflowClient(tracking_uri=mlflow_env)
    tracked = client.get_run(read_manifest(RunDir(out)).tracking.run_id)
    (folder,) = judge_dirs(RunDir(out))
    judge = read_judge_summary(folder)
    prefix = f"judge/{folder.fingerprint[:8]}"
    metrics, params = tracked.data.metrics, tracked.data.params
    assert metrics[f"{prefix}/judgments"] == judge.judgments > 0
    assert metrics[f"{prefix}/parse_failures"] == judge.parse_failures
    assert params[f"{prefix}.model"] == judge.judge.model
    assert metrics["samples/done"] == read_summary(RunDir(out)).n_done
    assert tracked.info.status == "FINISHED"
    experiment = client.get_experiment_by_name("evalpipe")
    assert len(client.search_runs([experiment.experiment_id])) == 1
    # The judging phase logged none of the generation's device readings again.
    (csv,) = RunDir(out).metrics_files()
    rows = sum(1 for row in new_rows(csv, 0)[0] if row.reading.memory_used_gib is not None)
    key = next(k for k in metrics if k.startswith("device/") and k.endswith("/memory_used_gib"))
    assert len(client.get_metric_history(tracked.info.run_id, key)) == rows > 0


@pytest.mark.parametrize("raw", ["soon", "-1", "nan"])
def test_a_bad_exit_wait_is_refused_by_name(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EXIT_WAIT_ENV, raw)
    with pytest.raises(ConfigError, match=f"{EXIT_WAIT_ENV}={raw!r} is not a number of seconds"):
        exit_wait_s()


def test_a_refusing_tracking_uri_costs_one_warning_and_no_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # discard: refuses
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING):
        thread, result = tracked_run(out, "mlflow", FakeEngine(preset(), EngineSettings()))
        thread.join(120)
    assert result[0].status == "complete"
    assert len(read_samples(out / "samples.jsonl").records) == N_SAMPLES
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "Tracking to mlflow stopped" in warnings[0]
    assert "report --export mlflow" in warnings[0]
    assert read_manifest(RunDir(out)).tracking is None


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("tracker", ["wandb", "mlflow"])
def test_an_unreachable_tracker_never_holds_the_process_after_its_results(
    tracker: str, tmp_path: Path
) -> None:
    """W&B online (and MLflow) against a closed port: wandb's own teardown would wait out its
    server timeout (90 s) at exit; the process ends within a few seconds of its results."""
    url = f"http://127.0.0.1:{closed_port()}"
    env = os.environ | {
        "WANDB_MODE": "online",
        "WANDB_BASE_URL": url,
        "WANDB_API_KEY": "0123456789abcdef" * 2 + "01234567",  # a dummy 40-character key
        "MLFLOW_TRACKING_URI": url,
        EXIT_WAIT_ENV: "2",
    }
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "evalpipe", "run", "--preset", "tiny_random", "--backend",
            "fake", "--tasks", "arithmetic", "--limit", "24", "--track", tracker, "--out",
            str(out)]  # fmt: skip
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path
    )
    assert proc.stdout is not None
    lines, printed = [], None
    for line in proc.stdout:  # the results end with the run directory's line
        lines.append(line)
        if line.startswith("Run directory:"):
            printed = time.monotonic()
    status = proc.wait(120)
    ended = time.monotonic()
    assert status == 0, "".join(lines)
    assert printed is not None and ended - printed < 5.0, "".join(lines)
    assert len(read_samples(out / "samples.jsonl").records) == 24
    said = [line for line in lines if f"{tracker} tracker" in line or f"to {tracker}" in line]
    assert len(said) == 1, "".join(lines)


def test_wandb_offline_files_hold_a_mid_run_history_point_and_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_PROJECT", "evalpipe-test")
    out = tmp_path / "run"
    engine = GatedEngine(hold_after=6)
    thread, result = tracked_run(out, "wandb", engine)
    try:
        # While the engine is held, the offline log already holds a progress point.
        (offline,) = wait_for(lambda: RunDir(out).wandb_offline_runs())
        mid = wait_for(lambda: [h for h in history(offline) if "progress/samples" in h])
        assert 0 < mid[0]["progress/samples"] < N_SAMPLES
    finally:
        engine.gate.set()
        thread.join(60)
    assert result[0].status == "complete"
    manifest = read_manifest(RunDir(out))
    assert offline.name.endswith(manifest.tracking.run_id)
    records = wandb_records(offline)
    (run_record,) = [r.run for r in records if r.HasField("run")]
    assert run_record.project == "evalpipe-test" and run_record.run_group == "g"
    assert any(
        k.startswith("device/") and k.endswith("/util_pct") for h in history(offline) for k in h
    )
    expected = tracked_metrics(read_summary(RunDir(out)))
    # W&B's service process can write the run's last records after finish() returned (seen
    # under load): wait for them.
    summary = wait_for(lambda: (s := wandb_summary(offline)).keys() >= expected.keys() and s)
    assert {k: summary[k] for k in expected} == pytest.approx(expected)
    config = {
        i.key: json.loads(i.value_json)
        for r in records
        if r.WhichOneof("record_type") == "config"
        for i in r.config.update
    }
    assert {k: config[k] for k in tracked_params(manifest)} == tracked_params(manifest)
    assert sync_argv([out])[-3:] == ["wandb", "sync", str(offline)]
    # `evalpipe track sync` finds the run's offline files (uploading needs a W&B server).
    capfd.readouterr()
    assert main(["track", "sync", "--dry-run", str(out)]) == 0
    assert "Would sync 1 run(s)" in "".join(capfd.readouterr())


def test_report_export_logs_an_untracked_run(
    tmp_path: Path,
    mlflow_env: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "exported")
    out = tmp_path / "run"
    engine = FakeEngine(preset(), EngineSettings(), script=SCRIPT)
    gpu = FakeGpu(uuid=fake_uuid(0), util_pct=(40, 60))
    run_toy(
        out,
        engine,
        monitor=lambda csv: Monitor(csv, nvml=FakeNvml([gpu]), visible_devices="0").start(),
    )
    assert main(["report", "--export", "mlflow", str(tmp_path)]) == 0
    run_id = capsys.readouterr().out.split()[-1]
    client = MlflowClient(tracking_uri=mlflow_env)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "exported"
    assert client.get_metric_history(run_id, "device/" + _gpu_key(out))  # metrics.csv's series
    expected = tracked_metrics(read_summary(RunDir(out)))
    assert {k: run.data.metrics[k] for k in expected} == pytest.approx(expected)
    assert run.data.params == tracked_params(read_manifest(RunDir(out)))
    assert main(["report", "--export", "mlflow", "--compare", str(out), str(out)]) == 1


def _gpu_key(out: Path) -> str:
    """The fake GPU's utilisation metric: device/<host>/gpu0/util_pct, the host as the monitor
    writes it."""
    rows = wait_for(lambda: new_rows(RunDir(out).metrics, 0)[0])
    return f"{rows[0].host}/gpu0/util_pct"


def history(offline: Path) -> list[dict]:
    return [_items(r.history.item) for r in wandb_records(offline) if r.HasField("history")]


def _items(items) -> dict:
    return {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in items}


def wandb_summary(offline: Path) -> dict:
    summary: dict = {}
    for r in wandb_records(offline):
        if r.WhichOneof("record_type") == "summary":
            summary |= _items(r.summary.update)
    return summary


def wandb_records(offline: Path) -> list:
    """The records of W&B's offline log (run-<id>.wandb): a LevelDB-style log of 32 KiB blocks,
    each record a 7-byte header (CRC, length, type: full/first/middle/last) and a chunk of a
    serialised `wandb.proto` Record; wandb 0.31 ships no reader for it."""
    from wandb.proto.wandb_internal_pb2 import Record

    paths = glob.glob(str(offline / "run-*.wandb"))
    if not paths:
        return []
    (path,) = paths
    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        return []
    block, header = 32768, 7
    pos, chunk, records = 7, b"", []
    while pos + header <= len(data):
        left = block - pos % block
        if left < header:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + header])
        if kind == 0:
            pos += left
            continue
        if pos + header + length > len(data):
            break  # the writer is still on this record
        chunk += data[pos + header : pos + header + length]
        pos += header + length
        if kind in (1, 4):  # full, last
            record = Record()
            record.ParseFromString(chunk)
            records.append(record)
            chunk = b""
    return records


class SlowBackend:
    """A tracker whose start takes `start_s` (an import, a slow server); records what it got."""

    def __init__(self, start_s: float) -> None:
        self.start_s = start_s
        self.logged: list[dict] = []
        self.finished: str | None = None

    def __call__(self, run_dir: Path) -> SlowBackend:
        return self

    def start(self, *, run_name, group, params, resume_id) -> str:
        time.sleep(self.start_s)
        return "slow-1"

    def log(self, metrics, step) -> None:
        self.logged.append(dict(metrics))

    def table(self, name, columns, rows) -> None:
        pass

    def summary(self, metrics) -> None:
        self.logged.append(dict(metrics))

    def finish(self, status) -> None:
        self.finished = status


def test_a_tracker_still_busy_at_the_end_is_left_behind_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    slow = SlowBackend(start_s=3.0)
    tracking = Tracking(slow, tmp_path, tracker="mlflow", group="g", exit_wait_s=0.3).start({})
    tracking.progress(3, 30)
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING):
        tracking.end({"task/a/accuracy": 1.0}, [], status="complete")
    assert time.monotonic() - t0 < 1.0
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "did not finish within 0.3 s" in warning and "report --export mlflow" in warning
    assert tracking.tracked is None and slow.finished is None


def test_a_quick_tracker_logs_progress_and_the_final_figures(tmp_path: Path) -> None:
    fast = SlowBackend(start_s=0.0)
    tracking = Tracking(fast, tmp_path, tracker="mlflow", group="g", interval_s=0.05).start({})
    tracking.progress(3, 30)
    wait_for(lambda: fast.logged)
    tracking.end({"task/a/accuracy": 1.0}, [], status="interrupted")
    assert fast.logged[0]["progress/samples"] == 3.0
    assert fast.logged[-1] == {"task/a/accuracy": 1.0}
    assert fast.finished == "interrupted" and tracking.tracked.run_id == "slow-1"


def test_sweeps_and_shards_group_their_tracked_runs(tmp_path: Path) -> None:
    (tmp_path / "sweep" / "sweep.json").parent.mkdir()
    (tmp_path / "sweep" / "sweep.json").write_text("{}")
    assert tracking_group(RunDir(tmp_path / "sweep" / "a")) == "sweep"
    assert tracking_group(RunDir(tmp_path / "job" / "shards" / "1")) == "job"
    assert tracking_group(RunDir(tmp_path / "alone")) == "alone"


def test_the_samples_table_is_capped() -> None:
    from evalpipe.rundir.samplelog import SampleRecord

    record = SampleRecord(
        task="t", category="c", sample_id="1", prompt="p" * 5000, completions=("x",),
        extracted=("7",), scores={"accuracy": 1.0, "other": 0.0}, prompt_tokens=1,
        completion_tokens=(1,),
    )  # fmt: skip
    rows = sample_rows([record] * 150)
    assert len(rows) == 100
    assert rows[0] == ["t", "1", "p" * 2000, "x", "7", 1.0]


def test_a_cluster_profile_tracks_its_jobs_unless_told_otherwise(tmp_path: Path) -> None:
    import yaml

    from evalpipe.catalog.clusters import load_cluster
    from evalpipe.jobs.jobspec import JobOptions
    from evalpipe.jobs.prepare import prepare
    from evalpipe.run.runoptions import RunnerOptions, TrackingOptions

    root = Path(__file__).resolve().parent.parent
    data = yaml.safe_load((root / "configs" / "clusters" / "local.yaml").read_text()) | {
        "track": "mlflow"
    }
    profile = tmp_path / "site.yaml"
    profile.write_text(yaml.safe_dump(data))
    assert load_cluster(str(profile)).track == "mlflow"
    out = tmp_path / "run"
    job = prepare("tiny_random", str(profile), JobOptions(), out)
    assert ("--track", "mlflow") in job.spec.runner_options
    assert "--track mlflow" in job.script
    given = JobOptions(run=RunnerOptions(tracking=TrackingOptions(track="wandb")))
    job = prepare("tiny_random", str(profile), given, out)
    assert ("--track", "wandb") in job.spec.runner_options
    smoke = prepare("tiny_random", str(profile), JobOptions(smoke=True), out)
    assert not any(flag == "--track" for flag, _ in smoke.spec.runner_options)
    data["track"] = "neptune"
    profile.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="track 'neptune' is not one of wandb, mlflow"):
        load_cluster(str(profile))
