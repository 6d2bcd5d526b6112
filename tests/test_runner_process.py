"""A real process is signalled or killed mid-run; rerunning it loses and duplicates nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import runner_support
from runner_support import lines

from evalpipe.core import exitcodes
from evalpipe.rundir.samplelog import read_json

REPO = Path(__file__).resolve().parents[1]
DRIVER = Path(runner_support.__file__)


def start(out: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, str(DRIVER), str(out), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_lines(out: Path, n: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    samples = out / "samples.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if samples.exists() and samples.read_text().count("\n") >= n:
            return
        if proc.poll() is not None:
            pytest.fail(f"driver ended early ({proc.returncode}): {proc.communicate()[1]}")
        time.sleep(0.02)
    proc.kill()
    pytest.fail(f"{samples} never reached {n} lines")


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTERM], ids=["USR1", "TERM"])
def test_signal_checkpoints_exits_resumable_and_rerun_completes(
    tmp_path: Path, reference: Path, signum: signal.Signals
) -> None:
    out = tmp_path / "run"
    proc = start(out, "--delay", "0.3", "--window", "2")
    wait_for_lines(out, 2, proc)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == exitcodes.RESUMABLE, stderr
    assert f"{signum.name} received" in stderr
    done = lines(out)
    assert 2 <= len(done) < 20  # requests in flight at the signal were aborted
    assert read_json(out / "manifest.json")["status"] == "interrupted"
    summary = read_json(out / "summary.json")
    assert (summary["complete"], summary["n_done"]) == (False, len(done))

    rerun = start(out, "--window", "2")
    _, stderr = rerun.communicate(timeout=60)
    assert rerun.returncode == exitcodes.OK, stderr
    assert f"resuming: {len(done)}/20 samples already done" in stderr
    assert lines(out) == lines(reference)
    assert (
        read_json(out / "summary.json")["tasks"] == read_json(reference / "summary.json")["tasks"]
    )


def test_kill_9_then_rerun_equals_an_uninterrupted_run(tmp_path: Path, reference: Path) -> None:
    out = tmp_path / "run"
    proc = start(out, "--delay", "0.2", "--window", "2")
    wait_for_lines(out, 4, proc)
    proc.kill()
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert read_json(out / "manifest.json")["status"] == "running"
    assert len(lines(out)) < 20

    rerun = start(out, "--window", "2")
    _, stderr = rerun.communicate(timeout=60)
    assert rerun.returncode == exitcodes.OK, stderr
    assert lines(out) == lines(reference)  # nothing lost, nothing duplicated, same order
    manifest = read_json(out / "manifest.json")
    assert [a["status"] for a in manifest["attempts"]] == ["lost", "complete"]
    got, want = read_json(out / "summary.json"), read_json(reference / "summary.json")
    assert (got["tasks"], got["categories"]) == (want["tasks"], want["categories"])
