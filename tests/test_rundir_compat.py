"""Run directories written by earlier evalpipe versions still load, report and resume with
today's code: tests/fixtures/rundir-schema1 (the first version: the toy tasks of runner_support,
fake engine) and tests/fixtures/rundir-submitted-e4af4c7 (commit e4af4c7: `evalpipe submit`
with FakeSlurm, then `evalpipe run --preset tiny_random --backend fake --tasks
arithmetic,ordering,pyfuncs --limit 3` into it; with plan.json, submission.json, metrics.csv)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from runner_support import fake_engine, lines, preset, toy_tasks

from evalpipe.cli import main
from evalpipe.reports.loading import load_runs
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import Manifest, read_manifest
from evalpipe.rundir.samplelog import read_samples
from evalpipe.rundir.submission import read_plan, read_submission
from evalpipe.rundir.summary import read_summary

FIXTURE = RunDir(Path(__file__).parent / "fixtures" / "rundir-schema1")
SUBMITTED = RunDir(Path(__file__).parent / "fixtures" / "rundir-submitted-e4af4c7")
SUBMITTED_ARGV = [
    "run", "--preset", "tiny_random", "--backend", "fake", "--tasks",
    "arithmetic,ordering,pyfuncs", "--limit", "3",
]  # fmt: skip


def by_id(records: list[dict]) -> list[dict]:
    return sorted(records, key=lambda r: (r["task"], r["sample_id"]))


def test_the_manifest_round_trips_every_key() -> None:
    data = json.loads(FIXTURE.manifest.read_text())
    manifest = Manifest.from_dict(data)
    assert (manifest.status, manifest.n_total, manifest.preset_name) == (
        "complete", 20, "tiny_random",
    )  # fmt: skip
    assert manifest.to_dict() == data


@pytest.mark.parametrize("files", [FIXTURE, SUBMITTED], ids=["schema1", "e4af4c7"])
def test_the_typed_config_keeps_the_stored_fingerprint(files: RunDir) -> None:
    data = json.loads(files.manifest.read_text())
    manifest = read_manifest(files)
    assert manifest is not None and manifest.to_dict() == data
    assert manifest.config.fingerprint() == data["config_hash"]
    assert manifest.config.tasks == tuple(data["config"]["tasks"])


def test_every_file_of_a_submitted_run_reads_back() -> None:
    manifest, summary = read_manifest(SUBMITTED), read_summary(SUBMITTED)
    plan, submission = read_plan(SUBMITTED), read_submission(SUBMITTED)
    assert manifest is not None and summary is not None and plan is not None
    assert manifest.plan == plan and plan.to_dict() == json.loads(SUBMITTED.plan.read_text())
    assert (plan.gpu, plan.total_gpus, manifest.config.backend) == ("h100-80gb", 1, "fake")
    assert (submission.job_id, submission.merge_job_id, submission.shards) == ("4242", None, 1)
    assert submission.predicted("wall_s") is None  # submitted without an estimate
    assert submission.to_dict() == json.loads(SUBMITTED.submission.read_text())
    assert (summary.complete, summary.n_done, sorted(summary.tasks)) == (
        True, 9, ["arithmetic", "ordering", "pyfuncs"],
    )  # fmt: skip
    assert [d.device for d in summary.devices] == ["cpu"]
    found = read_samples(SUBMITTED.samples)
    assert len(found.records) == 9 and (found.damaged, found.cut_short) == ((), None)
    timings = manifest.phase_timings
    assert timings.load_s == manifest.timings["load"]
    assert timings.total_s("score") == pytest.approx(
        math.fsum(v for k, v in manifest.timings.items() if k.startswith("score:"))
    )


def test_reports_read_a_submitted_run() -> None:
    data = load_runs([SUBMITTED.path])
    assert data.warnings == ()
    (run,) = data.runs.itertuples()
    assert (run.status, run.n_done, run.n_total, run.preset) == ("complete", 9, 9, "tiny_random")
    assert math.isnan(run.predicted_wall_s_mid)
    assert sorted(set(data.samples["task"])) == ["arithmetic", "ordering", "pyfuncs"]
    (device,) = data.devices.itertuples()
    assert device.device == "cpu" and device.peak_memory_gib > 0


def test_a_submitted_run_killed_midway_resumes_with_todays_cli(tmp_path: Path) -> None:
    out = tmp_path / "run"
    shutil.copytree(SUBMITTED.path, out)
    kept = SUBMITTED.samples.read_text().splitlines(keepends=True)
    RunDir(out).samples.write_text("".join(kept[:4]) + kept[4][:30])  # killed while writing
    manifest = json.loads(SUBMITTED.manifest.read_text())
    manifest["status"] = manifest["attempts"][-1]["status"] = "running"
    RunDir(out).manifest.write_text(json.dumps(manifest))
    assert main([*SUBMITTED_ARGV, "--out", str(out)]) == 0
    assert by_id(lines(out)) == by_id(lines(SUBMITTED.path))
    statuses = [a["status"] for a in json.loads(RunDir(out).manifest.read_text())["attempts"]]
    assert statuses == ["lost", "complete"]
    after = json.loads(RunDir(out).manifest.read_text())
    assert after["plan"] == manifest["plan"] and after["config_hash"] == manifest["config_hash"]


def test_a_finished_old_run_is_not_run_again(tmp_path: Path) -> None:
    out = tmp_path / "run"
    shutil.copytree(FIXTURE.path, out)

    def must_not_load(settings):
        raise AssertionError("engine loaded although nothing was left to do")

    result = run_evaluation(
        must_not_load, toy_tasks(), out, preset=preset(), options=RunOptions(backend="fake")
    )
    assert result.status == "complete"
    old = json.loads(FIXTURE.summary.read_text())["tasks"]
    for name, task in result.summary.tasks.items():  # today's adds intervals beside them
        for metric, stats in task.metrics.items():
            want = old[name]["metrics"][metric]
            assert {"mean": stats.mean, "stderr": stats.stderr, "n": stats.n} == want


def test_an_old_run_killed_midway_resumes_with_todays_runner(tmp_path: Path) -> None:
    out = tmp_path / "run"
    shutil.copytree(FIXTURE.path, out)
    kept = FIXTURE.samples.read_text().splitlines(keepends=True)[:12]
    RunDir(out).samples.write_text("".join(kept))
    manifest = json.loads(FIXTURE.manifest.read_text())
    manifest["status"] = manifest["attempts"][-1]["status"] = "running"  # killed with -9
    RunDir(out).manifest.write_text(json.dumps(manifest))
    engine = fake_engine()
    result = run_evaluation(
        lambda settings: engine,
        toy_tasks(),
        out,
        preset=preset(),
        options=RunOptions(backend="fake"),
    )
    assert result.status == "complete" and len(engine.served) == 8
    assert by_id(lines(out)) == by_id(lines(FIXTURE.path))
    statuses = [a["status"] for a in json.loads(RunDir(out).manifest.read_text())["attempts"]]
    assert statuses == ["lost", "complete"]


def test_reports_read_an_old_run() -> None:
    data = load_runs([FIXTURE.path])
    # The fixture ran without a monitor: that is the only thing the loader notes.
    assert [w for w in data.warnings if "no device figures" not in w] == []
    (run,) = data.runs.itertuples()
    assert (run.status, run.n_done, run.n_total, run.preset) == ("complete", 20, 20, "tiny_random")


def test_fields_added_later_leave_old_fingerprints_alone() -> None:
    from evalpipe.records.sampling import SamplingSettings
    from evalpipe.tasks import load_tasks

    (task,) = load_tasks(tasks=["arithmetic"])
    assert "ignore_eos" not in task.definition()["sampling"]
    assert "ignore_eos" not in SamplingSettings().to_dict()
    assert SamplingSettings(ignore_eos=True).to_dict()["ignore_eos"] is True


def test_estimate_figures_of_a_task_are_not_in_its_fingerprint() -> None:
    """A task file's split size and prompt bytes feed estimates only: writing or correcting
    them never stops a run started before from resuming."""
    import dataclasses

    from evalpipe.core.configio import as_config
    from evalpipe.tasks import load_tasks

    (task,) = load_tasks(tasks=["gsm8k"])
    assert task.config.source.rows == 1319
    source = task.definition()["source"]
    assert "rows" not in source and "prompt_bytes" not in source
    other = dataclasses.replace(task.config.source, rows=7, prompt_bytes=9)
    assert as_config(dataclasses.replace(task.config, source=other)) == task.definition()
