"""Against the real local SLURM (`scripts/local-slurm.sh start`): test-only validation of every
preset, end-to-end submit --wait, a 2-shard array + merge, preemption with requeue and resume,
a 2-node Ray cluster, status without accounting, and the submitit executor.

Jobs run the real runner with the deterministic fake engine (`--backend fake`): these tests are
about the scheduler path; the vLLM engine has its own tier.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalpipe.catalog.configpath import config_dir
from evalpipe.catalog.preset import preset_names
from evalpipe.core.errors import SlurmError
from evalpipe.jobs.jobspec import JobOptions
from evalpipe.jobs.jobstatus import Job
from evalpipe.jobs.prepare import prepare
from evalpipe.jobs.sbatchsubmit import submit_prepared
from evalpipe.run.runoptions import LayoutOptions, RunnerOptions
from evalpipe.slurm.client import UNKNOWN, Slurm

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parent.parent
# A small, fixed slice of the tasks: every run below evaluates the same samples.
LIMIT = "3"


def job_env(**extra: str) -> dict[str, str]:
    """Jobs inherit the submitter's environment (sbatch --export=ALL): this venv and checkout."""
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return {**os.environ, "PATH": path, "PYTHONPATH": str(ROOT), **extra}


def evalpipe(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300):
    return subprocess.run(
        [sys.executable, "-m", "evalpipe", *args],
        cwd=cwd,
        env=env or job_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def samples(run_dir: Path) -> dict[tuple[str, str], dict]:
    """samples.jsonl keyed by (task, sample_id); fails on a duplicate."""
    out: dict[tuple[str, str], dict] = {}
    for line in (run_dir / "samples.jsonl").read_text().splitlines():
        record = json.loads(line)
        key = (record["task"], record["sample_id"])
        assert key not in out, f"duplicated sample {key} in {run_dir}"
        out[key] = record
    return out


def outcome(record: dict) -> tuple:
    return (record["completions"], record["extracted"], record["scores"])


def wait_for_state(job: Job, state: str, reason: str = "", timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        (task,) = job.slurm.states(job.job_id)
        if task.state == state and (not reason or task.reason == reason):
            return
        time.sleep(0.3)
    pytest.fail(f"job {job.job_id} never reached {state} {reason}: {job.slurm.states(job.job_id)}")


def submit_fake(
    tmp_path: Path,
    name: str,
    *options: str,
    env: dict[str, str] | None = None,
    cluster: str = "local",
) -> Job:
    """`evalpipe submit` with the fake engine, without waiting; the Job handle to follow it."""
    result = evalpipe(
        "submit", "--preset", "tiny_random", "--cluster", cluster, "--backend", "fake",
        "--limit", LIMIT, "--out", name, *options, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return Job.load((tmp_path / name).resolve())


def site_profile(
    tmp_path: Path, site: str, env: dict[str, str] | None = None, **changes: object
) -> str:
    """The local cluster's profile with `changes` and `env` added, and the test device
    tests/sites/<site> on the job's PYTHONPATH (as a site's profile would put a module there)."""
    import yaml

    data = yaml.safe_load((ROOT / "configs" / "clusters" / "local.yaml").read_text())
    device = {"PYTHONPATH": f"{ROOT / 'tests' / 'sites' / site}:{ROOT}"}
    data["env"] = {**data["env"], **(env or {}), **device}
    data.update(changes)
    path = tmp_path / f"{site}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.fixture(scope="module")
def reference(local_slurm: Slurm, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted, unsharded run: what the array and the preempted run must reproduce."""
    tmp = tmp_path_factory.mktemp("reference")
    result = evalpipe(
        "submit", "--preset", "tiny_random", "--cluster", "local", "--backend", "fake",
        "--limit", LIMIT, "--out", "run", "--wait", "--poll", "1", cwd=tmp,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "completed; results in" in result.stdout
    return tmp / "run"


def test_submit_wait_runs_the_runner_and_leaves_results(reference: Path) -> None:
    summary = json.loads((reference / "summary.json").read_text())
    manifest = json.loads((reference / "manifest.json").read_text())
    assert summary["complete"] and summary["n_done"] == summary["n_total"] > 0
    assert manifest["status"] == "complete"
    assert (
        manifest["slurm"]["job_id"]
        == json.loads((reference / "submission.json").read_text())["job_id"]
    )
    assert manifest["hosts"] and manifest["hosts"][0] in ("node1", "node2")
    for name in ("job.sbatch", "plan.json", "submission.json"):
        assert (reference / name).is_file()
    logs = list((reference / "logs").glob("evalpipe-tiny_random-*.out"))
    assert len(logs) == 1 and "evalpipe: job" in logs[0].read_text()
    assert len(samples(reference)) == summary["n_done"]


@pytest.mark.vllm
def test_submit_wait_with_the_cpu_engine(local_slurm: Slurm, tmp_path: Path) -> None:
    """The README's demo path: the real runner and the CPU build of vLLM inside a SLURM job,
    generating (math) and ranking options by log-probability (reasoning, --mc-method)."""
    from evalpipe.catalog import weights

    weights.prepare("tiny_random")  # built once into the cache the job reads too
    result = evalpipe(
        "submit", "--preset", "tiny_random", "--cluster", "local", "--categories",
        "math,reasoning", "--mc-method", "logprobs", "--limit", "1", "--out", "run", "--wait",
        "--poll", "2", cwd=tmp_path, timeout=600,
    )  # fmt: skip
    run_dir = tmp_path / "run"
    logs = "".join(p.read_text() for p in (run_dir / "logs").glob("*.out"))
    assert result.returncode == 0, result.stderr + logs[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert summary["complete"] and summary["n_done"] == summary["n_total"] > 0
    assert manifest["config"]["backend"] == "vllm" and manifest["versions"]["vllm"]
    assert summary["throughput"]["generated_tokens"] > 0
    by_task = {r["task"]: r for r in samples(run_dir).values()}
    assert len(by_task["ordering"]["option_logprobs"]) == 4
    assert "option_logprobs" not in by_task["arithmetic"]


def test_serve_mode_job_evaluates_through_a_vllm_server_and_stops_it(
    local_slurm: Slurm, tmp_path: Path
) -> None:
    """submit --mode serve: the job starts vLLM's server on the CPU build, waits for it, runs
    the evaluation against it (generation and option log-probabilities), and stops it."""
    from evalpipe.catalog import weights

    weights.prepare("tiny_random")
    result = evalpipe(
        "submit", "--preset", "tiny_random", "--cluster", "local", "--mode", "serve",
        "--tasks", "arithmetic,ordering", "--mc-method", "logprobs", "--limit", "2",
        "--out", "run", "--wait", "--poll", "2", cwd=tmp_path, timeout=600,
    )  # fmt: skip
    run_dir = tmp_path / "run"
    logs = "".join(p.read_text() for p in (run_dir / "logs").glob("*.out"))
    assert result.returncode == 0, result.stderr + logs[-3000:]
    assert "serves tiny-random-llama after" in logs and "vLLM server stopped" in logs
    [server_log] = (run_dir / "logs").glob("server-*.log")
    assert "--served-model-name tiny-random-llama" in server_log.read_text()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["config"]["backend"] == "openai"
    engine = manifest["engine"]
    assert engine["device"] == "remote" and engine["base_url"].startswith("http://127.0.0.1:")
    by_task = {r["task"]: r for r in samples(run_dir).values()}
    assert len(by_task["ordering"]["option_logprobs"]) == 4
    assert by_task["arithmetic"]["completion_tokens"][0] > 0
    # Nothing listens on the server's port once the job has ended.
    port = int(engine["base_url"].rsplit(":", 1)[1].split("/")[0])
    import socket

    with socket.socket() as sock, pytest.raises(ConnectionRefusedError):
        sock.connect(("127.0.0.1", port))


def test_submit_refuses_an_unprepared_model_before_sbatch_then_accepts_it_prepared(
    local_slurm: Slurm, tmp_path: Path
) -> None:
    cache = tmp_path / "fresh-cache"
    env = job_env(EVALPIPE_CACHE=str(cache))
    args = ("submit", "--preset", "tiny_random", "--cluster", "local", "--limit", "1")
    refused = evalpipe(*args, "--out", "refused", cwd=tmp_path, env=env)
    assert refused.returncode == 1
    assert "error: [weights] preset tiny_random: model 'tiny-random-llama' is not available" in (
        refused.stderr
    )
    assert f"Fetch it with: EVALPIPE_CACHE={cache} evalpipe models prepare tiny_random" in (
        refused.stderr
    )
    assert not (tmp_path / "refused").exists()  # nothing written, nothing queued

    prepared = evalpipe("models", "prepare", "tiny_random", cwd=tmp_path, env=env)
    assert prepared.returncode == 0, prepared.stderr
    accepted = evalpipe(*args, "--out", "accepted", cwd=tmp_path, env=env)
    assert accepted.returncode == 0, accepted.stderr
    record = json.loads((tmp_path / "accepted" / "submission.json").read_text())
    # The one warning: HumanEval/129 is longer than tiny_random's 1,024-token context.
    assert record["preflight"]["checked"] is True
    (warning,) = record["preflight"]["warnings"]
    assert warning.startswith("task humaneval: its longest prompt (sample 'HumanEval/129'")
    assert "context_overflow" in warning
    subprocess.run(["scancel", record["job_id"]], check=False)  # only the flow is under test


@pytest.mark.vllm
def test_smoke_job_with_the_cpu_engine_writes_its_calibration_and_table(
    local_slurm: Slurm, tmp_path: Path, tiny_random_path: Path, model_cache: Path
) -> None:
    """`evalpipe smoke` through the same template, preflight and node checks as a submission."""
    from evalpipe.estimate.calibration import load_calibrations

    cache = model_cache
    result = evalpipe(
        "smoke", "--preset", "tiny_random", "--cluster", "local", "--out", "smoke", "--wait",
        "--poll", "2", cwd=tmp_path, timeout=600,
    )  # fmt: skip
    run_dir = tmp_path / "smoke"
    logs = "".join(p.read_text() for p in (run_dir / "logs").glob("*.out"))
    assert result.returncode == 0, result.stderr + logs[-3000:]
    assert " -m evalpipe smoke --local " in (run_dir / "job.sbatch").read_text()
    assert json.loads((run_dir / "submission.json").read_text())["preflight"]["checked"]
    name = "tiny_random-h100-80gb-tp1-pp1.calibration.json"
    (calibration,) = load_calibrations([run_dir / name])
    assert load_calibrations([cache / "calibrations" / name])[-1].created_at >= (
        calibration.created_at
    )
    assert calibration.backend == "vllm" and calibration.host in ("node1", "node2")
    assert calibration.answers["plain"] and calibration.answers["chat"]
    assert calibration.kv_cache_tokens and calibration.kv_cache_tokens > 0
    (cpu,) = calibration.devices
    assert cpu.device == "cpu" and cpu.used_after_gib > cpu.used_before_gib
    assert all(q.prefill_tok_s > 0 for q in calibration.probe)
    # The long-context probe, sized to tiny_random's 1024-token context: over twice the context.
    long, short = calibration.probe[-1], calibration.probe[0]
    assert long.prompt_tokens / long.batch > 2 * short.prompt_tokens / short.batch
    assert set(calibration.phases_s) == {"import", "load", "first_token"}
    assert f"smoke: tiny_random on h100-80gb (tp1-pp1, vllm) on {calibration.host}" in (
        result.stdout
    )
    assert "weights+overhead" in result.stdout and "prefill tok/s" in result.stdout


def test_one_job_runs_two_replicas_on_a_node_with_four_gpus(
    reference: Path, tmp_path: Path
) -> None:
    """--replicas 2 on the local profile (4 fake GPUs a node): the job asks for both replicas'
    GPUs and CPUs, the runner starts two engine processes, and the samples equal one engine's."""
    result = evalpipe(
        "submit", "--preset", "tiny_random", "--cluster", "local", "--backend", "fake",
        "--limit", LIMIT, "--replicas", "2", "--out", "run", "--wait", "--poll", "1",
        cwd=tmp_path,
    )  # fmt: skip
    run_dir = tmp_path / "run"
    logs = "".join(p.read_text() for p in (run_dir / "logs").glob("*.out"))
    assert result.returncode == 0, result.stdout + result.stderr + logs[-3000:]
    script = (run_dir / "job.sbatch").read_text()
    assert "#SBATCH --gres=gpu:h100:2" in script and "--replicas 2" in script
    assert "2 replica(s)" in logs
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert len(manifest["engine"]["replicas"]) == 2
    assert {k: outcome(r) for k, r in samples(run_dir).items()} == {
        k: outcome(r) for k, r in samples(reference).items()
    }


def test_a_cluster_tracking_by_default_logs_the_job_to_mlflow_from_the_compute_node(
    local_slurm: Slurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A profile with `track: mlflow` and no MLFLOW_TRACKING_URI: the job's runner logs to the
    file store in its run directory, from the node it runs on, while it runs."""
    pytest.importorskip("mlflow", reason="pip install 'evalpipe[track]'")
    from mlflow.tracking import MlflowClient

    from evalpipe.rundir.layout import RunDir
    from evalpipe.rundir.manifest import read_manifest
    from evalpipe.rundir.summary import read_summary
    from evalpipe.rundir.tracked import tracked_metrics

    # Each request takes 12 s: the run outlasts MLflow's import on the node, as a model's would.
    profile = site_profile(tmp_path, "fake_nvml", track="mlflow")
    env = {k: v for k, v in job_env(EVALPIPE_FAKE_DELAY_S="12").items() if "MLFLOW" not in k}
    job = submit_fake(tmp_path, "run", "--tasks", "arithmetic", "--wait", "--poll", "1",
                      cluster=profile, env=env)  # fmt: skip
    run_dir = job.run_dir
    logs = "".join(p.read_text() for p in (run_dir / "logs").glob("*.out"))
    assert "--track mlflow" in (run_dir / "job.sbatch").read_text()
    manifest = read_manifest(RunDir(run_dir))
    assert manifest.status == "complete", logs[-3000:]
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # as the job's tracker sets it
    client = MlflowClient(tracking_uri=RunDir(run_dir).mlruns.as_uri())
    tracked = client.get_run(manifest.tracking.run_id)
    assert tracked.info.status == "FINISHED", logs[-3000:]
    node = manifest.hosts[0]
    assert node in ("node1", "node2")
    assert tracked.data.params["slurm.job_id"] == str(job.job_id)
    expected = tracked_metrics(read_summary(RunDir(run_dir)))
    assert {k: tracked.data.metrics[k] for k in expected} == pytest.approx(expected)
    series = [k for k in tracked.data.metrics if k.startswith(f"device/{node}/")]
    assert series, sorted(tracked.data.metrics)


def test_status_reads_the_queue_and_lists_logs(reference: Path) -> None:
    result = evalpipe("status", str(reference), "--json", cwd=reference.parent)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["tasks"][0]["state"] == "COMPLETED"
    assert report["logs"] and report["samples_done"] > 0
    table = evalpipe("status", str(reference), cwd=reference.parent)
    assert "COMPLETED" in table.stdout and "logs:" in table.stdout


def test_every_preset_passes_sbatch_test_only(local_slurm: Slurm, tmp_path: Path) -> None:
    """All shipped presets fit the local profile (2 nodes × 4 fake H100s): SLURM accepts each."""
    for name in preset_names():
        prepared = prepare(name, "local", JobOptions(), tmp_path / name)
        script = tmp_path / f"{name}.sbatch"
        script.write_text(prepared.script)
        answer = local_slurm.test_only(script)
        nodes = "node[1-2]" if prepared.spec.nodes == 2 else "node"
        assert re.search(rf"to start at .* on nodes {re.escape(nodes)}", answer), (name, answer)


def test_an_impossible_request_is_refused_in_slurms_words(
    local_slurm: Slurm, tmp_path: Path
) -> None:
    site = tmp_path / "bigger.yaml"
    site.write_text(
        (config_dir() / "clusters" / "local.yaml")
        .read_text()
        .replace("max_nodes: 2", "max_nodes: 3")
        .replace("gpus_per_node: 4", "gpus_per_node: 1")
    )
    from evalpipe.catalog import weights

    weights.prepare("smollm2_135m")  # the submit checks find its weights before asking SLURM
    prepared = prepare(
        "smollm2_135m",
        str(site),
        JobOptions(run=RunnerOptions(layout=LayoutOptions(pp=3))),
        tmp_path / "run",
    )
    assert prepared.spec.nodes == 3
    with pytest.raises(SlurmError, match="Requested node configuration is not available"):
        submit_prepared(prepared, slurm=local_slurm)
    assert not (tmp_path / "run" / "submission.json").exists()


def test_a_vanished_job_without_accounting_is_unknown(local_slurm: Slurm) -> None:
    (state,) = local_slurm.states("999999")
    assert state.state == UNKNOWN and state.source == "none"


def test_array_of_two_shards_and_merge_equals_the_unsharded_run(
    reference: Path, tmp_path: Path
) -> None:
    job = submit_fake(tmp_path, "sharded", "--shards", "2")
    status = job.wait(poll_s=1, timeout_s=300)
    assert status.ok, status
    assert len(status.tasks) == 2 and status.merge is not None
    merged, whole = samples(job.run_dir), samples(reference)
    assert merged.keys() == whole.keys()
    assert {k: outcome(v) for k, v in merged.items()} == {k: outcome(v) for k, v in whole.items()}
    got = json.loads((job.run_dir / "summary.json").read_text())
    want = json.loads((reference / "summary.json").read_text())
    assert got["complete"] and got["n_done"] == want["n_done"]
    assert got["tasks"] == want["tasks"] and got["categories"] == want["categories"]
    assert len(list((job.run_dir / "logs").glob("*_[01].out"))) == 2


def test_preemption_checkpoints_requeues_and_resumes(reference: Path, tmp_path: Path) -> None:
    # One second per generate call, so the job is still running when the signal comes.
    job = submit_fake(tmp_path, "preempted", env=job_env(EVALPIPE_FAKE_DELAY_S="1"))
    preempt(job, "--signal=USR1", "--batch")  # what SLURM's --signal=B:USR1@N warning does
    status = job.wait(poll_s=1, timeout_s=180)
    assert status.ok, status

    log = next((job.run_dir / "logs").glob("*.out")).read_text()
    assert "stopped at a checkpoint; requeueing job" in log
    assert "start 2 of at most 3" in log
    manifest = json.loads((job.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["slurm"]["restart_count"] == 1
    resumed, whole = samples(job.run_dir), samples(reference)  # samples() refuses duplicates
    assert resumed.keys() == whole.keys()
    assert {k: outcome(v) for k, v in resumed.items()} == {k: outcome(v) for k, v in whole.items()}


# ---- node failure: a node set DOWN under a running job ----
# The job is requeued (--requeue, JobRequeue=1), runs again and resumes from its checkpoint. Both
# emulated nodes share one host, so the first attempt's runner may outlive its node: the run
# directory's lock keeps it from writing alongside the second.


def _scontrol_node(node: str, *settings: str) -> str:
    done = subprocess.run(
        ["scontrol", "update", f"nodename={node}", *settings], capture_output=True, text=True
    )
    return done.stdout + done.stderr


def _return_to_service(node: str) -> None:
    """state=resume; it fails harmlessly when the node came back by itself (ReturnToService=2)."""
    said = _scontrol_node(node, "state=resume")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = subprocess.run(
            ["sinfo", "-h", "-n", node, "-o", "%t"], capture_output=True, text=True
        ).stdout.strip()
        if state in {"idle", "mix", "alloc", "comp"}:
            return
        time.sleep(0.5)
    pytest.fail(f"{node} did not return to service ({state}; scontrol said {said!r})")


def _queued() -> list[str]:
    """The ids of every job in the local SLURM's queue."""
    squeue = subprocess.run(
        ["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True
    )
    return squeue.stdout.split()


def test_a_node_set_down_requeues_the_job_which_resumes(
    reference: Path, tmp_path: Path, local_slurm: Slurm
) -> None:
    # An earlier test's job may still be ending: let it, so that this job's node runs it alone.
    deadline = time.monotonic() + 120
    while _queued() and time.monotonic() < deadline:
        time.sleep(1)
    job = submit_fake(tmp_path, "nodefail", env=job_env(EVALPIPE_FAKE_DELAY_S="1"))
    wait_for_state(job, "RUNNING")
    deadline = time.monotonic() + 60
    while not (job.run_dir / "samples.jsonl").is_file() and time.monotonic() < deadline:
        time.sleep(0.2)
    (task,) = local_slurm.states(job.job_id)
    node = task.nodes
    others = subprocess.run(
        ["squeue", "-h", "-w", node, "-o", "%i"], capture_output=True, text=True, check=True
    ).stdout.split()
    if others != [job.job_id]:  # the SLURM is shared: never fail someone else's job
        subprocess.run(["scancel", job.job_id], check=False)
        pytest.skip(f"{node} also runs jobs {others}; not setting it DOWN")
    try:
        assert not _scontrol_node(node, "state=down", "reason=evalpipe-node-failure-test")
        # The site's policy here: the job is requeued and held for SLURM's requeue delay.
        wait_for_state(job, "PENDING", timeout_s=60)
    finally:
        _return_to_service(node)
    # Release the requeued job (held for BeginTime). Its relaunch on a node just returned can
    # fail and leave it held again: "launch failed requeued held", or slurmd's "Duplicate
    # jobid" while the first launch is still ending there, which also drains that node. So it
    # is released again until it ends, and the node is returned to service for the tests after.
    deadline = time.monotonic() + 240
    try:
        while True:
            time.sleep(3)  # see preempt(): a relaunch in the same second is refused
            release = ["update", f"JobId={job.job_id}", "StartTime=now"], ["release", job.job_id]
            for argv in release:
                subprocess.run(["scontrol", *argv], capture_output=True, check=False)
            try:
                status = job.wait(poll_s=1, timeout_s=30)
                break
            except SlurmError:  # not ended yet: held again, or still running
                if time.monotonic() > deadline:
                    raise
                _return_to_service(node)  # a node drained by a failed relaunch
    finally:
        _return_to_service(node)
    assert status.ok, status

    manifest = json.loads((job.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["slurm"]["restart_count"] >= 1
    log = next((job.run_dir / "logs").glob("*.out")).read_text()
    # Here SLURM signals the job's processes (SIGTERM: they checkpoint) and requeues it.
    assert "DUE TO NODE FAILURE" in log and "SIGTERM received" in log
    resumed, whole = samples(job.run_dir), samples(reference)  # samples() refuses duplicates
    assert resumed.keys() == whole.keys()
    assert {k: outcome(v) for k, v in resumed.items()} == {k: outcome(v) for k, v in whole.items()}


def raylets(job_id: str) -> list[str]:
    marker = f"evalpipe-ray-{job_id}"
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in text:
            found.append(text)
    return found


@pytest.mark.ray
def test_two_node_job_brings_up_ray_measures_every_nodes_gpus_and_tears_it_down(
    local_slurm: Slurm, tmp_path: Path
) -> None:
    """TP=4 × PP=2 on two 4-GPU nodes, each node's GPUs NVML's (scripted: tests/sites/fake_nvml):
    the runner records node1's, the monitor step the job starts on node2 records node2's."""
    cluster = site_profile(tmp_path, "fake_nvml")
    job = submit_fake(
        tmp_path, "ray", "--tp", "4", "--pp", "2", "--limit", "1", cluster=cluster,
        env=job_env(EVALPIPE_FAKE_DELAY_S="2"),  # seconds of samples on both nodes
    )  # fmt: skip
    status = job.wait(poll_s=1, timeout_s=300)
    log = next((job.run_dir / "logs").glob("*.out")).read_text()
    assert status.ok, log[-3000:]
    assert re.search(r"Ray cluster at \S+ is up: 2 node\(s\), 8 GPU\(s\)", log), log[-3000:]
    active = log.split("Active:", 1)[1].split("Pending:", 1)[0]
    assert len(re.findall(r"^ 1 node_[0-9a-f]+$", active, re.M)) == 2  # `ray status` saw both
    assert "--distributed-executor-backend ray" in (job.run_dir / "job.sbatch").read_text()
    assert raylets(job.job_id) == []
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"evalpipe-ray-{job.job_id}"
    assert not tmp.exists()

    # Every node measured: node2's series on the runner's phases, and 2 × 4 GPUs in the summary.
    with open(job.run_dir / "metrics-node2.csv", newline="") as f:
        node2 = list(csv.DictReader(f))
    assert {r["device"] for r in node2} == {"gpu0", "gpu1", "gpu2", "gpu3"}
    assert {r["host"] for r in node2} == {"node2"}
    assert any(r["phase"].startswith("generate:") for r in node2)
    summary = json.loads((job.run_dir / "summary.json").read_text())
    devices = summary["devices"]
    assert sorted((d["host"], d["device"]) for d in devices) == [
        (node, f"gpu{i}") for node in ("node1", "node2") for i in range(4)
    ]
    assert summary["throughput"]["gpus"] == 8
    assert all(d["peak_memory_gib"] >= 10 and d["energy_j"] > 0 for d in devices)
    # The report's J/token is every GPU's energy over the generated tokens.
    report = evalpipe("report", str(job.run_dir), "--format", "json", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    (row,) = json.loads(report.stdout)["runs"]
    energy = sum(d["energy_j"] for d in devices)
    tokens = summary["throughput"]["generated_tokens"]
    assert row["j_per_token"] == pytest.approx(energy / tokens)


@pytest.mark.ray
@pytest.mark.vllm
def test_vllm_tp2_over_ray_across_two_nodes_equals_a_single_process_run(
    local_slurm: Slurm, tmp_path: Path, vllm_env: dict, tiny_random_path: Path
) -> None:
    """The CPU build of vLLM with TP=2 over Ray, one rank per node, through the rendered
    multi-node script (tests/sites/ray_cpu lets the CPU platform use Ray), against the same
    samples from one process (this one, recorded with log-probabilities). TP=2 sums in another
    order, so the completions are equal modulo near-ties (tests/neartie.py). Each node's engine
    process is measured by its node's monitor: rank 1 is a Ray worker under node2's raylet, not
    a child of any monitor."""
    from neartie import record_run, tokenizer_decode

    from evalpipe.tasks import load_tasks

    single = record_run(
        "tiny_random",
        load_tasks(categories=["math"]),
        tmp_path / "single",
        limit=2,
        decode=tokenizer_decode(tiny_random_path),
    )
    selection = ("--categories", "math", "--limit", "2")
    cluster = site_profile(
        tmp_path, "ray_cpu", env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"},  # one core per rank
        gpus_per_node=1, cpus_per_node=2, memory_per_node_gib=4,
    )  # fmt: skip
    result = evalpipe(
        "submit", "--preset", "tiny_random", "--cluster", cluster, "--tp", "2", *selection,
        "--out", "ray", "--wait", "--poll", "2", cwd=tmp_path, timeout=600,
    )  # fmt: skip
    run_dir = tmp_path / "ray"
    log = "".join(p.read_text() for p in (run_dir / "logs").glob("*.out"))
    assert result.returncode == 0, result.stderr + log[-4000:]
    assert "#SBATCH --nodes=2" in (run_dir / "job.sbatch").read_text()
    assert "world_size=2 rank=1" in log and "TP rank 1" in log  # rank 1 ran, over Ray
    assert len(samples(run_dir)) == 2
    single.assert_matches(run_dir)

    summary = json.loads((run_dir / "summary.json").read_text())
    by_host = {d["host"]: d for d in summary["devices"]}
    assert set(by_host) == {"node1", "node2"} and by_host["node2"]["device"] == "cpu"
    # node2's first reading is Ray's own processes and the monitor (about 0.5 GiB here); vLLM's
    # rank 1 (torch, vLLM, the model) adds about 1.7 GiB once it starts.
    with open(run_dir / "metrics-node2.csv", newline="") as f:
        first = float(next(csv.DictReader(f))["memory_used_gib"])
    assert by_host["node2"]["peak_memory_gib"] - first > 1.0, (first, by_host)
    assert raylets(job_id=json.loads((run_dir / "submission.json").read_text())["job_id"]) == []


def preempt(job: Job, *scancel: str) -> None:
    """Once the job has written samples, send the signal; release the requeued job at once."""
    wait_for_state(job, "RUNNING")
    deadline = time.monotonic() + 60
    while not (job.run_dir / "samples.jsonl").is_file() and time.monotonic() < deadline:
        time.sleep(0.2)
    subprocess.run(["scancel", *scancel, job.job_id], check=True)
    # SLURM holds a requeued batch job for 120 s (BeginTime); release it to keep the test short.
    wait_for_state(job, "PENDING", "BeginTime")
    # But not within the second of the requeue: slurmd refuses a relaunch whose credential is
    # no newer (whole seconds) than the revocation of the killed attempt ("Job credential
    # revoked"), which fails the job.
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"JobId={job.job_id}", "StartTime=now"], check=True)


def test_a_hung_engine_ends_with_the_stall_status_and_diagnostics_after_one_requeue(
    tmp_path: Path,
) -> None:
    """The fake engine answers one step of 8 requests, then hangs; a 5 s stall timeout ends
    each attempt with exit 124 and its diagnostics, the script requeues once, and the job then
    fails with 124: well under a minute, against a 30-minute time limit."""
    started = time.monotonic()
    env = job_env(EVALPIPE_FAKE_HANG_AFTER="8")
    cluster = site_profile(tmp_path, "hung_engine")  # the fake engine hangs in the job
    job = submit_fake(
        tmp_path, "hung", "--limit", "6", "--stall-timeout", "5", env=env, cluster=cluster
    )
    wait_for_state(job, "PENDING", "BeginTime", timeout_s=120)  # requeued after the first stall
    time.sleep(2)  # see preempt(): not within the second of the requeue
    subprocess.run(["scontrol", "update", f"JobId={job.job_id}", "StartTime=now"], check=True)
    status = job.wait(poll_s=1, timeout_s=180)
    took = time.monotonic() - started
    log = next((job.run_dir / "logs").glob("*.out")).read_text()
    assert not status.ok and took < 180, log[-3000:]
    (task,) = job.slurm.states(job.job_id)
    assert task.state == "FAILED", task
    assert f"requeueing job {job.job_id} once after the stall" in log
    assert "stalled again after its requeue; not requeueing" in log
    assert (job.run_dir / "stall-requeues").read_text() == f"{job.job_id}\n"
    for restart in (0, 1):
        report = job.run_dir / f"stall-{job.job_id}.{restart}.txt"
        assert f"diagnostics in {report}" in log
        text = report.read_text()
        assert "no progress for " in text and "during generate (limit 5 s" in text
        assert "in step" in text  # the hung engine's stack
        assert "metrics.csv:" in text  # the device readings at the stall
        assert f"evalpipe: job {job.job_id} on" in text  # the job log's last lines
    manifest = json.loads((job.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["error"].startswith("stalled: ")
    assert len(samples(job.run_dir)) == 16  # what finished before each stall is kept


def test_submitit_executor_checkpoints_requeues_and_resumes(
    reference: Path, tmp_path: Path
) -> None:
    env = job_env(EVALPIPE_FAKE_DELAY_S="2")
    job = submit_fake(tmp_path, "run", "--executor", "submitit", env=env)
    assert " -u -m submitit.core._submit " in (job.run_dir / "job.sbatch").read_text()
    preempt(job, "--signal=USR2")  # submitit's preemption signal, to every process of the step
    status = job.wait(poll_s=1, timeout_s=180)
    assert status.ok, status
    log = "".join(p.read_text() for p in (job.run_dir / "submitit").glob("*_log.*"))
    assert "Calling checkpoint method" in log and "resuming:" in log
    got = samples(job.run_dir)
    assert {k: outcome(v) for k, v in got.items()} == {
        k: outcome(v) for k, v in samples(reference).items()
    }


@pytest.fixture(scope="module", autouse=True)
def _cancel_leftover_jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A failed test must not leave its jobs holding the local nodes: cancel what it submitted."""
    yield
    base = str(tmp_path_factory.getbasetemp())
    queue = subprocess.run(["squeue", "-h", "-o", "%i %Z"], capture_output=True, text=True)
    ours = [line.split()[0] for line in queue.stdout.splitlines() if base in line]
    if ours:
        subprocess.run(["scancel", *ours], check=False)


def test_one_job_holds_both_phases_of_a_judged_run(local_slurm: Slurm, tmp_path: Path) -> None:
    task = ROOT / "tests" / "fixtures" / "judged" / "capitals.yaml"
    result = evalpipe(
        "submit", "--preset", "tiny_random", "--cluster", "local", "--backend", "fake",
        "--tasks", f"judge:{task}", "--judge", "tiny_random", "--out", "judged",
        "--wait", "--poll", "1", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    run = tmp_path / "judged"
    assert set(samples(run)) == {("capitals_judged", "fr"), ("capitals_judged", "jp")}
    (folder,) = (run / "judgments").iterdir()
    judged = [json.loads(x) for x in (folder / "judgments.jsonl").read_text().splitlines()]
    assert sorted(j["sample_id"] for j in judged) == ["fr@2", "jp@1"]
    summary = json.loads((folder / "summary.json").read_text())
    # The fake judge answers without a rating: every judgment is a counted parse failure.
    assert summary["judgments"] == summary["parse_failures"] == 2
    # Both fake judges fit the node beside each other: the job asks for both and judges as
    # answers are written.
    (log,) = (run / "logs").glob("*.out")
    assert "judging answers side by side as they are written" in log.read_text()
    assert "# Judge placement, side-by-side:" in (run / "job.sbatch").read_text()
