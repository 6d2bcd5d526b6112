"""The typed records of run-directory files read back what their writers wrote, and say which
file is wrong and why when they cannot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalpipe.core.errors import DamagedFileError, RunDirError
from evalpipe.core.span import Span
from evalpipe.monitor import DeviceSummary
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import PlannedTask, read_manifest
from evalpipe.rundir.runconfig import RunConfig
from evalpipe.rundir.samplelog import SampleRecord, write_json
from evalpipe.rundir.submission import Submission, read_submission, write_submission
from evalpipe.rundir.summary import read_summary, summarize, write_summary
from evalpipe.rundir.timings import Timings, phase

FIXTURE = RunDir(Path(__file__).parent / "fixtures" / "rundir-submitted-e4af4c7")


def submission(**overrides) -> Submission:
    values = {
        "executor": "sbatch",
        "argv": [["sbatch", "--parsable", "/r/job.sbatch"]],
        "job_id": "12",
        "merge_job_id": "13",
        "shards": 2,
        "preset": "p",
        "cluster": "c",
        "preflight": {"checked": True, "warnings": []},
        "submitted_at": "2026-01-01T00:00:00+00:00",
    }
    return Submission(**values | overrides)


def test_submission_round_trips_and_reads_its_estimate_as_spans(tmp_path: Path) -> None:
    estimate = {
        "wall_s": Span(60.0, 90.0, 150.0).to_dict(1),
        "gpu_hours": Span(0.5, 0.75, 1.25).to_dict(4),
        "basis": "roofline",
    }
    record = submission(estimate=estimate, extra={"added_later": 1})
    write_submission(RunDir(tmp_path), record)
    back = read_submission(RunDir(tmp_path))
    assert back == record
    assert json.loads((tmp_path / "submission.json").read_text())["schema"] == 1
    assert back.predicted("wall_s") == Span(60.0, 90.0, 150.0)
    assert back.predicted("gpu_hours") == Span(0.5, 0.75, 1.25)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema": 2}, "has schema 2; this evalpipe reads schema 1 and older"),
        ({"estimate": {"wall_s": {"low": 1.0}}}, "is not a complete submission"),
        ({"estimate": {"wall_s": {"low": 3.0, "mid": 2.0, "high": 1.0}}}, "low <= mid <= high"),
    ],
)
def test_a_submission_it_cannot_read_names_the_file(
    tmp_path: Path, change: dict, message: str
) -> None:
    write_json(tmp_path / "submission.json", submission().to_dict() | change)
    with pytest.raises(DamagedFileError, match=message) as error:
        read_submission(RunDir(tmp_path))
    assert str(tmp_path / "submission.json") in str(error.value)


def test_summary_reads_back_every_figure_reports_use(tmp_path: Path) -> None:
    records = [
        SampleRecord(
            task="t", category="math", sample_id=str(i), prompt="?", completions=("a",),
            extracted=("a",), scores={"accuracy": float(i % 2)}, prompt_tokens=5,
            completion_tokens=(4,),
        )
        for i in range(4)
    ]  # fmt: skip
    device = DeviceSummary(device="gpu0", host="n1", name="H100", peak_memory_gib=70.0)
    written = summarize(
        records, run_id="r", preset="p", planned=[PlannedTask(name="t", category="math",
        n_total=5)], timings={"load": 1.0, phase("generate", "math"): 2.0}, wall_s=4.0,
        devices=[device], gpus=1, oom_fallback=[],
    )  # fmt: skip
    write_summary(RunDir(tmp_path), written)
    summary = read_summary(RunDir(tmp_path))
    assert summary is not None
    assert (summary.preset, summary.complete, summary.n_done) == ("p", False, 4)
    task = summary.tasks["t"]
    assert (task.category, task.n_total) == ("math", 5)
    stats = task.metrics["accuracy"]
    assert (stats.mean, stats.n) == (0.5, 4)
    assert stats.ci_low == written.tasks["t"].metrics["accuracy"].ci_low is not None
    assert summary.categories["math"].micro["accuracy"].mean == 0.5
    t = summary.throughput
    assert (t.generate_s, t.generated_tokens, t.tokens_per_s, t.gpus) == (2.0, 16, 8.0, 1)
    assert summary.devices == [device]
    assert summary == written  # one record, written and read back whole


def test_a_damaged_summary_is_named_and_a_missing_one_is_none(tmp_path: Path) -> None:
    assert read_summary(RunDir(tmp_path)) is None
    (tmp_path / "summary.json").write_text("[1, 2]")
    with pytest.raises(DamagedFileError, match=r"summary\.json must hold a JSON object, not list"):
        read_summary(RunDir(tmp_path))


def test_manifest_load_has_one_error_policy(tmp_path: Path) -> None:
    files = RunDir(tmp_path)
    assert read_manifest(files) is None
    files.manifest.write_text("{not json")
    with pytest.raises(DamagedFileError, match=r"manifest\.json cannot be read as JSON"):
        read_manifest(files)
    data = json.loads(FIXTURE.manifest.read_text())
    write_json(files.manifest, data | {"schema": 99})
    with pytest.raises(DamagedFileError, match=r"schema 99; .* Upgrade evalpipe"):
        read_manifest(files)
    write_json(files.manifest, data | {"config": {"backend": "fake"}})
    with pytest.raises(DamagedFileError, match=r"not a complete manifest .*config lacks 'preset'"):
        read_manifest(files)
    files.manifest.unlink()
    files.manifest.mkdir()  # exists but cannot be read: an error every reader reports
    with pytest.raises(RunDirError, match=r"Cannot read .*manifest\.json.*Is a directory") as e:
        read_manifest(files)
    assert not isinstance(e.value, DamagedFileError)


def test_run_config_fingerprint_ignores_the_engine_layout_and_diff_names_keys() -> None:
    config = RunConfig.from_dict(json.loads(FIXTURE.manifest.read_text())["config"])
    relaid = RunConfig.from_dict(
        config.to_dict() | {"engine": config.engine | {"tensor_parallel_size": 2, "replicas": 2}}
    )
    assert relaid.fingerprint() == config.fingerprint() and relaid.gpus == 4
    limited = RunConfig.from_dict(config.to_dict() | {"limit": 5})
    assert limited.fingerprint() != config.fingerprint()
    assert config.diff(limited) == ["limit: 3 → 5"]
    sharded = RunConfig.from_dict(config.to_dict() | {"shard": "1/4"})
    assert sharded.shard_of() is not None and sharded.shard_of().count == 4
    assert sharded.unsharded().fingerprint() == config.fingerprint()


def test_timings_are_read_by_stage_and_category() -> None:
    timings = Timings({"load": 2.0, "generate:math": 3.0, "generate:code": 1.5, "score:code": 4.0})
    assert (timings.load_s, timings.total_s("generate"), timings.total_s("score")) == (
        2.0, 4.5, 4.0,
    )  # fmt: skip
    assert (timings.of("score", "code"), timings.of("score", "math")) == (4.0, 0.0)
    assert phase("score", "code") == "score:code"
