"""The stall watchdog: its limits, and a run whose engine stops progressing (injected clock)."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pytest
from hung_engine import HungEngine
from runner_support import SCRIPT, lines, preset, toy_tasks

from evalpipe.catalog.preset import load_preset
from evalpipe.core import exitcodes
from evalpipe.core.errors import ConfigError, EngineError
from evalpipe.engine.protocol import EngineSettings
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.run.watchdog import Stall, StallLimits, Watchdog, default_limits, stall_limits
from evalpipe.rundir.samplelog import read_json


class FakeClock:
    """Monotonic seconds that advance only when something sleeps on them."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds
        time.sleep(0.001)  # let the watchdog's thread look


def test_check_trips_only_after_the_phase_limit_without_progress() -> None:
    clock = FakeClock()
    dog = Watchdog(StallLimits(load_s=100, generate_s=10), lambda s: None, clock=clock.now)
    clock.t = 99.0
    assert dog.check() is None  # loading: 100 s allowed
    dog.phase("generate")
    clock.t = 108.0
    dog.progress("an engine step finished")
    clock.t = 117.9
    assert dog.check() is None
    clock.t = 118.0
    stall = dog.check()
    assert stall == Stall(
        phase="generate", idle_s=10.0, limit_s=10, last_progress="an engine step finished"
    )
    assert stall.describe() == (
        "no progress for 10 s during generate (limit 10 s; last progress: an engine step finished)"
    )


def test_default_limits_are_generous_for_loading_a_big_model_and_minutes_for_generating() -> None:
    big = default_limits(load_preset("falcon_180b"))
    tiny = default_limits(load_preset("tiny_random"))
    llama = default_limits(load_preset("llama3_3_70b"))
    # docs/runner.md: 15 min, 28 min and 48 min (15 min + 6 s per GiB of bf16 weights).
    assert [round(d.load_s / 60) for d in (tiny, llama, big)] == [15, 28, 48]
    assert big.generate_s == tiny.generate_s == 600
    assert stall_limits(load_preset("tiny_random"), 0) is None
    assert stall_limits(load_preset("tiny_random"), 30) == StallLimits(load_s=30, generate_s=30)
    with pytest.raises(ConfigError, match=r"load_s=-1 must be a positive number of seconds"):
        StallLimits(load_s=-1, generate_s=5)


def test_a_hung_engine_ends_the_run_with_diagnostics_within_the_bound(tmp_path: Path) -> None:
    clock = FakeClock()
    engine = HungEngine(
        preset(), EngineSettings(), script=SCRIPT, clock=clock.now, sleep=clock.sleep, hang_after=5
    )
    limits = StallLimits(load_s=100, generate_s=30)
    stalls: list[Stall] = []
    exits: list[int] = []
    ended = threading.Event()

    def watchdog(on_stall):
        def record(stall: Stall) -> None:
            stalls.append(stall)
            on_stall(stall)

        return Watchdog(limits, record, clock=clock.now, poll_s=0.002).start()

    def exit_process(status: int) -> None:
        exits.append(status)
        ended.set()

    out = tmp_path / "run"

    def run() -> None:
        with contextlib.suppress(EngineError):  # the engine is closed under it at the end
            run_evaluation(
                lambda settings: engine,
                toy_tasks(),
                out,
                preset=preset(),
                options=RunOptions(backend="fake", window=2),
                watchdog=watchdog,
                exit_process=exit_process,
            )

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    try:
        assert ended.wait(30), "the watchdog never tripped"
        assert exits == [exitcodes.STALL]
        (stall,) = stalls
        # Tripped within one poll (a fake second of hanging per poll, at most a few) of the limit.
        assert stall.phase == "generate" and 30 <= stall.idle_s < 35
        manifest = read_json(out / "manifest.json")
        assert manifest["status"] == "interrupted"
        report = out / "stall-local.1.txt"
        assert manifest["error"].startswith("stalled: no progress for ")
        assert manifest["error"].endswith(f"diagnostics in {report}")
        text = report.read_text()
        assert "during generate (limit 30 s" in text
        assert "Python stacks of every thread (faulthandler)" in text
        assert "in step\n" in text and "hung_engine.py" in text  # the hung engine's frame
        assert "ray status" not in text  # no Ray in this run
        summary = read_json(out / "summary.json")
        # Every request the engine finished is kept, also those scored while it hung.
        assert summary["n_done"] == len(lines(out)) == len(engine.served) >= 5
        assert not summary["complete"]
    finally:
        engine.close()
        runner.join(10)


def test_submit_passes_the_stall_timeout_to_the_job_and_refuses_a_negative_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from evalpipe.cli import main

    args = ["submit", "--preset", "tiny_random", "--cluster", "local", "--backend", "fake"]
    assert main([*args, "--stall-timeout", "90", "--dry-run"]) == exitcodes.OK
    assert "    --stall-timeout 90 \\\n" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:
        main([*args, "--stall-timeout", "-3", "--dry-run"])
    assert refused.value.code == exitcodes.USAGE
    assert "expected 0 (off) or a positive number of seconds, got '-3'" in capsys.readouterr().err
