"""Chaos: `evalpipe run` killed with SIGKILL at random moments (seeded; the seed is printed) and
started again until it completes; the result must equal an uninterrupted run.

Kills land during start-up, generation, scoring in the code sandbox and, through a fault
injection point that widens the window, while the manifest is being replaced. With the real
engine a resumed run batches differently: its completions equal modulo near-ties.

    pytest -m chaos                                  # in `make test`: fake engine + 1 real trial
    pytest -m chaos -s -k real --chaos-trials 20 --timeout 0  # the soak (BENCHMARKS.md)
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from neartie import record_run, tokenizer_decode

from evalpipe.rundir.layout import RunDir

pytestmark = pytest.mark.chaos

REPO = Path(__file__).resolve().parents[1]
SLOW_REPLACE = str(REPO / "tests" / "slow_replace.py")
FAKE = ["--preset", "tiny_random", "--backend", "fake", "--tasks", "arithmetic,pyfuncs",
        "--limit", "24", "--monitor-interval", "0.2"]  # fmt: skip
REAL = ["--preset", "tiny_random", "--backend", "vllm", "--tasks", "arithmetic,ordering",
        "--limit", "8"]  # fmt: skip


def start(argv: list[str], out: Path, replace_pause: str = "0", **env: str) -> subprocess.Popen:
    """`evalpipe run`; with `replace_pause` seconds inside every atomic file replacement."""
    evalpipe = ["-m", "evalpipe"] if replace_pause == "0" else [SLOW_REPLACE, replace_pause]
    return subprocess.Popen(
        [sys.executable, *evalpipe, "run", *argv, "--out", str(out)],
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def outcome(out: Path) -> tuple[list[tuple], dict]:
    """Every sample's identity and result (sorted), and the summary's scores."""
    records = [json.loads(x) for x in RunDir(out).samples.read_text().splitlines()]
    keys = [(r["task"], r["sample_id"]) for r in records]
    assert len(keys) == len(set(keys)), "a sample was written twice"
    rows = sorted(
        (r["task"], r["sample_id"], r["completions"], r["extracted"], r["scores"]) for r in records
    )
    summary = json.loads(RunDir(out).summary.read_text())
    return rows, {"tasks": summary["tasks"], "categories": summary["categories"]}


def kill_until_complete(
    argv: list[str],
    out: Path,
    rng: random.Random,
    run_s: float,
    replace_pause: str = "0",
    **env: str,
) -> int:
    """Kill the run at a random moment of the first half of its expected duration `run_s`,
    start it again, and so on until a start completes (later starts get longer, so one does);
    the number of kills. Half, not all of it: a draw near `run_s` let the first start finish
    before its kill (seed 737375397), and a run never killed tests nothing."""
    kills = 0
    for attempt in range(60):
        proc = start(argv, out, replace_pause, **env)
        try:
            proc.wait(timeout=rng.uniform(0.0, run_s * (0.5 + attempt / 4)))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            continue
        stderr = proc.stderr.read() if proc.stderr else ""
        assert proc.returncode == 0, stderr[-3000:]
        return kills
    pytest.fail("the run never completed")


def timed_reference(argv: list[str], out: Path, replace_pause: str = "0", **env: str) -> float:
    """Run uninterrupted into `out`; its wall time."""
    t0 = time.monotonic()
    proc = start(argv, out, replace_pause, **env)
    assert proc.wait(timeout=600) == 0, proc.stderr.read() if proc.stderr else ""
    return time.monotonic() - t0


def seed_of(request: pytest.FixtureRequest) -> int:
    seed = request.config.getoption("--chaos-seed")
    seed = random.randrange(1 << 30) if seed is None else seed
    print(f"chaos seed {seed} (rerun with --chaos-seed {seed})")
    return seed


@pytest.mark.parametrize("pause", ["0", "0.3"], ids=["random", "in-manifest-replace"])
def test_random_kills_with_the_fake_engine(
    request: pytest.FixtureRequest, tmp_path: Path, pause: str
) -> None:
    env = {"EVALPIPE_FAKE_DELAY_S": "0.05"}
    reference = tmp_path / "reference"
    run_s = timed_reference(FAKE, reference, pause, **env)
    rng = random.Random(seed_of(request))
    out = tmp_path / "run"
    kills = kill_until_complete(FAKE, out, rng, run_s, pause, **env)
    assert kills >= 1
    assert outcome(out) == outcome(reference)
    statuses = [a["status"] for a in json.loads(RunDir(out).manifest.read_text())["attempts"]]
    assert statuses[-1] == "complete"
    assert not list(out.glob(".*.tmp")), "a killed replace left its temporary file behind"


@pytest.mark.vllm
def test_random_kills_with_the_real_engine(
    request: pytest.FixtureRequest, tmp_path: Path, vllm_env: dict, tiny_random_path: Path
) -> None:
    """A resumed run batches what is left, so the real engine's completions are compared with
    an uninterrupted run's modulo near-ties (tests/neartie.py); the kills are timed by an
    uninterrupted `evalpipe run`."""
    from evalpipe.tasks import load_tasks

    reference = record_run(
        "tiny_random",
        load_tasks(tasks=["arithmetic", "ordering"]),
        tmp_path / "reference",
        limit=8,
        decode=tokenizer_decode(tiny_random_path),
    )
    run_s = timed_reference(REAL, tmp_path / "uninterrupted")
    reference.assert_matches(tmp_path / "uninterrupted")
    rng = random.Random(seed_of(request))
    trials = request.config.getoption("--chaos-trials")
    started = time.monotonic()
    total_kills = 0
    for trial in range(trials):
        out = tmp_path / f"run{trial}"
        total_kills += kill_until_complete(REAL, out, rng, run_s)
        if reference.assert_matches(out):  # a near-tie taken the other way may change a score
            assert outcome(out)[1] == outcome(reference.out)[1]
    print(
        f"chaos: {trials} real-engine trial(s), {total_kills} SIGKILLs, every trial equal to "
        f"the uninterrupted run modulo near-ties, {time.monotonic() - started:.0f} s"
    )
