"""Progress display: a bar on a terminal, sparse plain lines in a batch log."""

from __future__ import annotations

import io

from evalpipe.run.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_terminal_bar_shows_done_rate_and_eta() -> None:
    out, clock = io.StringIO(), Clock()
    bar = Progress(100, 0, stream=out, tty=True, clock=clock)
    clock.now = 10.0
    bar.advance(25, 500)
    frame = out.getvalue().split("\r")[-1]
    assert frame.startswith("[######------------------] 25/100 samples (25%)")
    assert "50.0 tok/s" in frame and "ETA 30s" in frame
    bar.close()
    assert out.getvalue().endswith("\n")


def test_batch_log_gets_periodic_lines_and_resume_note() -> None:
    out, clock = io.StringIO(), Clock()
    bar = Progress(100, 40, stream=out, tty=False, interval_s=30.0, clock=clock)
    for step in range(1, 7):
        clock.now = 10.0 * step
        bar.advance(10, 100)
    bar.close()  # the last line already said 100/100: nothing repeated
    got = out.getvalue().splitlines()
    assert got[0] == "resuming: 40/100 samples already done"
    assert "\r" not in out.getvalue()
    # Only this attempt's 60 samples in 60 s count toward the rate.
    assert got[1:] == [
        "progress: 40/100 samples (40%)  - tok/s  ETA ?",
        "progress: 70/100 samples (70%)  10.0 tok/s  ETA 30s",
        "progress: 100/100 samples (100%)  10.0 tok/s  ETA 0s",
    ]


def test_samples_per_second_when_nothing_is_generated() -> None:
    out, clock = io.StringIO(), Clock()
    bar = Progress(100, 0, stream=out, tty=False, interval_s=0.0, clock=clock)
    clock.now = 4.0
    bar.advance(20, 0)  # multiple choice by log-probabilities: options scored, no tokens
    assert (
        out.getvalue().splitlines()[-1] == "progress: 20/100 samples (20%)  5.0 samples/s  ETA 16s"
    )
