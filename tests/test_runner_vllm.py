"""`evalpipe run` with the real vLLM engine on the CPU: signals, kill -9, files (slow tier).

Each vLLM start costs seconds, so there are three `evalpipe run` processes on one directory
(stopped by SIGUSR1, killed with -9, finished) and one uninterrupted reference run in this
process, through the same runner with the same options, recorded with log-probabilities: the
runs batch differently, so their completions are compared modulo near-ties (tests/neartie.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from neartie import RecordedRun, record_run, tokenizer_decode

from evalpipe.core import exitcodes
from evalpipe.rundir.samplelog import read_json

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[1]
# A window of one request gives the signals many moments to land; the reference streams with
# the default window.
# A task with short prompts and answers keeps generation to a fraction of the process start.
RUN = ["--preset", "tiny_random", "--backend", "vllm", "--tasks", "ordering", "--limit", "6"]
WINDOW = ["--window", "1"]
TOTAL = 6


def start(out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "evalpipe", "run", *RUN, *(extra or WINDOW), "--out", str(out)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def lines(out: Path) -> list[dict]:
    path = out / "samples.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def wait_for_lines(out: Path, n: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 240
    while len(lines(out)) < n:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"run ended or stalled before {n} samples: {proc.communicate()[1][-3000:]}")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def reference(
    tmp_path_factory: pytest.TempPathFactory, vllm_env: dict, tiny_random_path: Path
) -> RecordedRun:
    from evalpipe.tasks import load_tasks

    return record_run(
        "tiny_random",
        load_tasks(tasks=["ordering"]),
        tmp_path_factory.mktemp("vllm-reference") / "run",
        limit=TOTAL,
        decode=tokenizer_decode(tiny_random_path),
    )


def test_signal_then_kill_9_then_rerun_equals_an_uninterrupted_run(
    tmp_path: Path, reference: RecordedRun
) -> None:
    out = tmp_path / "run"
    first = start(out)
    wait_for_lines(out, 1, first)
    first.send_signal(signal.SIGUSR1)
    _, stderr = first.communicate(timeout=300)
    assert first.returncode == exitcodes.RESUMABLE, stderr[-3000:]
    stopped = len(lines(out))
    assert 1 <= stopped < TOTAL
    assert read_json(out / "manifest.json")["status"] == "interrupted"

    second = start(out)
    wait_for_lines(out, stopped + 2, second)
    second.kill()
    second.communicate(timeout=60)
    assert len(lines(out)) < TOTAL, "the run finished before it could be killed"

    third = start(out)
    stdout, stderr = third.communicate(timeout=600)
    assert third.returncode == exitcodes.OK, stderr[-3000:]
    # Nothing lost or duplicated, the same completions (modulo near-ties).
    equal = reference.assert_matches(out)
    manifest = read_json(out / "manifest.json")
    assert [a["status"] for a in manifest["attempts"]] == ["interrupted", "lost", "complete"]
    got, want = read_json(out / "summary.json"), read_json(reference.out / "summary.json")
    if equal:  # a near-tie taken the other way may change a score
        assert (got["tasks"], got["categories"]) == (want["tasks"], want["categories"])
    assert manifest["config_hash"] == read_json(reference.out / "manifest.json")["config_hash"]

    # What the command line left behind is a complete run directory.
    records = lines(out)
    assert [r["task"] for r in records] == ["ordering"] * TOTAL
    assert all(r["prompt_tokens"] > 0 and r["completion_tokens"][0] > 0 for r in records)
    assert (got["complete"], got["n_done"], got["n_total"]) == (True, TOTAL, TOTAL)
    assert got["throughput"]["tokens_per_s"] > 0
    # vLLM's scheduler reports its busy slots: with a window of one request, every step had
    # one sequence of max_num_seqs, all tail.
    occupancy = got["occupancy"]
    assert occupancy["slots"] == manifest["engine"]["resolved"]["max_num_seqs"] > 2
    assert occupancy["tail_share"] == 1.0 and occupancy["tail_tokens"] > 0
    assert occupancy["preemptions"] == 0  # one sequence at a time never fills the cache
    assert manifest["status"] == "complete"
    assert manifest["engine"]["backend"] == "vllm"
    assert manifest["versions"]["vllm"] and manifest["versions"]["torch"]
    assert manifest["timings"]["load"] > 0
    metrics = (out / "metrics.csv").read_text()
    assert ",load," in metrics and ",generate:reasoning," in metrics
    assert "ordering" in stdout and "(micro)" in stdout


def test_two_replicas_stopped_then_resumed_with_one_equal_an_uninterrupted_run(
    tmp_path: Path, reference: RecordedRun
) -> None:
    """Two CPU engine processes (one core each) share the run; a SIGUSR1 aborts both, and the
    run resumes in one in-process engine: the layout is not part of the fingerprint."""
    out = tmp_path / "run"
    first = start(out, "--replicas", "2", "--window", "1")
    wait_for_lines(out, 1, first)
    first.send_signal(signal.SIGUSR1)
    _, stderr = first.communicate(timeout=300)
    assert first.returncode == exitcodes.RESUMABLE, stderr[-3000:]
    assert "2 replica(s)" in stderr
    stopped = len(lines(out))
    assert 1 <= stopped < TOTAL
    manifest = read_json(out / "manifest.json")
    assert [r["env"] for r in manifest["engine"]["replicas"]] == [
        {"VLLM_CPU_OMP_THREADS_BIND": "0"},
        {"VLLM_CPU_OMP_THREADS_BIND": "1"},
    ]
    second = start(out, "--replicas", "1")
    _, stderr = second.communicate(timeout=600)
    assert second.returncode == exitcodes.OK, stderr[-3000:]
    reference.assert_matches(out)
