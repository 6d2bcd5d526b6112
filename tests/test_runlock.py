"""One writer per run directory: real processes contending, stale locks taken over, the
heartbeat lock for file systems whose fcntl locks cannot be trusted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runner_support import fake_engine, lines, preset, toy_tasks

from evalpipe.core import exitcodes, provenance
from evalpipe.core.errors import RunDirLockedError
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.run.shardmerge import merge_run
from evalpipe.rundir import lock as runlock
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.lock import Owner, RunLock, fcntl_trustworthy

REPO = Path(__file__).resolve().parents[1]
RUN = ["run", "--preset", "tiny_random", "--backend", "fake", "--tasks", "arithmetic",
       "--limit", "40"]  # fmt: skip


def evalpipe_run(out: Path, delay: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "EVALPIPE_FAKE_DELAY_S": delay}
    return subprocess.Popen(
        [sys.executable, "-m", "evalpipe", *RUN, "--out", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_runs_on_one_directory_never_interleave(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = evalpipe_run(out, "0.2")
    deadline = time.monotonic() + 60
    while not RunDir(out).lock.exists():
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.02)
    second = evalpipe_run(out, "0")
    _, err = second.communicate(timeout=60)
    assert second.returncode == exitcodes.ERROR, err
    assert f"is in use by pid {first.pid} on {provenance.host()}" in err
    assert "wait for it, or `kill" in err
    _, err = first.communicate(timeout=120)
    assert first.returncode == exitcodes.OK, err
    records = lines(out)
    assert len(records) == 40 and len({r["sample_id"] for r in records}) == 40
    assert not RunDir(out).lock.exists()  # released at exit


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(done.stdout)


def write_lock(run_dir: Path, **owner: object) -> None:
    fields = {"host": provenance.host(), "pid": dead_pid(), "started_at": "2026-01-01T00:00:00Z",
              "job": None, "method": "fcntl"} | owner  # fmt: skip
    run_dir.mkdir(parents=True, exist_ok=True)
    RunDir(run_dir).lock.write_text(json.dumps(fields))


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path: Path, caplog) -> None:
    out = tmp_path / "run"
    write_lock(out, method="heartbeat")  # its file stays; the process is gone
    engine = fake_engine()
    result = run_evaluation(
        lambda s: engine, toy_tasks(), out, preset=preset(), options=RunOptions(backend="fake")
    )
    assert result.status == "complete"
    assert "Taking over the run directory from pid" in caplog.text


@pytest.mark.parametrize("trust_fcntl", [True, False], ids=["fcntl", "heartbeat"])
def test_another_hosts_lock_holds_while_its_job_runs(tmp_path: Path, trust_fcntl: bool) -> None:
    out = tmp_path / "run"
    write_lock(out, host="node9", pid=4242, job="1234_5", method="heartbeat")
    finished: dict[str, bool] = {"1234_5": False}
    lock = RunLock(out, job_finished=finished.get, trust_fcntl=lambda p: trust_fcntl)
    with pytest.raises(RunDirLockedError) as refused:
        lock.acquire()
    assert str(refused.value) == (
        f"{out} is in use by pid 4242 on node9, job 1234_5, since 2026-01-01T00:00:00Z; "
        "wait for it, or `scancel 1234_5`."
    )
    finished["1234_5"] = True  # SLURM says the job ended: its lock is stale
    os.utime(RunDir(out).lock, (0, 0))  # and its heartbeat stopped long ago
    with lock:
        owner = Owner.parse(RunDir(out).lock.read_text())
        assert owner is not None and owner.pid == os.getpid()
        assert owner.method == ("fcntl" if trust_fcntl else "heartbeat")
    assert not RunDir(out).lock.exists()


def test_the_heartbeat_lock_refuses_a_second_holder_and_keeps_beating(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(runlock, "HEARTBEAT_S", 0.05)
    untrusted = {"trust_fcntl": lambda p: False}
    with RunLock(tmp_path, **untrusted):
        path = RunDir(tmp_path).lock
        os.utime(path, (0, 0))
        time.sleep(0.3)
        assert time.time() - path.stat().st_mtime < 5  # refreshed by the heartbeat
        with pytest.raises(RunDirLockedError, match=f"pid {os.getpid()} on"):
            RunLock(tmp_path, **untrusted).acquire()
    assert not path.exists()


def test_merge_is_refused_while_a_run_holds_the_directory(tmp_path: Path) -> None:
    (tmp_path / "shards" / "0").mkdir(parents=True)
    with RunLock(tmp_path), pytest.raises(RunDirLockedError, match="is in use by"):
        # A second holder in this process: its fcntl lock is the same, the file names us.
        RunLock(tmp_path, trust_fcntl=lambda p: False).acquire()
    with RunLock(tmp_path, trust_fcntl=lambda p: False), pytest.raises(RunDirLockedError):
        merge_run(tmp_path)


def test_node_local_fcntl_locks_are_not_trusted(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/sda1 / ext4 rw,relatime 0 0\n"
        "10.0.0.1@tcp:/scratch /scratch lustre rw,localflock 0 0\n"
        "nas:/home /home nfs4 rw,local_lock=none 0 0\n"
        "nas:/old /old nfs rw,nolock 0 0\n"
    )
    assert fcntl_trustworthy(Path("/tmp/x"), mounts)
    assert not fcntl_trustworthy(Path("/scratch/me/run"), mounts)
    assert fcntl_trustworthy(Path("/home/me/run"), mounts)
    assert not fcntl_trustworthy(Path("/old/run"), mounts)
