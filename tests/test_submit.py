"""Submitting through the SlurmClient protocol with FakeSlurm: what is written, what would run,
how a job is followed; and the render/submit commands' dry runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evalpipe.catalog.configpath import CONFIG_PATH
from evalpipe.catalog.selection import Selection
from evalpipe.cli import main
from evalpipe.core import exitcodes
from evalpipe.core.errors import (
    ConfigError,
    DoesNotFitError,
    PreflightError,
    RunDirError,
    SlurmError,
    SlurmUnreachable,
)
from evalpipe.jobs import jobstatus
from evalpipe.jobs.jobspec import JobOptions
from evalpipe.jobs.jobstatus import Job
from evalpipe.jobs.sbatchsubmit import prepare_all, submit, submit_all
from evalpipe.run.runoptions import RunnerOptions
from evalpipe.slurm.client import (
    NO_ANSWER,
    FakeSlurm,
    Slurm,
    TaskState,
    _parse_sacct,
    _parse_squeue,
)


def submit_sweep(
    presets: list[str], cluster: str, out: Path, slurm: FakeSlurm, run_checks: bool = True
) -> list[Job]:
    """A sweep as `evalpipe submit --preset A --preset B` makes it."""
    prepared = prepare_all(presets, cluster, JobOptions(), out)
    return submit_all(prepared, sweep_dir=out, slurm=slurm, run_checks=run_checks)


ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def prepared_tiny_random(tiny_random_path: Path) -> Path:
    """Submit's preflight needs the weights it would load: the real prepared test model."""
    return tiny_random_path


def evalpipe(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {
        "PYTHONPATH": str(ROOT),
        "PATH": "/usr/bin:/bin",
        "EVALPIPE_CACHE": os.environ["EVALPIPE_CACHE"],
    }
    return subprocess.run(
        [sys.executable, "-m", "evalpipe", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_submit_validates_submits_and_records(tmp_path: Path) -> None:
    fake = FakeSlurm(first_id=500)
    run_dir = tmp_path / "run"
    job = submit(
        "tiny_random",
        "local",
        options=JobOptions(run=RunnerOptions(selection=Selection(limit=4))),
        out=run_dir,
        slurm=fake,
    )

    assert (job.job_id, job.merge_job_id, job.run_dir) == ("500", None, run_dir.resolve())
    script = run_dir / "job.sbatch"
    assert fake.calls == [
        ["sbatch", "--test-only", str(script.resolve())],
        ["sbatch", "--parsable", str(script.resolve())],
    ]
    assert fake.scripts["500"] == script.read_text()
    assert (run_dir / "logs").is_dir()
    plan = json.loads((run_dir / "plan.json").read_text())
    assert (plan["preset"], plan["total_gpus"], plan["gpu"]) == ("tiny_random", 1, "h100-80gb")
    record = json.loads((run_dir / "submission.json").read_text())
    assert record["job_id"] == "500" and record["merge_job_id"] is None
    assert record["argv"] == [["sbatch", "--parsable", str(script.resolve())]]
    assert record["preset"] == "tiny_random" and record["cluster"] == "local"
    assert record["submitted_at"].endswith("+00:00")


def test_array_gets_a_dependent_merge_job(tmp_path: Path) -> None:
    fake = FakeSlurm(first_id=10)
    job = submit(
        "tiny_random", "local", options=JobOptions(shards=3), out=tmp_path / "r", slurm=fake
    )
    assert (job.job_id, job.merge_job_id, job.shards) == ("10", "11", 3)
    merge = str((tmp_path / "r" / "merge.sbatch").resolve())
    assert fake.calls[-1] == ["sbatch", "--parsable", "--dependency=afterany:10", merge]
    assert "#SBATCH --array=0-2" in fake.scripts["10"]
    assert "evalpipe merge" in fake.scripts["11"]
    record = json.loads((tmp_path / "r" / "submission.json").read_text())
    assert record["merge_job_id"] == "11" and record["shards"] == 3


def test_scheduler_refusal_quotes_the_scheduler(tmp_path: Path) -> None:
    fake = FakeSlurm(refuse="sbatch: error: Invalid account or account/partition combination")
    with pytest.raises(SlurmError, match="Invalid account or account/partition combination"):
        submit("tiny_random", "local", out=tmp_path / "r", slurm=fake)
    assert not (tmp_path / "r" / "submission.json").exists()
    assert [c[1] for c in fake.calls] == ["--test-only"]


def test_sites_without_test_only_skip_it(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(
        "gpu: h100-80gb\ngpus_per_node: 8\ncpus_per_node: 64\nmemory_per_node_gib: 512\n"
        "test_only: false\n"
    )
    fake = FakeSlurm()
    submit("tiny_random", str(site), out=tmp_path / "r", slurm=fake)
    assert [c[1] for c in fake.calls] == ["--parsable"]
    dry = evalpipe(
        "submit", "--preset", "tiny_random", "--cluster", str(site), "--out", "d", "--dry-run",
        cwd=tmp_path,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert "sbatch --parsable" in dry.stdout and "--test-only" not in dry.stdout


def test_sweep_submits_one_sized_job_per_preset(tmp_path: Path) -> None:
    fake = FakeSlurm(first_id=1)
    # llama3_3_70b's weights are not here: the preflight would refuse the sweep (see below).
    jobs = submit_sweep(
        ["tiny_random", "llama3_3_70b"], "local", out=tmp_path / "sweep", slurm=fake,
        run_checks=False,
    )  # fmt: skip
    assert [j.run_dir.name for j in jobs] == ["tiny_random", "llama3_3_70b"]
    record = json.loads((tmp_path / "sweep" / "llama3_3_70b" / "submission.json").read_text())
    assert record["preflight"] == {"checked": False, "skipped": "--no-check"}
    assert "#SBATCH --gres=gpu:h100:1" in fake.scripts["1"]
    assert "#SBATCH --gres=gpu:h100:4" in fake.scripts["2"]
    sweep = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert sweep["runs"] == [
        {"preset": "tiny_random", "run_dir": "tiny_random", "job_id": "1"},
        {"preset": "llama3_3_70b", "run_dir": "llama3_3_70b", "job_id": "2"},
    ]


def test_a_sweep_puts_each_run_where_sweep_json_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A preset name with a dot is its run directory's whole name, not the part before the dot."""
    presets = tmp_path / "configs" / "presets"
    presets.mkdir(parents=True)
    shutil.copy(ROOT / "configs" / "presets" / "tiny_random.yaml", presets / "tiny.v2.yaml")
    monkeypatch.setenv(CONFIG_PATH, str(tmp_path / "configs"))
    jobs = submit_sweep(
        ["tiny_random", "tiny.v2"], "local", out=tmp_path / "sweep", slurm=FakeSlurm(),
        run_checks=False,
    )  # fmt: skip
    recorded = json.loads((tmp_path / "sweep" / "sweep.json").read_text())["runs"]
    assert [j.run_dir.name for j in jobs] == [r["run_dir"] for r in recorded]
    assert [j.run_dir.name for j in jobs] == ["tiny_random", "tiny.v2"]


def test_sweep_stops_before_submitting_when_one_preset_lacks_weights(tmp_path: Path) -> None:
    fake = FakeSlurm()
    with pytest.raises(PreflightError, match=r"llama3_3_70b: model 'meta-llama/Llama-3\.3-70B"):
        submit_sweep(["tiny_random", "llama3_3_70b"], "local", out=tmp_path / "s", slurm=fake)
    assert fake.calls == []
    assert not (tmp_path / "s" / "tiny_random" / "job.sbatch").exists()


def test_sweep_stops_before_submitting_when_one_preset_does_not_fit(tmp_path: Path) -> None:
    site = tmp_path / "small.yaml"
    site.write_text("gpu: a100-40gb\ngpus_per_node: 1\ncpus_per_node: 8\nmemory_per_node_gib: 64\n")
    fake = FakeSlurm()
    with pytest.raises(DoesNotFitError, match="falcon_180b does not fit"):
        submit_sweep(["tiny_random", "falcon_180b"], str(site), out=tmp_path / "s", slurm=fake)
    assert fake.calls == []


def test_wait_follows_states_until_the_end(tmp_path: Path) -> None:
    fake = FakeSlurm(first_id=7, states_by_id={"7": ["PENDING", "RUNNING", "COMPLETED"]})
    job = submit("tiny_random", "local", out=tmp_path / "r", slurm=fake)
    seen: list[str] = []
    status = job.wait(poll_s=0, on_progress=lambda s: seen.append(s.line()))
    assert status.ok and status.done
    assert seen == [
        "1 PENDING | 0 samples done",
        "1 RUNNING | 0 samples done",
        "1 COMPLETED | 0 samples done",
    ]


def test_a_failed_task_fails_the_job(tmp_path: Path) -> None:
    fake = FakeSlurm(first_id=7, states_by_id={"7": ["FAILED"]})
    job = submit("tiny_random", "local", out=tmp_path / "r", slurm=fake)
    status = job.wait(poll_s=0)
    assert status.done and not status.ok


def test_wait_times_out_with_the_status_command(tmp_path: Path) -> None:
    fake = FakeSlurm(first_id=7, states_by_id={"7": ["RUNNING"]})
    job = submit("tiny_random", "local", out=tmp_path / "r", slurm=fake)
    with pytest.raises(SlurmError, match="evalpipe status"):
        job.wait(poll_s=0, timeout_s=0)


def test_wait_asks_again_when_the_controller_does_not_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A loaded slurmctld times out on squeue while the job runs on: no answer is no end.
    states = ["RUNNING", NO_ANSWER, NO_ANSWER, "COMPLETED"]
    fake = FakeSlurm(first_id=7, states_by_id={"7": states})
    job = submit("tiny_random", "local", out=tmp_path / "r", slurm=fake)
    seen: list[str] = []
    status = job.wait(poll_s=0, on_progress=lambda s: seen.append(s.line()))
    assert status.ok and seen == ["1 RUNNING | 0 samples done", "1 COMPLETED | 0 samples done"]
    # Silent for longer than the grace: an error that says the job may still run.
    monkeypatch.setattr(jobstatus, "UNREACHABLE_GRACE_S", 0.0)
    job = submit("tiny_random", "local", out=tmp_path / "r2", slurm=FakeSlurm(
        first_id=8, states_by_id={"8": [NO_ANSWER]}))  # fmt: skip
    with pytest.raises(SlurmUnreachable, match=r"may still be running.*evalpipe status"):
        job.wait(poll_s=0)


def _slurm_commands(bin_dir: Path, squeue_err: str) -> None:
    """squeue failing with `squeue_err` and sacct without accounting, as SLURM 22.05 prints."""
    bin_dir.mkdir()
    for name, said in (("squeue", squeue_err), ("sacct", "Slurm accounting storage is disabled")):
        (bin_dir / name).write_text(f"#!/bin/sh\necho '{said}' >&2\nexit 1\n")
        (bin_dir / name).chmod(0o755)


def test_the_real_client_tells_a_timeout_from_a_job_slurm_no_longer_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    timeout = tmp_path / "timeout"
    _slurm_commands(timeout, "slurm_load_jobs error: Socket timed out on send/recv operation")
    monkeypatch.setenv("PATH", f"{timeout}:{os.environ['PATH']}")
    with pytest.raises(SlurmUnreachable, match=r"Socket timed out.*scontrol ping"):
        Slurm().states("2431")
    job = submit("tiny_random", "local", out=tmp_path / "r", slurm=FakeSlurm(first_id=2431))
    assert main(["status", str(job.run_dir)]) == exitcodes.ERROR
    assert "Socket timed out" in capsys.readouterr().err
    gone = tmp_path / "gone"
    _slurm_commands(gone, "slurm_load_jobs error: Invalid job id specified")
    monkeypatch.setenv("PATH", f"{gone}:{os.environ['PATH']}")
    [task] = Slurm().states("2431")
    assert task.state == "UNKNOWN" and task.reason == "Slurm accounting storage is disabled"


def test_a_job_gone_without_accounting_is_judged_by_its_run_dir(tmp_path: Path) -> None:
    fake = FakeSlurm(first_id=7, states_by_id={"7": ["UNKNOWN"]})
    job = submit("tiny_random", "local", out=tmp_path / "r", slurm=fake)
    assert job.state().tasks[0].state == "UNKNOWN"
    assert not job.state().ok
    # A finished run's files, one sample line damaged and one cut short by a kill.
    done = Path(__file__).parent / "fixtures" / "rundir-submitted-e4af4c7"
    shutil.copy(done / "manifest.json", job.run_dir / "manifest.json")
    lines = (done / "samples.jsonl").read_text().splitlines(keepends=True)
    (job.run_dir / "samples.jsonl").write_text("".join(lines[:3]) + "{}\n" + lines[3][:20])
    status = Job.load(job.run_dir, slurm=fake).state()
    assert status.ok and status.tasks[0].source == "run dir"
    assert status.samples_done == 3
    (job.run_dir / "manifest.json").write_text(json.dumps({"status": "complete"}))
    status = Job.load(job.run_dir, slurm=fake).state()  # not a manifest: the run dir cannot say
    assert not status.ok and status.tasks[0].reason == "run dir says None"


def test_load_needs_a_readable_submission_record(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match=r"holds no submission\.json"):
        Job.load(tmp_path)
    (tmp_path / "submission.json").write_text("{not json")
    with pytest.raises(RunDirError, match=r"submission\.json cannot be read as JSON"):
        Job.load(tmp_path)
    (tmp_path / "submission.json").write_text("{}")
    with pytest.raises(RunDirError, match=r"submission\.json names no job_id"):
        Job.load(tmp_path)


def test_status_of_a_damaged_sweep_is_an_error_naming_it(tmp_path: Path, capsys) -> None:
    (tmp_path / "sweep.json").write_text('{"schema": 1}')
    assert main(["status", str(tmp_path)]) == exitcodes.ERROR
    assert "sweep.json lists no runs" in capsys.readouterr().err


def test_submitit_executor_refuses_arrays(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="submitit executor runs single-node, unsharded jobs"):
        submit(
            "tiny_random",
            "local",
            options=JobOptions(shards=2),
            out=tmp_path / "r",
            slurm=FakeSlurm(),
            executor="submitit",
        )


def test_squeue_and_sacct_lines_parse() -> None:
    assert _parse_squeue("12_0|RUNNING|None|node1\n12_1|PENDING|Resources|\n") == [
        TaskState(job_id="12_0", state="RUNNING", reason="", nodes="node1"),
        TaskState(job_id="12_1", state="PENDING", reason="Resources", nodes=""),
    ]
    assert _parse_sacct("9|CANCELLED by 0|0:15|node2\n") == [
        TaskState(
            job_id="9", state="CANCELLED", reason="exit code 0:15", nodes="node2", source="sacct"
        )
    ]


def test_submit_dry_run_prints_script_and_argv_and_writes_nothing(tmp_path: Path) -> None:
    result = evalpipe(
        "submit", "--preset", "tiny_random", "--cluster", "local", "--shards", "2",
        "--out", "runs/x", "--dry-run", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    run_dir = (tmp_path / "runs" / "x").resolve()
    assert f"==> {run_dir}/job.sbatch (not written) <==\n#!/bin/bash\n" in result.stdout
    assert "#SBATCH --array=0-1" in result.stdout
    # The validation a real submit runs first, then the submissions, in that order.
    lines = result.stdout.split("==> sbatch command lines (nothing submitted) <==\n")[1]
    assert lines.splitlines()[:3] == [
        f"sbatch --test-only {run_dir}/job.sbatch",
        f"sbatch --test-only {run_dir}/merge.sbatch",
        f"sbatch --parsable {run_dir}/job.sbatch",
    ]
    assert (
        f"sbatch --parsable '--dependency=afterany:<job id>' {run_dir}/merge.sbatch\n"
        in result.stdout
    )
    assert not (tmp_path / "runs").exists()


def test_submit_dry_run_of_a_sweep(tmp_path: Path) -> None:
    result = evalpipe(
        "submit", "--preset", "tiny_random,smollm2_135m", "--preset", "llama3_1_8b",
        "--cluster", "local", "--out", "sw", "--dry-run", "--no-check", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for name in ("tiny_random", "smollm2_135m", "llama3_1_8b"):
        assert f"{(tmp_path / 'sw' / name).resolve()}/job.sbatch (not written)" in result.stdout


def test_render_writes_a_file_and_reports_the_layout(tmp_path: Path) -> None:
    result = evalpipe(
        "render", "--preset", "tiny_random", "--cluster", "local", "--tp", "4", "--pp", "2",
        "--out", "r", "-o", "job.sbatch", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "2 node(s) × 4 GPU(s), TP=4 PP=2" in result.stderr
    assert "#SBATCH --nodes=2" in (tmp_path / "job.sbatch").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cluster", "nowhere"], "Unknown cluster 'nowhere'"),
        (["--cluster", "local", "--merge"], "--merge needs --shards N"),
        (["--cluster", "local", "--tp", "3"], "Tensor parallel size 3 is invalid"),
        (["--cluster", "missing.yaml"], "Cluster file 'missing.yaml' does not exist"),
    ],
)
def test_render_errors_are_one_line_without_traceback(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = evalpipe("render", "--preset", "tiny_random", *args, cwd=tmp_path)
    assert result.returncode == 1
    assert message in result.stderr and "Traceback" not in result.stderr


def test_render_and_submit_help_import_nothing_heavy(tmp_path: Path) -> None:
    code = (
        "import sys\nfrom evalpipe.cli import build_parser\n"
        "from evalpipe.jobs.prepare import prepare\nfrom evalpipe.jobs.jobspec import JobOptions\n"
        "from pathlib import Path\nprepare('tiny_random', 'local', JobOptions(), Path('r'))\n"
        "heavy = {'vllm', 'torch', 'pandas', 'ray', 'pynvml', 'matplotlib', 'submitit'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert result.stdout.strip() == "[]", result.stderr
